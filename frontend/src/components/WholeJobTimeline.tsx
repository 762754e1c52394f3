/**
 * The whole job's pipeline (not only the last minutes): all recorded spans, zoom (buttons or wheel) and pan
 * (slider or drag), with a wall-clock time axis. The spans are read once per refresh through TanStack Query.
 */
import { useQuery } from "@tanstack/react-query";
import { useMemo, useRef, useState, type PointerEvent, type WheelEvent } from "react";
import { api, unwrap } from "../api/client";
import { layoutTimeline, panView, timeTicks, toSeconds, zoomView, type View } from "../lib/timeline";
import { SPAN_COLORS } from "./PipelineTimeline";

export function WholeJobTimeline({ jobId, live }: { jobId: number; live: boolean }) {
  const { data } = useQuery({
    queryKey: ["job", jobId, "timeline", "all"],
    queryFn: () => unwrap(api.GET("/api/v1/jobs/{job_id}/timeline", { params: { path: { job_id: jobId }, query: { since: 0 } } })),
    refetchInterval: live ? 10_000 : false,
  });
  const [view, setView] = useState<View>({ from: 0, to: 1 });
  const drag = useRef<{ x: number; view: View; width: number } | null>(null);
  const spans = useMemo(() => data?.spans ?? [], [data]);
  const extent = useMemo(() => {
    if (spans.length === 0) return null;
    const start = Math.min(...spans.map((s) => toSeconds(s.start)));
    const end = Math.max(...spans.map((s) => toSeconds(s.end ?? s.start)));
    return end > start ? { start, end } : null;
  }, [spans]);
  const range = extent && { start: extent.start + view.from * (extent.end - extent.start), end: extent.start + view.to * (extent.end - extent.start) };
  const layout = useMemo(() => (range ? layoutTimeline(spans, range.end, range) : null), [spans, range?.start, range?.end]);
  if (!extent || !layout || !range) return <div className="empty-chart">no pipeline activity recorded</div>;

  const onWheel = (e: WheelEvent<HTMLDivElement>) => {
    const box = e.currentTarget.getBoundingClientRect();
    const at = view.from + ((e.clientX - box.left) / box.width) * (view.to - view.from);
    setView((v) => zoomView(v, e.deltaY < 0 ? 0.8 : 1.25, at));
  };
  const onDown = (e: PointerEvent<HTMLDivElement>) => {
    drag.current = { x: e.clientX, view, width: e.currentTarget.getBoundingClientRect().width };
    e.currentTarget.setPointerCapture(e.pointerId);
  };
  const onMove = (e: PointerEvent<HTMLDivElement>) => {
    const d = drag.current;
    if (d) setView(panView(d.view, -((e.clientX - d.x) / d.width) * (d.view.to - d.view.from)));
  };
  const width = view.to - view.from;
  const ticks = timeTicks(range.start, range.end, 6);
  return (
    <div className="timeline whole" data-testid="whole-timeline">
      <div className="filters timeline-tools">
        <button onClick={() => setView((v) => zoomView(v, 0.5))} aria-label="zoom in">+</button>
        <button onClick={() => setView((v) => zoomView(v, 2))} aria-label="zoom out">-</button>
        <button onClick={() => setView({ from: 0, to: 1 })}>whole job</button>
        <input type="range" aria-label="pan" min={0} max={1000} disabled={width >= 1} value={width >= 1 ? 0 : Math.round((view.from / (1 - width)) * 1000)}
          onChange={(e) => setView({ from: (Number(e.target.value) / 1000) * (1 - width), to: (Number(e.target.value) / 1000) * (1 - width) + width })} />
        <span className="muted">{(range.end - range.start).toFixed(1)} s of {(extent.end - extent.start).toFixed(0)} s · {spans.length} spans</span>
      </div>
      <div className="timeline-canvas" onWheel={onWheel} onPointerDown={onDown} onPointerMove={onMove} onPointerUp={() => (drag.current = null)}>
        {layout.lanes.map((lane) => (
          <div className="lane" key={lane.lane}>
            <span className="lane-label">{lane.lane}</span>
            <div className="lane-track">
              {lane.segments.map((seg, i) => (
                <div key={i} className={`seg seg-${seg.kind}`} title={`${lane.lane}: ${seg.kind.replace("_", " ")} ${(seg.end - seg.start).toFixed(2)}s`}
                  style={{ left: `${seg.x * 100}%`, width: `${Math.max(seg.w * 100, 0.1)}%`, background: SPAN_COLORS[seg.kind] ?? "#94a3b8" }} />
              ))}
            </div>
            <span className="lane-busy">{Number.isFinite(lane.busy) ? `${Math.round(lane.busy * 100)}% busy` : ""}</span>
          </div>
        ))}
      </div>
      <div className="lane lane-axis">
        <span className="lane-label" />
        <div className="time-axis" data-testid="time-axis">
          {ticks.map((tick) => <span key={tick.x} style={{ left: `${tick.x * 100}%` }}>{tick.label}</span>)}
        </div>
        <span className="lane-busy" />
      </div>
    </div>
  );
}
