import { describe, expect, it } from "vitest";
import { DEFAULT_VIEW, ema, iterationToX, metricPoints, minSpanOf, recordedMetrics, REWARD_MIN_SPAN, viewFromParams, viewPoints, viewToParams, xByIteration, yRange } from "./chartView";

const rows = [
  { iteration: 2, created_at: "2026-01-01T00:00:30Z", metrics: { reward_mean: 0.5, samples: 16, entropy: 1.5 } },
  { iteration: 1, created_at: "2026-01-01T00:00:10Z", metrics: { reward_mean: 0.25, samples: 8, note: "x" } },
  { iteration: 3, created_at: "2026-01-01T00:00:50Z", metrics: { reward_mean: -0.1, samples_per_s: 2, iteration_seconds: 4 } },
];

describe("x axes", () => {
  it("puts a metric on iterations, samples seen (running total) or seconds since the first row", () => {
    expect(metricPoints(rows, "reward_mean", "iteration").map((p) => p.x)).toEqual([1, 2, 3]);
    expect(metricPoints(rows, "reward_mean", "samples").map((p) => p.x)).toEqual([8, 24, 32]); // 8, +16, +2*4
    expect(metricPoints(rows, "reward_mean", "time").map((p) => p.x)).toEqual([0, 20, 40]);
    expect(metricPoints(rows, "entropy", "iteration")).toEqual([{ x: 2, y: 1.5 }]);
  });

  it("stops the samples axis at a row that says nothing of its samples", () => {
    const gap = [{ iteration: 1, created_at: "", metrics: { samples: 4 } }, { iteration: 2, created_at: "", metrics: {} }, { iteration: 3, created_at: "", metrics: { samples: 4 } }];
    expect([...xByIteration(gap, "samples").entries()]).toEqual([[1, 4]]);
  });

  it("maps a marker between iterations onto the axis, linear between rows", () => {
    const xs = xByIteration(rows, "samples");
    expect(iterationToX(xs, 1.5)).toBe(16);
    expect(iterationToX(xs, 3)).toBe(32);
    expect(iterationToX(xs, 0.5)).toBeNull();
    expect(iterationToX(xs, 4)).toBeNull();
  });
});

describe("smoothing", () => {
  it("is off at 0 and a debiased EMA otherwise (the first point is the first value)", () => {
    const points = [{ x: 1, y: 1 }, { x: 2, y: 3 }, { x: 3, y: 3 }];
    expect(ema(points, 0)).toEqual(points);
    const smooth = ema(points, 0.5);
    expect(smooth[0].y).toBeCloseTo(1);
    expect(smooth[1].y).toBeCloseTo((0.25 + 1.5) / 0.75); // (0.5*0.5*1 + 0.5*3) / (1 - 0.25)
    expect(smooth[2].y).toBeGreaterThan(smooth[1].y);
    expect(smooth[2].y).toBeLessThan(3);
  });

  it("drops the values a log scale cannot draw", () => {
    expect(viewPoints([{ x: 1, y: 0 }, { x: 2, y: -1 }, { x: 3, y: 5 }], { smoothing: 0, log: true })).toEqual([{ x: 3, y: 5 }]);
  });
});

describe("y range", () => {
  it("keeps 0 in view with the zero baseline, so a flat line near 0.3 reads as flat", () => {
    const [lo, hi] = yRange(0.3, 0.32, { log: false, zero: false });
    expect(lo).toBeGreaterThan(0.29);
    expect(hi).toBeLessThan(0.33);
    expect(yRange(0.3, 0.32, { log: false, zero: true })[0]).toBe(0);
    expect(yRange(-2, -1, { log: false, zero: true })[1]).toBe(0);
  });

  it("draws a reward at least REWARD_MIN_SPAN high, so a flat run does not read as a climb", () => {
    const linear = { log: false, zero: false };
    const [lo, hi] = yRange(0.3, 0.32, linear, minSpanOf("reward_mean"));
    expect(hi - lo).toBeCloseTo(REWARD_MIN_SPAN);
    expect(lo).toBeLessThan(0.3);
    expect(hi).toBeGreaterThan(0.32);
    expect(yRange(0.01, 0.02, linear, REWARD_MIN_SPAN)).toEqual([0, REWARD_MIN_SPAN]); // never below 0 for rewards >= 0
    const [low] = yRange(-0.31, -0.3, linear, REWARD_MIN_SPAN);
    expect(low).toBeLessThan(-0.35); // negative rewards are widened both ways
    expect(yRange(0.1, 0.7, linear, REWARD_MIN_SPAN)).toEqual(yRange(0.1, 0.7, linear)); // a wide range is its own
    expect(minSpanOf("len_p99")).toBe(0);
    expect(yRange(0.3, 0.32, { log: true, zero: false }, REWARD_MIN_SPAN)).toEqual([0.1, 1]);
  });

  it("spans whole decades on a log scale", () => {
    expect(yRange(0.02, 300, { log: true, zero: false })).toEqual([0.01, 1000]);
    expect(yRange(5, 5, { log: true, zero: false })).toEqual([1, 100]);
  });
});

describe("view in the URL", () => {
  it("round-trips, writing only what differs from the default and keeping other parameters", () => {
    const view = { x: "samples" as const, smoothing: 0.6, log: true, zero: true };
    const params = viewToParams(view, new URLSearchParams("ids=1,2&m=kl"));
    expect(params.get("ids")).toBe("1,2");
    expect(viewFromParams(params)).toEqual(view);
    expect(viewToParams(DEFAULT_VIEW, params).toString()).toBe("ids=1%2C2&m=kl");
    expect(viewFromParams(new URLSearchParams("x=bogus&smooth=7"))).toEqual({ ...DEFAULT_VIEW, smoothing: 0.99 });
  });
});

it("lists every numeric metric recorded, preferred ones first", () => {
  expect(recordedMetrics(rows, ["samples", "reward_mean"])).toEqual(["samples", "reward_mean", "entropy", "iteration_seconds", "samples_per_s"]);
});
