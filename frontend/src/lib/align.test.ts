import { describe, expect, it } from "vitest";
import { alignSeries } from "./align";

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
