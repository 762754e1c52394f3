/** A tiny inline trend line (SVG) for tables. */
import { sparklinePath, type SeriesPoint } from "../lib/sparkline";

export function Sparkline({ points, width = 96, height = 24, title }: { points: SeriesPoint[]; width?: number; height?: number; title?: string }) {
  const d = sparklinePath(points, width, height, 2);
  return (
    <svg className="sparkline" width={width} height={height} role="img" aria-label={title ?? "trend"}>
      {title ? <title>{title}</title> : null}
      {d ? <path d={d} fill="none" stroke="var(--accent)" strokeWidth={1.5} /> : <line x1={2} x2={width - 2} y1={height / 2} y2={height / 2} stroke="var(--border)" strokeDasharray="3 3" />}
    </svg>
  );
}
