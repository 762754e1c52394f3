/** Pipeline timeline (Gantt) layout: spans -> ordered lanes of clipped, normalised segments + busy shares. */

export type SpanKind = "generating" | "loading_weights" | "idle" | "training" | "waiting";

export interface Span {
  lane: string; // "trainer" or a generation instance id
  kind: string;
  start: number | string; // epoch seconds or ISO time
  end: number | string | null; // null: still open
}

export interface Segment {
  kind: string;
  start: number; // epoch seconds, clipped to the window
  end: number;
  x: number; // left edge as a share of the window, [0, 1]
  w: number; // width as a share of the window, (0, 1]
}

export interface Lane {
  lane: string;
  segments: Segment[];
  busy: number; // share of the lane's covered time spent generating/training ([0, 1]; NaN when nothing covered)
}

export interface TimelineLayout {
  start: number;
  end: number;
  lanes: Lane[];
}

const BUSY_KINDS = new Set(["generating", "training"]);

/** Seconds since the epoch from a number (already seconds) or an ISO string. */
export function toSeconds(value: number | string): number {
  if (typeof value === "number") return value;
  const ms = Date.parse(value);
  if (Number.isNaN(ms)) throw new Error(`not a time: ${value}`);
  return ms / 1000;
}

/** Trainer lanes first, then instances in natural order ("gen-2" before "gen-10"). */
export function compareLanes(a: string, b: string): number {
  const trainer = (lane: string) => (lane.startsWith("train") ? 0 : 1);
  return trainer(a) - trainer(b) || a.localeCompare(b, undefined, { numeric: true });
}

/**
 * Lay out spans in the window [start, end] (default: the spans' own extent; open spans end at `now`).
 * Spans outside the window are dropped, the rest clipped; each lane's segments are sorted by start.
 */
export function layoutTimeline(
  spans: readonly Span[],
  now: number,
  window?: { start: number; end: number },
): TimelineLayout {
  const parsed = spans.map((span) => ({
    lane: span.lane,
    kind: span.kind,
    start: toSeconds(span.start),
    end: span.end === null ? now : toSeconds(span.end),
  }));
  const start = window?.start ?? Math.min(...parsed.map((s) => s.start));
  const end = window?.end ?? Math.max(...parsed.map((s) => s.end));
  if (parsed.length === 0 || !(end > start)) return { start: start || now, end: end || now, lanes: [] };
  const byLane = new Map<string, Segment[]>();
  for (const span of parsed) {
    const s = Math.max(span.start, start);
    const e = Math.min(span.end, end);
    if (!(e > s)) continue;
    const segments = byLane.get(span.lane) ?? [];
    segments.push({ kind: span.kind, start: s, end: e, x: (s - start) / (end - start), w: (e - s) / (end - start) });
    byLane.set(span.lane, segments);
  }
  const lanes = [...byLane.entries()]
    .sort(([a], [b]) => compareLanes(a, b))
    .map(([lane, segments]) => {
      segments.sort((a, b) => a.start - b.start);
      const covered = segments.reduce((sum, seg) => sum + (seg.end - seg.start), 0);
      const busy = segments.filter((seg) => BUSY_KINDS.has(seg.kind)).reduce((sum, seg) => sum + (seg.end - seg.start), 0);
      return { lane, segments, busy: covered > 0 ? busy / covered : NaN };
    });
  return { start, end, lanes };
}

/** Keep only spans that end after `since` (bounds memory for a live timeline); open spans are always kept. */
export function pruneSpans<T extends Span>(spans: readonly T[], since: number): T[] {
  return spans.filter((span) => span.end === null || toSeconds(span.end) >= since);
}

/** A visible part of the whole job as shares of its extent: 0 <= from < to <= 1. */
export interface View {
  from: number;
  to: number;
}

const MIN_WIDTH = 0.002;

/** Zoom around `center` (a share of the extent; default the view's middle) by `factor` (<1 zooms in), kept inside [0, 1]. */
export function zoomView(view: View, factor: number, center = (view.from + view.to) / 2): View {
  const width = Math.min(1, Math.max(MIN_WIDTH, (view.to - view.from) * factor));
  const left = center - (center - view.from) * (width / (view.to - view.from));
  return clampView(left, width);
}

/** Move the view by `delta` (a share of the extent), same width, kept inside [0, 1]. */
export function panView(view: View, delta: number): View {
  return clampView(view.from + delta, view.to - view.from);
}

function clampView(left: number, width: number): View {
  const from = Math.min(Math.max(0, left), 1 - width);
  return { from, to: from + width };
}

/** `count` evenly spaced tick times across [start, end] (epoch seconds), with labels as wall-clock time. */
export function timeTicks(start: number, end: number, count = 6): { t: number; x: number; label: string }[] {
  if (!(end > start) || count < 2) return [];
  const span = end - start;
  const withSeconds = span < 3600 * 6;
  return Array.from({ length: count }, (_, i) => {
    const t = start + (span * i) / (count - 1);
    const date = new Date(t * 1000);
    const hh = String(date.getHours()).padStart(2, "0");
    const mm = String(date.getMinutes()).padStart(2, "0");
    const ss = String(date.getSeconds()).padStart(2, "0");
    return { t, x: i / (count - 1), label: withSeconds ? `${hh}:${mm}:${ss}` : `${hh}:${mm}` };
  });
}

/** `count` evenly spaced ticks over a simulated run [0, duration] s (the planner's timeline): "0 s" ... "duration s". */
export function elapsedTicks(duration: number, count = 5): { x: number; label: string }[] {
  if (!(duration > 0) || count < 2) return [];
  const digits = duration < 10 ? 1 : 0;
  return Array.from({ length: count }, (_, i) => ({ x: i / (count - 1), label: `${((duration * i) / (count - 1)).toFixed(digits)} s` }));
}
