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
