/**
 * Line chart of a few metrics over iterations (uPlot); series share the x axis. Hover shows every series' value at
 * that x in the legend, a click on a legend entry hides/shows that series, drag zooms, double-click resets. A series
 * with a single point is drawn as a dot.
 */
import { useMemo, useRef } from "react";
import type { Marker } from "../lib/markers";
import type uPlot from "uplot";
import { alignSeries, paddedRange } from "../lib/align";
import type { SeriesPoint } from "../lib/sparkline";
import { UPlotChart } from "./UPlotChart";

export interface LineSeries {
  label: string;
  color: string;
  points: SeriesPoint[];
  axis?: "left" | "right";
}

const INTEGER_STEPS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10_000, 20_000, 50_000, 100_000];

export function LineChart({ series, height = 180, xLabel = "iteration", integerX = true, markers = [] }: { series: LineSeries[]; height?: number; xLabel?: string; integerX?: boolean; markers?: Marker[] }) {
  const data = useMemo(() => alignSeries(series), [series]);
  const markerRef = useRef(markers);
  markerRef.current = markers;
  const hasRight = series.some((s) => s.axis === "right");
  const key = series.map((s) => `${s.label}:${s.axis ?? "left"}`).join("|") + `|${height}|${xLabel}|${integerX}`;
  const options = useMemo<Omit<uPlot.Options, "width">>(
    () => ({
      height,
      scales: {
        x: { time: false, range: (_u: uPlot, min: number, max: number) => (min === max ? [min - 1, max + 1] : [min, max]) },
        y: { range: (_u: uPlot, min: number, max: number) => paddedRange(min, max) },
        right: { range: (_u: uPlot, min: number, max: number) => paddedRange(min, max) },
      },
      legend: { live: true },
      hooks: { draw: [(u: uPlot) => drawMarkers(u, markerRef.current)] },
      cursor: { drag: { x: true, y: false, setScale: true } },
      axes: [
        { label: xLabel, stroke: "#64748b", grid: { stroke: "#eef2f7" }, ...(integerX ? { incrs: INTEGER_STEPS } : {}) }, // whole iterations
        { stroke: "#64748b", grid: { stroke: "#eef2f7" }, size: 56 },
        ...(hasRight ? [{ side: 1, scale: "right", stroke: "#64748b", grid: { show: false }, size: 56 }] : []),
      ],
      series: [
        { label: xLabel },
        ...series.map((s) => ({
          label: s.label,
          stroke: s.color,
          width: 2,
          spanGaps: true,
          scale: s.axis === "right" ? "right" : "y",
          points: { show: (u: uPlot, si: number) => (u.data[si] as (number | null)[]).filter((v) => v != null).length <= 2, size: 6 },
        })),
      ],
    }),
    [key], // rebuilt only when the set of series changes; new points go through setData

  );
  if (data[0].length === 0) return <div className="empty-chart">waiting for the first iteration…</div>;
  return <UPlotChart options={options} optionsKey={`${key}|${markers.length}`} data={data} />;
}

/** Vertical dashed lines with a short label at each marker inside the visible x range (scale decisions). */
function drawMarkers(u: uPlot, markers: readonly Marker[]) {
  const { ctx } = u;
  const { top, height } = u.bbox;
  ctx.save();
  ctx.setLineDash([4, 3]);
  ctx.font = `${10 * devicePixelRatio}px system-ui, sans-serif`;
  for (const marker of markers) {
    const x = u.valToPos(marker.x, "x", true);
    if (!(x >= u.bbox.left && x <= u.bbox.left + u.bbox.width)) continue;
    ctx.strokeStyle = marker.color;
    ctx.fillStyle = marker.color;
    ctx.beginPath();
    ctx.moveTo(x, top);
    ctx.lineTo(x, top + height);
    ctx.stroke();
    ctx.fillText(marker.label.slice(0, 40), x + 3 * devicePixelRatio, top + 10 * devicePixelRatio);
  }
  ctx.restore();
}
