/** Column layout for uPlot: several sparse series on one shared, sorted x axis. */
import type { SeriesPoint } from "./sparkline";

/** Align several sparse series on the union of their x values (uPlot wants one x array; gaps are null). */
export function alignSeries(series: readonly { points: readonly SeriesPoint[] }[]): [number[], ...(number | null)[][]] {
  const xs = [...new Set(series.flatMap((s) => s.points.map((p) => p.x)))].sort((a, b) => a - b);
  const columns = series.map((s) => {
    const byX = new Map(s.points.map((p) => [p.x, p.y]));
    return xs.map((x) => byX.get(x) ?? null);
  });
  return [xs, ...columns];
}

/**
 * A y range with 5% headroom; a flat series gets +/- its magnitude (or 1) instead of uPlot's 0..100, and a
 * series of non-negative values keeps 0 as the floor when it is near (rates, lengths, counts).
 */
export function paddedRange(min: number | null, max: number | null): [number, number] {
  if (min == null || max == null || !Number.isFinite(min) || !Number.isFinite(max)) return [0, 1];
  if (min === max) {
    const pad = Math.abs(min) || 1;
    return [min >= 0 && min - pad < 0 ? 0 : min - pad, max + pad];
  }
  const pad = (max - min) * 0.05;
  return [min >= 0 && min - pad < 0 ? 0 : min - pad, max + pad];
}

/**
 * A series' value at `x` for the hover legend when it has no point there (runs sampled at different x, e.g. wall
 * time): linear between its nearest points on either side; null outside its own x range. `xs` is sorted ascending.
 */
export function valueAt(xs: ArrayLike<number>, ys: ArrayLike<number | null | undefined>, x: number): number | null {
  let before = -1;
  let after = -1;
  for (let i = 0; i < xs.length; i++) {
    const y = ys[i];
    if (y == null || !Number.isFinite(y)) continue;
    if (xs[i] === x) return y;
    if (xs[i] < x) before = i;
    else if (after < 0) after = i;
  }
  if (before < 0 || after < 0) return null;
  const [x0, x1, y0, y1] = [xs[before], xs[after], ys[before] as number, ys[after] as number];
  return y0 + ((y1 - y0) * (x - x0)) / (x1 - x0);
}

const LEGEND_NUMBER = new Intl.NumberFormat(undefined, { maximumFractionDigits: 3 });

/**
 * The hover legend's text for series `seriesIdx` at data index `idx` of aligned `data`: its own value there, else
 * "≈" and its value interpolated at that x (another run has the point there), else "--" (outside its x range).
 */
export function legendValue(data: readonly ArrayLike<number | null | undefined>[], seriesIdx: number, idx: number | null): string {
  if (idx == null || idx < 0) return "--";
  const xs = data[0] as ArrayLike<number>;
  const own = data[seriesIdx][idx];
  if (own != null && Number.isFinite(own)) return LEGEND_NUMBER.format(own);
  const guess = valueAt(xs, data[seriesIdx], xs[idx]);
  return guess === null ? "--" : `≈${LEGEND_NUMBER.format(guess)}`;
}
