/**
 * How the iteration charts draw (job page and Compare share it): the x axis (iteration, samples seen, wall time),
 * EMA smoothing, log scale and a zero baseline. Pure functions: the chart component (components/LineChart.tsx) and
 * the pages apply them; the settings live in the URL (`x`, `smooth`, `scale`, `zero`) so a view can be shared.
 */
import { paddedRange } from "./align";
import type { SeriesPoint } from "./sparkline";

export type XAxis = "iteration" | "samples" | "time";
export interface ChartView {
  x: XAxis;
  smoothing: number; // EMA weight of the past, 0 (off) .. 0.99
  log: boolean; // log10 y scale: points <= 0 are left out
  zero: boolean; // the y range includes 0
}
export const DEFAULT_VIEW: ChartView = { x: "iteration", smoothing: 0, log: false, zero: false };
export const X_LABELS: Record<XAxis, string> = {
  iteration: "iteration",
  samples: "samples seen",
  time: "seconds since first iteration",
};

export interface RowLike {
  iteration: number;
  created_at: string;
  metrics: Record<string, unknown>;
}

const finite = (value: unknown): value is number => typeof value === "number" && Number.isFinite(value);

/**
 * Each row's x under `axis`, by iteration. samples: the running total of the rows' `samples` (the driver records how
 * many samples each iteration trained on), else samples_per_s x iteration_seconds; a row with neither has none (and
 * so do the rows after it). time: seconds since the first row's `created_at`.
 */
export function xByIteration(rows: readonly RowLike[], axis: XAxis): Map<number, number> {
  const sorted = [...rows].sort((a, b) => a.iteration - b.iteration);
  const out = new Map<number, number>();
  const t0 = sorted.length ? Date.parse(sorted[0].created_at) : 0;
  let seen = 0;
  for (const row of sorted) {
    if (axis === "iteration") out.set(row.iteration, row.iteration);
    else if (axis === "time") out.set(row.iteration, (Date.parse(row.created_at) - t0) / 1000);
    else {
      const m = row.metrics;
      const count = finite(m.samples) ? m.samples : finite(m.samples_per_s) && finite(m.iteration_seconds) ? m.samples_per_s * m.iteration_seconds : null;
      if (count === null) break;
      seen += count;
      out.set(row.iteration, Math.round(seen));
    }
  }
  return out;
}

/** A metric as points on `axis` (rows without the metric, or without an x, are skipped). */
export function metricPoints(rows: readonly RowLike[], metric: string, axis: XAxis): SeriesPoint[] {
  const xs = xByIteration(rows, axis);
  const points: SeriesPoint[] = [];
  for (const row of [...rows].sort((a, b) => a.iteration - b.iteration)) {
    const y = row.metrics[metric];
    const x = xs.get(row.iteration);
    if (finite(y) && x !== undefined) points.push({ x, y });
  }
  return points;
}

/** An iteration position (fractional: markers sit between iterations) on `axis`, linear between rows; null outside. */
export function iterationToX(xs: Map<number, number>, iteration: number): number | null {
  const known = [...xs.entries()].sort((a, b) => a[0] - b[0]);
  for (let i = 0; i < known.length; i++) {
    const [it, x] = known[i];
    if (it === iteration) return x;
    if (it > iteration) {
      if (i === 0) return null;
      const [it0, x0] = known[i - 1];
      return x0 + ((x - x0) * (iteration - it0)) / (it - it0);
    }
  }
  return null;
}

/**
 * Exponential moving average with TensorBoard's debiasing (the first points are not pulled towards 0):
 * s_t = w * s_{t-1} + (1 - w) * y_t, shown as s_t / (1 - w^t). `weight` 0 returns the points unchanged.
 */
export function ema(points: readonly SeriesPoint[], weight: number): SeriesPoint[] {
  const w = Math.min(0.999, Math.max(0, weight));
  if (w === 0) return [...points];
  let state = 0;
  let debias = 1;
  return points.map((p) => {
    state = w * state + (1 - w) * p.y;
    debias *= w;
    return { x: p.x, y: state / (1 - debias) };
  });
}

