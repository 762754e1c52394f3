import { describe, expect, it } from "vitest";
import { appendPoints, metricSeries, sparklinePath } from "./sparkline";

describe("appendPoints", () => {
  it("keeps only the last `window` points in x order", () => {
    const series = Array.from({ length: 10 }, (_, i) => ({ x: i, y: i * 2 }));
    const out = appendPoints(series, [{ x: 10, y: 20 }, { x: 11, y: 22 }], 5);
    expect(out.map((p) => p.x)).toEqual([7, 8, 9, 10, 11]);
  });

  it("replaces a redelivered x instead of duplicating it and sorts late arrivals", () => {
    const out = appendPoints([{ x: 1, y: 1 }, { x: 3, y: 3 }], [{ x: 3, y: 30 }, { x: 2, y: 2 }], 10);
    expect(out).toEqual([{ x: 1, y: 1 }, { x: 2, y: 2 }, { x: 3, y: 30 }]);
  });

  it("drops non-finite values and rejects an empty window", () => {
    expect(appendPoints([], [{ x: 1, y: NaN }], 3)).toEqual([]);
    expect(() => appendPoints([], [], 0)).toThrow(/window/);
  });
});

describe("sparklinePath", () => {
  it("spans the box from left to right, higher values drawn higher", () => {
    const d = sparklinePath([{ x: 0, y: 0 }, { x: 1, y: 10 }], 100, 20, 0);
    expect(d).toBe("M0.0,20.0 L100.0,0.0");
  });

  it("is empty with fewer than two points and flat series stay finite", () => {
    expect(sparklinePath([{ x: 0, y: 1 }], 10, 10)).toBe("");
    expect(sparklinePath([{ x: 0, y: 0 }, { x: 1, y: 0 }], 10, 10)).not.toContain("NaN");
  });
});

describe("metricSeries", () => {
  it("skips rows without the metric", () => {
    const rows = [
      { iteration: 1, metrics: { samples_per_s: 4 } },
      { iteration: 2, metrics: {} },
      { iteration: 3, metrics: { samples_per_s: 6 } },
    ];
    expect(metricSeries(rows, "samples_per_s")).toEqual([{ x: 1, y: 4 }, { x: 3, y: 6 }]);
  });
});
