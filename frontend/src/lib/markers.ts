/** Scale events (manual and autoscaler, with their reason) as vertical markers on iteration charts. */

export interface Marker {
  x: number; // iteration axis position: halfway before the first iteration that ended after the event
  label: string;
  color: string;
}

export interface EventLike {
  kind: string;
  message: string;
  data?: Record<string, unknown> | null;
  created_at: string;
}

const MANUAL = "#7c3aed";
const AUTO = "#ea580c";

/** Target changes only: the controller's per-instance start/stop lines (data.instance_id) are not markers. */
export function isScaleDecision(event: EventLike): boolean {
  if (event.kind === "autoscale") return true;
  return event.kind === "scale" && !(event.data && "instance_id" in event.data);
}

export function scaleMarkers(events: readonly EventLike[], iterations: readonly { iteration: number; created_at: string }[]): Marker[] {
  const ends = [...iterations].sort((a, b) => a.iteration - b.iteration).map((it) => ({ it: it.iteration, t: Date.parse(it.created_at) }));
  const out: Marker[] = [];
  for (const event of events) {
    if (!isScaleDecision(event)) continue;
    const t = Date.parse(event.created_at);
    const next = ends.find((end) => end.t >= t);
    if (!next) continue; // after the newest iteration: drawn once the next one lands
    out.push({ x: next.it - 0.5, label: `${event.kind === "autoscale" ? "auto" : "manual"}: ${event.message}`, color: event.kind === "autoscale" ? AUTO : MANUAL });
  }
  return out;
}
