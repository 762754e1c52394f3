import { describe, expect, it } from "vitest";
import { latestIterationTurns, sampleTurns, summarizeTurns } from "./turns";

describe("latestIterationTurns", () => {
  it("takes the newest iteration's recorded turns beside its lengths", () => {
    const got = latestIterationTurns(
      [
        { iteration: 2, metrics: { lengths: [10, 40], turns: [1, 4] } },
        { iteration: 1, metrics: { lengths: [5], turns: [1] } },
      ],
      [],
    );
    expect(got).toEqual({ iteration: 2, turns: [1, 4], lengths: [10, 40], source: "metrics" });
  });

  it("falls back to the newest iteration's stored episodes, and is empty for single-turn jobs", () => {
    const samples = [
      { iteration: 1, length: 9, episode: { turns: 1 } },
      { iteration: 2, length: 30, episode: { turns: 3 } },
      { iteration: 2, length: 12, episode: null },
    ];
    expect(latestIterationTurns([{ iteration: 2, metrics: { lengths: [30, 12] } }], samples)).toEqual({ iteration: 2, turns: [3], lengths: [30], source: "samples" });
    expect(latestIterationTurns([{ iteration: 1, metrics: { lengths: [3] } }], [{ iteration: 1, length: 3 }]).turns).toEqual([]);
    expect(sampleTurns(samples)).toEqual({ turns: [1, 3], lengths: [9, 30] });
  });
});

describe("summarizeTurns", () => {
  it("gives mean / p90 / max and the tokens of each turn count, gaps included", () => {
    const summary = summarizeTurns([1, 1, 3, 1, 4], [10, 20, 60, 30, 100]);
    expect(summary).toMatchObject({ mean: 2, p90: 4, max: 4 });
    expect(summary?.buckets.map((b) => [b.turns, b.episodes, b.tokensMean, b.tokensMax])).toEqual([
      [1, 3, 20, 30],
      [2, 0, NaN, NaN],
      [3, 1, 60, 60],
      [4, 1, 100, 100],
    ]);
    expect(summarizeTurns([], [])).toBeNull();
    expect(() => summarizeTurns([1], [])).toThrow("differ");
  });
});
