/**
 * Pipeline Gantt: one lane per generation instance (generating / loading weights / idle) plus the trainer
 * (training / waiting / idle), over the last `windowSeconds`; bubbles show as grey gaps. A live job's axis reads back
 * from "latest"; a simulated run (`elapsed`, the planner) reads forward from 0 s over its whole extent.
 */
import { useMemo } from "react";
import { elapsedTicks, layoutTimeline, type Span } from "../lib/timeline";

export const SPAN_COLORS: Record<string, string> = {
  generating: "#3b82f6",
  training: "#10b981",
  loading_weights: "#f59e0b",
  waiting: "#cbd5e1",
  idle: "#e2e8f0",
};

interface Props {
  spans: Span[];
  now: number;
  windowSeconds?: number;
  elapsed?: boolean; // a simulated run: the whole extent, axis in seconds from its start
}

export function PipelineTimeline({ spans, now, windowSeconds = 120, elapsed = false }: Props) {
  const layout = useMemo(() => {
    const latest = spans.reduce((max, s) => Math.max(max, s.end === null ? now : typeof s.end === "number" ? s.end : Date.parse(s.end) / 1000), 0);
    const end = Math.max(latest, Math.min(now, latest + 5)); // follow the data, not a clock that may differ from the server's
    const earliest = spans.reduce((min, s) => Math.min(min, typeof s.start === "number" ? s.start : Date.parse(s.start) / 1000), end);
    return layoutTimeline(spans, now, { start: elapsed ? earliest : Math.max(end - windowSeconds, earliest), end });
  }, [spans, now, windowSeconds, elapsed]);
  if (layout.lanes.length === 0) return <div className="empty-chart">no pipeline activity yet</div>;
  return (
    <div className="timeline" data-testid="timeline">
      {layout.lanes.map((lane) => (
        <div className="lane" key={lane.lane}>
          <span className="lane-label">{lane.lane}</span>
          <div className="lane-track">
            {lane.segments.map((seg, i) => (
              <div
                key={i}
                className={`seg seg-${seg.kind}`}
                style={{ left: `${seg.x * 100}%`, width: `${Math.max(seg.w * 100, 0.2)}%`, background: SPAN_COLORS[seg.kind] ?? "#94a3b8" }}
                title={`${lane.lane}: ${seg.kind.replace("_", " ")} ${(seg.end - seg.start).toFixed(2)}s`}
              />
            ))}
          </div>
          <span className="lane-busy">{Number.isFinite(lane.busy) ? `${Math.round(lane.busy * 100)}% busy` : ""}</span>
        </div>
      ))}
      <div className="lane lane-axis">
        <span className="lane-label" />
        <div className="lane-track-axis" data-testid="timeline-axis">
          {elapsed
            ? elapsedTicks(layout.end - layout.start).map((tick) => <span key={tick.x}>{tick.label}</span>)
            : <><span>−{Math.round(layout.end - layout.start)}s</span><span>latest</span></>}
        </div>
        <span className="lane-busy" />
      </div>
      <div className="legend">
        {Object.entries(SPAN_COLORS).map(([kind, color]) => (
          <span key={kind}>
            <i style={{ background: color }} /> {kind.replace("_", " ")}
          </span>
        ))}
      </div>
    </div>
  );
}
