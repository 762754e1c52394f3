import { describe, expect, it } from "vitest";
import { availableMetrics, runSeries } from "./compare";

const rows = [
  { iteration: 2, created_at: "2026-01-01T00:00:30Z", metrics: { reward_mean: 0.5, kl: 0.1 } },
  { iteration: 1, created_at: "2026-01-01T00:00:10Z", metrics: { reward_mean: 0.25, note: "x" } },
];

describe("runSeries", () => {
  it("puts a metric on the iteration axis, sorted, skipping rows without it", () => {
    expect(runSeries(rows, "reward_mean", "iteration")).toEqual([{ x: 1, y: 0.25 }, { x: 2, y: 0.5 }]);
    expect(runSeries(rows, "kl", "iteration")).toEqual([{ x: 2, y: 0.1 }]);
  });

  it("puts it on wall seconds since the run's first iteration", () => {
    expect(runSeries(rows, "reward_mean", "time")).toEqual([{ x: 0, y: 0.25 }, { x: 20, y: 0.5 }]);
  });
});

describe("availableMetrics", () => {
  it("lists the preferred numeric metrics first, then the rest sorted; never strings", () => {
    expect(availableMetrics([rows, [{ iteration: 1, created_at: "", metrics: { zeta: 1, samples_per_s: 3 } }]])).toEqual([
      "reward_mean", "samples_per_s", "kl", "zeta",
    ]);
  });
});

import { commonTarget, runSummary } from "./compare";

describe("runSummary", () => {
  const fast = [0.1, 0.5, 0.7].map((r, i) => ({ iteration: i + 1, created_at: "", metrics: { reward_mean: r, samples_per_s: 10, iteration_seconds: 2 + i } }));
  const slow = [0.1, 0.2, 0.3].map((r, i) => ({ iteration: i + 1, created_at: "", metrics: { reward_mean: r } }));

  it("gives final/best reward, means, and when each run reached the common target", () => {
    const target = commonTarget([runSummary(fast, null), runSummary(slow, null)]);
    expect(target).toBe(0.3);
    expect(runSummary(fast, target)).toEqual({ iterations: 3, finalReward: 0.7, bestReward: 0.7, meanSamplesPerS: 10, meanIterationS: 3, firstIterationAtReward: 2 });
    expect(runSummary(slow, target)).toMatchObject({ firstIterationAtReward: 3, meanSamplesPerS: null });
    expect(commonTarget([runSummary([], null), runSummary(slow, null)])).toBeNull();
  });
});
