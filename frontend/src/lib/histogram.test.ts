import { describe, expect, it } from "vitest";
import { binEdges, lengthHistogram } from "./histogram";
import { percentile } from "./stats";

describe("percentile", () => {
  it("uses nearest rank", () => {
    expect(percentile([5, 1, 3, 2, 4], 50)).toBe(3);
    expect(percentile([1, 2, 3, 4], 100)).toBe(4);
    expect(percentile([7], 99)).toBe(7);
    expect(percentile([], 50)).toBeNaN();
  });
});

describe("lengthHistogram", () => {
  it("counts every length exactly once", () => {
    const lengths = [0, 1, 2, 3, 10, 11, 50, 99, 100];
    const h = lengthHistogram(lengths, 10);
    expect(h.bins.reduce((sum, b) => sum + b.count, 0)).toBe(lengths.length);
    expect(h.bins[0].lo).toBe(0);
    expect(h.bins[h.bins.length - 1].hi).toBeGreaterThan(100);
  });

  it("uses integer-width bins and never more bins than distinct lengths allow", () => {
    expect(binEdges(9, 10)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    expect(lengthHistogram([0, 1, 2], 24).bins).toHaveLength(3);
  });

  it("marks the long tail as the top alpha share and reports p99/p50 skew", () => {
    // 80 short responses (length 10) and 20 long ones (length 200): the top 20% is exactly the long group.
    const lengths = [...Array(80).fill(10), ...Array(20).fill(200)];
    const h = lengthHistogram(lengths, 20, 0.2);
    expect(h.p50).toBe(10);
    expect(h.p99).toBe(200);
    expect(h.skew).toBe(20);
    expect(h.tailCount).toBe(20);
    const tailBins = h.bins.filter((b) => b.tail);
    expect(tailBins.length).toBeGreaterThan(0);
    expect(tailBins.every((b) => b.hi > h.tailThreshold)).toBe(true);
    expect(h.bins.reduce((sum, b) => sum + b.tailCount, 0)).toBe(20);
    const shortBin = h.bins.find((b) => b.lo <= 10 && 10 < b.hi);
    expect(shortBin?.tail).toBe(false);
    expect(shortBin?.count).toBe(80);
  });

  it("counts the tail inside a bin that straddles the threshold", () => {
    // Lengths 0..99 in 10 bins of 10; alpha 0.25 -> the tail starts at 75, in the middle of bin [70, 80).
    const h = lengthHistogram(Array.from({ length: 100 }, (_, i) => i), 10, 0.25);
    expect(h.tailThreshold).toBe(75);
    const straddling = h.bins[7];
    expect([straddling.lo, straddling.count, straddling.tailCount]).toEqual([70, 10, 5]);
    expect(h.bins[6].tail).toBe(false);
    expect(h.bins.slice(8).every((b) => b.tailCount === b.count)).toBe(true);
  });

  it("is empty for no samples and rejects a zero bin count", () => {
    expect(lengthHistogram([]).bins).toEqual([]);
    expect(() => lengthHistogram([1], 0)).toThrow(/binCount/);
  });
});

import { truncated } from "./histogram";

describe("truncated", () => {
  it("counts responses that reached max_tokens and their share", () => {
    expect(truncated([10, 64, 64, 30], 64)).toEqual({ count: 2, share: 0.5 });
    expect(truncated([10, 20], 64)).toEqual({ count: 0, share: 0 });
    expect(truncated([], 64)).toEqual({ count: 0, share: 0 });
    expect(truncated([5], undefined)).toEqual({ count: 0, share: 0 });
  });
});

import { latestIterationLengths } from "./histogram";

describe("latestIterationLengths", () => {
  it("prefers the newest iteration's recorded lengths sample over the few stored samples", () => {
    const iterations = [{ iteration: 1, metrics: { lengths: [1, 2] } }, { iteration: 2, metrics: { lengths: [5, 6, 7] } }];
    const samples = [{ iteration: 2, length: 9 }];
    expect(latestIterationLengths(iterations, samples)).toEqual({ iteration: 2, lengths: [5, 6, 7], truncated: null, source: "metrics" });
    expect(latestIterationLengths([{ iteration: 2, metrics: {} }], [{ iteration: 1, length: 3 }, { iteration: 2, length: 9 }])).toEqual({
      iteration: 2, lengths: [9], truncated: null, source: "samples",
    });
    const flagged = [{ iteration: 3, metrics: { lengths: [5, 8], lengths_truncated: [0, 1] } }];
    expect(latestIterationLengths(flagged, []).truncated).toEqual([false, true]);
    expect(latestIterationLengths([], [{ iteration: 1, length: 8, truncated: true }]).truncated).toEqual([true]);
  });
});

import { truncatedPerBin } from "./histogram";

describe("truncated flags recorded by the runtime", () => {
  it("count the flagged samples, not every length that reached max_tokens", () => {
    // a response of exactly max_tokens that ended on EOS is not truncated; the flags say which were cut
    expect(truncated([10, 64, 64, 30], 64, [false, true, false, false])).toEqual({ count: 1, share: 0.25 });
    expect(truncated([10, 20], undefined, [true, false])).toEqual({ count: 1, share: 0.5 });
    expect(truncated([10, 64], 64, [true])).toEqual({ count: 1, share: 0.5 }); // misaligned flags: the length rule
  });

  it("puts each flagged length in its bin", () => {
    const lengths = [1, 2, 30, 64, 64];
    const hist = lengthHistogram(lengths, 4);
    const perBin = truncatedPerBin(hist.bins, lengths, [false, false, false, true, true]);
    expect(perBin.reduce((a, b) => a + b, 0)).toBe(2);
    expect(perBin[perBin.length - 1]).toBe(2);
  });
});

import { recentIterationLengths } from "./histogram";

describe("recentIterationLengths", () => {
  it("joins every recorded length and flag of the newest iterations, oldest first", () => {
    const iterations = [
      { iteration: 1, metrics: { lengths: [1, 2], lengths_truncated: [0, 0] } },
      { iteration: 3, metrics: { lengths: [9], lengths_truncated: [1] } },
      { iteration: 2, metrics: { lengths: [5], lengths_truncated: [0] } },
    ];
    expect(recentIterationLengths(iterations, [], 2)).toEqual({ iteration: 3, lengths: [5, 9], truncated: [false, true], source: "metrics" });
    expect(recentIterationLengths(iterations, [], 10).lengths).toEqual([1, 2, 5, 9]);
  });
  it("has no flags when one drawn iteration lacks them, and falls back to stored samples when the newest is unrecorded", () => {
    const mixed = [{ iteration: 1, metrics: { lengths: [1] } }, { iteration: 2, metrics: { lengths: [4], lengths_truncated: [1] } }];
    expect(recentIterationLengths(mixed, [], 2).truncated).toBeNull();
    const unrecorded = [{ iteration: 1, metrics: { lengths: [1] } }, { iteration: 2, metrics: {} }];
    expect(recentIterationLengths(unrecorded, [{ iteration: 2, length: 7 }], 2)).toEqual({ iteration: 2, lengths: [7], truncated: null, source: "samples" });
  });
});
