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

import { legendValue, valueAt } from "./align";

describe("valueAt / legendValue (hover on runs sampled at different x)", () => {
  // run A has points at 0, 10, 20 s; run B at 0, 7, 14, 21 s: on the shared x axis each has gaps
  const data = alignSeries([
    { points: [{ x: 0, y: 0 }, { x: 10, y: 1 }, { x: 20, y: 2 }] },
    { points: [{ x: 0, y: 5 }, { x: 7, y: 6 }, { x: 14, y: 7 }, { x: 21, y: 8 }] },
  ]);

  it("interpolates between a series' own neighbours and is null outside its range", () => {
    expect(valueAt(data[0], data[1], 7)).toBeCloseTo(0.7);
    expect(valueAt(data[0], data[2], 10)).toBeCloseTo(6 + 3 / 7);
    expect(valueAt(data[0], data[1], 21)).toBeNull(); // A ends at 20 s
    expect(valueAt([1, 2], [null, 4], 1)).toBeNull();
    expect(valueAt([1, 2], [null, 4], 2)).toBe(4);
  });

  it("shows every run's value at the hovered x: its own, else approximate, else --", () => {
    const idx7 = data[0].indexOf(7);
    expect(legendValue(data, 2, idx7)).toBe("6");
    expect(legendValue(data, 1, idx7)).toBe("≈0.7");
    expect(legendValue(data, 1, data[0].indexOf(21))).toBe("--");
    expect(legendValue(data, 1, null)).toBe("--");
  });
});
