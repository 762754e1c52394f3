import { describe, expect, it } from "vitest";
import { rankBySuite, suiteNames, type ScoredCheckpoint } from "./suiteRanking";

const runs: ScoredCheckpoint[][] = [
  [{ iteration: 2, scores: { held: { mean: 0.4, "pass@1": 0.4, "pass@k": 0.6 } } }, { iteration: 4, scores: { held: { mean: 0.5 } } }],
  [{ iteration: 2, scores: {} }],
  [{ iteration: 3, scores: { held: { mean: 0.9, "pass@1": 0.8, "pass@k": 1 }, math: { mean: 0.1 } } }, { iteration: 6, scores: { held: { mean: 0.9 } } }],
];

describe("rankBySuite", () => {
  it("orders runs by their best checkpoint's mean, unscored runs last", () => {
    const ranked = rankBySuite([10, 11, 12], runs, "held");
    expect(ranked.map((r) => [r.jobId, r.iteration, r.mean])).toEqual([[12, 6, 0.9], [10, 4, 0.5], [11, null, null]]);
    expect(ranked[1]).toMatchObject({ passAt1: null, passAtK: null });
  });
  it("lists every suite scored", () => {
    expect(suiteNames(runs)).toEqual(["held", "math"]);
    expect(rankBySuite([10, 11, 12], runs, "math")[0]).toMatchObject({ jobId: 12, iteration: 3, mean: 0.1 });
  });
});
