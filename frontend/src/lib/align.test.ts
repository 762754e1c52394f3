import { describe, expect, it } from "vitest";
import { alignSeries, paddedRange } from "./align";

describe("alignSeries", () => {
  it("puts sparse series on the sorted union of x values with nulls for gaps", () => {
    const data = alignSeries([
      { points: [{ x: 3, y: 30 }, { x: 1, y: 10 }] },
      { points: [{ x: 2, y: 2 }] },
    ]);
    expect(data).toEqual([
      [1, 2, 3],
      [10, null, 30],
      [null, 2, null],
    ]);
  });

  it("is one empty x column without points", () => {
    expect(alignSeries([{ points: [] }])).toEqual([[], []]);
  });
});

describe("paddedRange", () => {
  it("widens a flat series around its value and keeps a zero floor for non-negative data", () => {
    expect(paddedRange(0, 0)).toEqual([0, 1]);
    expect(paddedRange(5, 5)).toEqual([0, 10]);
    expect(paddedRange(-2, -2)).toEqual([-4, 0]);
  });

  it("adds 5% headroom and survives missing data", () => {
    expect(paddedRange(10, 110)).toEqual([5, 115]);
    expect(paddedRange(0, 100)).toEqual([0, 105]);
    expect(paddedRange(null, null)).toEqual([0, 1]);
  });
});
