/**
 * Line chart of a few metrics over iterations (uPlot); series share the x axis. Hover shows every series' value at
 * that x in the legend (interpolated, marked "≈", for a series without a point at exactly that x), a click on a
 * legend entry hides/shows that series, drag zooms, double-click resets; charts with the same `syncKey` zoom together.
 * A series with a single point is drawn as a dot. `view` (lib/chartView.ts) smooths the series (EMA), draws y on a
 * log scale or keeps 0 in the y range; the drawn y range is on the root as `data-y-scale` (the canvas has no text).
 */
import { useMemo, useRef } from "react";
import { layoutMarkerLabels, type Marker } from "../lib/markers";
import type uPlot from "uplot";
import { alignSeries, legendValue } from "../lib/align";
import { viewPoints, yRange, type ChartView } from "../lib/chartView";
import type { SeriesPoint } from "../lib/sparkline";
import { UPlotChart } from "./UPlotChart";

export interface LineSeries {
  label: string;
  color: string;
  points: SeriesPoint[];
  axis?: "left" | "right";
}

const INTEGER_STEPS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10_000, 20_000, 50_000, 100_000];

export interface LineChartProps {
  series: LineSeries[];
  height?: number;
  xLabel?: string;
  integerX?: boolean;
  markers?: Marker[];
  syncKey?: string; // charts with the same key share their x zoom
  view?: Pick<ChartView, "smoothing" | "log" | "zero">;
  minSpan?: number; // the left axis' least linear y span (lib/chartView.ts `minSpanOf`: rewards)
}

const PLAIN = { smoothing: 0, log: false, zero: false };

export function LineChart({ series, height = 180, xLabel = "iteration", integerX = true, markers = [], syncKey, view = PLAIN, minSpan = 0 }: LineChartProps) {
  const { smoothing, log, zero } = view;
  const data = useMemo(
    () => alignSeries(series.map((s) => ({ points: viewPoints(s.points, { smoothing, log }) }))),
    [series, smoothing, log],
  );
  const markerRef = useRef(markers);
  markerRef.current = markers;
  const hasRight = series.some((s) => s.axis === "right");
  const key = series.map((s) => `${s.label}:${s.axis ?? "left"}`).join("|") + `|${height}|${xLabel}|${integerX}|${log}|${zero}|${minSpan}`;
  const options = useMemo<Omit<uPlot.Options, "width">>(
    () => ({
      height,
      scales: {
        x: { time: false, range: (_u: uPlot, min: number, max: number) => (min === max ? [min - 1, max + 1] : [min, max]) },
        y: { ...(log ? { distr: 3, log: 10 } : {}), range: (_u: uPlot, min: number, max: number) => yRange(min, max, { log, zero }, minSpan) },
        right: { ...(log ? { distr: 3, log: 10 } : {}), range: (_u: uPlot, min: number, max: number) => yRange(min, max, { log, zero }) },
      },
      legend: { live: true },
      hooks: { draw: [(u: uPlot) => drawMarkers(u, markerRef.current), (u: uPlot) => describeScale(u, log)] },
      cursor: { drag: { x: true, y: false, setScale: true } },
      axes: [
        { label: xLabel, stroke: "#64748b", grid: { stroke: "#eef2f7" }, ...(integerX ? { incrs: INTEGER_STEPS } : {}) }, // whole iterations
        { stroke: "#64748b", grid: { stroke: "#eef2f7" }, size: 56 },
        ...(hasRight ? [{ side: 1, scale: "right", stroke: "#64748b", grid: { show: false }, size: 56 }] : []),
      ],
      series: [
        { label: xLabel },
        ...series.map((s) => ({
          label: smoothing > 0 ? `${s.label} (EMA ${smoothing})` : s.label,
          stroke: s.color,
          width: 2,
          spanGaps: true,
          scale: s.axis === "right" ? "right" : "y",
          value: (u: uPlot, _raw: number | null, si: number, idx: number | null) => legendValue(u.data, si, idx),
          points: { show: (u: uPlot, si: number) => (u.data[si] as (number | null)[]).filter((v) => v != null).length <= 2, size: 6 },
        })),
      ],
    }),
    [key, smoothing], // rebuilt only when the set of series or the view changes; new points go through setData

  );
  if (data[0].length === 0) return <div className="empty-chart">waiting for the first iteration…</div>;
  return <UPlotChart options={options} optionsKey={`${key}|${smoothing}|${markers.length}`} data={data} syncKey={syncKey} />;
}

/** The y scale as drawn, for assistive tools and tests: `{"scale": "linear"|"log", "min", "max"}`. */
function describeScale(u: uPlot, log: boolean) {
  const { min, max } = u.scales.y ?? {};
  u.root.dataset.yScale = JSON.stringify({ scale: log ? "log" : "linear", min: min ?? null, max: max ?? null });
}

/** Vertical dashed lines at each marker inside the visible x range (scale decisions), with short labels laid out in
 * up to three rows so they never overlap (lib/markers.ts `layoutMarkerLabels`). */
function drawMarkers(u: uPlot, markers: readonly Marker[]) {
  const { ctx } = u;
  const { top, height, left, width } = u.bbox;
  const dpr = devicePixelRatio;
  ctx.save();
  ctx.setLineDash([4, 3]);
  ctx.font = `${10 * dpr}px system-ui, sans-serif`;
  const visible = markers
    .map((marker) => ({ ...marker, px: u.valToPos(marker.x, "x", true) }))
    .filter((m) => m.px >= left && m.px <= left + width);
  for (const m of visible) {
    ctx.strokeStyle = m.color;
    ctx.beginPath();
    ctx.moveTo(m.px, top);
    ctx.lineTo(m.px, top + height);
    ctx.stroke();
  }
  const slots = layoutMarkerLabels(visible, (text) => ctx.measureText(text).width, { gapPx: 6 * dpr, mergePx: 8 * dpr, padPx: 3 * dpr, rightPx: left + width });
  // what the labels say and where (CSS px), for assistive tools and tests: the canvas itself has no text
  u.root.dataset.markerLabels = JSON.stringify(slots.map((s) => ({ text: s.text, row: s.row, x: s.x / dpr, width: ctx.measureText(s.text).width / dpr, title: s.title })));
  for (const slot of slots) {
    const marker = visible.find((m) => m.px === slot.x);
    ctx.fillStyle = marker?.color ?? "#64748b";
    ctx.fillText(slot.text, slot.x + 3 * dpr, top + (10 + 12 * slot.row) * dpr);
  }
  ctx.restore();
}