/** The points as the view draws them: smoothed, and without the non-positive values a log scale cannot show. */
export function viewPoints(points: readonly SeriesPoint[], view: Pick<ChartView, "smoothing" | "log">): SeriesPoint[] {
  const smoothed = ema(points, view.smoothing);
  return view.log ? smoothed.filter((p) => p.y > 0) : smoothed;
}

/**
 * The least linear y span of a reward chart: a rise of 0.1 (what the form's LoRA defaults must reach to count as
 * learning) fills half of it, while the +/-0.01 wobble of a flat run (0.30-0.32) stays a flat line instead of a climb
 * across the whole panel. Wider data keeps its own range.
 */
export const REWARD_MIN_SPAN = 0.2;
const REWARD_METRICS = new Set(["reward_mean", "eval_reward"]);

/** The least y span a chart of `metric` draws (0: none). */
export function minSpanOf(metric: string): number {
  return REWARD_METRICS.has(metric) ? REWARD_MIN_SPAN : 0;
}

/**
 * The y range to draw. Linear: 5% headroom, a flat series +/- its magnitude (or 1), widened around its middle to at
 * least `minSpan` (never below 0 for non-negative data); with `zero` the range reaches 0 (so a flat line near 0.3
 * reads as flat, not as a climb across the whole chart). Log: whole decades around the data.
 */
export function yRange(min: number | null, max: number | null, view: Pick<ChartView, "log" | "zero">,
  minSpan = 0): [number, number] {
  if (min == null || max == null || !Number.isFinite(min) || !Number.isFinite(max)) return view.log ? [1, 10] : [0, 1];
  if (view.log) {
    const lo = Math.max(min, Number.MIN_VALUE);
    return [10 ** Math.floor(Math.log10(lo)), 10 ** Math.ceil(Math.log10(Math.max(max, lo)) + (max === lo ? 1 : 0))];
  }
  let [lo, hi] = paddedRange(min, max); // non-negative data keeps 0 as its floor when it is near
  if (hi - lo < minSpan) {
    const middle = (lo + hi) / 2;
    lo = min >= 0 ? Math.max(0, middle - minSpan / 2) : middle - minSpan / 2;
    hi = lo + minSpan; // >= the padded max: the middle is below minSpan / 2 whenever lo was raised to 0
  }
  return view.zero ? [Math.min(lo, 0), Math.max(hi, 0)] : [lo, hi];
}

/** The view in URL parameters (only what differs from the default). */
export function viewFromParams(params: URLSearchParams): ChartView {
  const x = params.get("x");
  const smoothing = Number(params.get("smooth") ?? 0);
  return {
    x: x === "time" || x === "samples" ? x : "iteration",
    smoothing: Number.isFinite(smoothing) ? Math.min(0.99, Math.max(0, smoothing)) : 0,
    log: params.get("scale") === "log",
    zero: params.get("zero") === "1",
  };
}

export function viewToParams(view: ChartView, params: URLSearchParams): URLSearchParams {
  const next = new URLSearchParams(params);
  const set = (key: string, value: string | null) => (value === null ? next.delete(key) : next.set(key, value));
  set("x", view.x === "iteration" ? null : view.x);
  set("smooth", view.smoothing > 0 ? String(view.smoothing) : null);
  set("scale", view.log ? "log" : null);
  set("zero", view.zero ? "1" : null);
  return next;
}

/** Every numeric metric the rows recorded: `preferred` first (those present), then the rest by name. */
export function recordedMetrics(rows: readonly { metrics: Record<string, unknown> }[], preferred: readonly string[] = []): string[] {
  const seen = new Set<string>();
  for (const row of rows) for (const [key, value] of Object.entries(row.metrics)) if (finite(value)) seen.add(key);
  const first = preferred.filter((m) => seen.has(m));
  return [...first, ...[...seen].filter((m) => !first.includes(m)).sort()];
}
