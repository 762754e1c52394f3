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
