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
