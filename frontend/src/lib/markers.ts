/** Scale events (manual and autoscaler, with their reason) as vertical markers on iteration charts. */

export interface Marker {
  x: number; // iteration axis position: halfway before the first iteration that ended after the event
  label: string;
  short: string; // what the chart writes beside the line: "manual 2→3"
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
    const who = event.kind === "autoscale" ? "auto" : "manual";
    out.push({ x: next.it - 0.5, label: `${who}: ${event.message}`, short: shortLabel(who, event), color: event.kind === "autoscale" ? AUTO : MANUAL });
  }
  return out;
}

/** "auto 3→4" from "3 -> 4: trainer idle 40%" or from data.target_instances; else the message's first words. */
function shortLabel(who: string, event: EventLike): string {
  const change = /(\d+)\s*->\s*(\d+)/.exec(event.message);
  if (change) return `${who} ${change[1]}→${change[2]}`;
  const target = event.data?.target_instances;
  if (typeof target === "number") return `${who} →${target}`;
  return `${who} ${event.message.slice(0, 16)}`;
}

export interface LabelSlot {
  x: number; // pixel position of the (first) marker line the label belongs to
  row: number; // 0 = top row
  text: string;
  title: string; // every merged marker's full label
}

/**
 * Where the marker labels go so none overlaps another: markers closer than `mergePx` share one label ("3 changes"),
 * each label takes the first of `rows` rows where it starts right of the previous label's end (plus `gapPx`), and a
 * label that fits in no row (or past `rightPx`) is left out: its line is still drawn and its text is in the title.
 */
export function layoutMarkerLabels(
  markers: readonly { px: number; short: string; label: string }[],
  measure: (text: string) => number,
  { rows = 3, gapPx = 6, mergePx = 8, padPx = 3, rightPx = Infinity }: { rows?: number; gapPx?: number; mergePx?: number; padPx?: number; rightPx?: number } = {},
): LabelSlot[] {
  const groups: { px: number; items: { short: string; label: string }[] }[] = [];
  for (const m of [...markers].sort((a, b) => a.px - b.px)) {
    const last = groups[groups.length - 1];
    if (last && m.px - last.px < mergePx) last.items.push(m);
    else groups.push({ px: m.px, items: [m] });
  }
  const ends: number[] = Array(rows).fill(-Infinity);
  const out: LabelSlot[] = [];
  for (const group of groups) {
    const text = group.items.length === 1 ? group.items[0].short : `${group.items.length} changes`;
    const start = group.px + padPx;
    const end = start + measure(text);
    const row = ends.findIndex((e) => start >= e + gapPx);
    if (row < 0 || end > rightPx) continue;
    ends[row] = end;
    out.push({ x: group.px, row, text, title: group.items.map((i) => i.label).join("\n") });
  }
  return out;
}
