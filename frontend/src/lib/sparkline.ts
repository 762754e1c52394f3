/** Rolling series for sparklines and live line charts: keyed points, deduplicated, windowed to the last N. */

export interface SeriesPoint {
  x: number; // iteration (or seconds); strictly increasing after `appendPoints`
  y: number;
}

/**
 * Merge new points into a series: a point whose x already exists replaces the old one (SSE may redeliver an
 * iteration already fetched over REST), the result is sorted by x and keeps only the last `window` points.
 */
export function appendPoints(series: readonly SeriesPoint[], incoming: readonly SeriesPoint[], window: number): SeriesPoint[] {
  if (window < 1) throw new Error(`window must be >= 1, got ${window}`);
  const byX = new Map<number, number>();
  for (const point of series) byX.set(point.x, point.y);
  for (const point of incoming) if (Number.isFinite(point.y)) byX.set(point.x, point.y);
  const merged = [...byX.entries()].sort((a, b) => a[0] - b[0]).map(([x, y]) => ({ x, y }));
  return merged.slice(Math.max(0, merged.length - window));
}

/** SVG path `d` drawing the series in a width x height box (y grows downwards); "" when fewer than 2 points. */
export function sparklinePath(series: readonly SeriesPoint[], width: number, height: number, pad = 1): string {
  if (series.length < 2) return "";
  const xs = series.map((p) => p.x);
  const ys = series.map((p) => p.y);
  const [x0, x1] = [Math.min(...xs), Math.max(...xs)];
  const [y0, y1] = [Math.min(0, ...ys), Math.max(...ys)];
  const sx = (x: number) => pad + ((x - x0) / (x1 - x0 || 1)) * (width - 2 * pad);
  const sy = (y: number) => height - pad - ((y - y0) / (y1 - y0 || 1)) * (height - 2 * pad);
  return series.map((p, i) => `${i === 0 ? "M" : "L"}${sx(p.x).toFixed(1)},${sy(p.y).toFixed(1)}`).join(" ");
}

/** A metric of a list of iteration rows as a series (rows missing the metric are skipped). */
export function metricSeries(
  rows: readonly { iteration: number; metrics: Record<string, unknown> }[],
  key: string,
): SeriesPoint[] {
  const points: SeriesPoint[] = [];
  for (const row of rows) {
    const value = row.metrics[key];
    if (typeof value === "number" && Number.isFinite(value)) points.push({ x: row.iteration, y: value });
  }
  return points;
}
