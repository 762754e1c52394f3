/** Runs table helpers: sort keys, comparable values, durations, and the compare URL. Pure, unit tested. */
import type { JobStatus, Run } from "../api/types";

export type SortKey = "name" | "status" | "health" | "signals" | "duration" | "reward" | "eval" | "throughput" | "mode" | "model" | "owner" | "created";
export const MAX_COMPARE = 8;

const HEALTH_ORDER = ["crash_looping", "reward_errors", "stalled", "training_signal", "failed", "driver_lost", "restarting_driver", "resuming", "waiting_for_instances", "generating", "queued", "paused", "succeeded", "cancelled"];

function metric(run: Run, key: string): number | null {
  const value = (run.latest_metrics as Record<string, unknown> | null)?.[key];
  return typeof value === "number" && Number.isFinite(value) ? value : null;
}

export function sortValue(run: Run, key: SortKey): string | number | null {
  const spec = run.spec as Record<string, unknown>;
  switch (key) {
    case "name": return run.name.toLowerCase();
    case "status": return run.status;
    case "health": return HEALTH_ORDER.indexOf(run.health.state);
    case "signals": return (run.health.signals ?? []).reduce((n, s) => n + (s.severity === "error" ? 10 : 1), 0);
    case "duration": return run.duration_s ?? null;
    case "reward": return metric(run, "reward_mean");
    case "eval": return run.eval_reward ?? null;
    case "throughput": return metric(run, "samples_per_s");
    case "mode": return String(spec.mode ?? "");
    case "model": return String(spec.model ?? "");
    case "owner": return run.created_by_email ?? "";
    case "created": return run.created_at;
  }
}

/** Sorted copy; missing values (null) always sort last, whatever the direction. */
export function sortRuns(runs: readonly Run[], key: SortKey, descending: boolean): Run[] {
  return [...runs].sort((a, b) => {
    const [x, y] = [sortValue(a, key), sortValue(b, key)];
    if (x === null || y === null) return x === y ? 0 : x === null ? 1 : -1;
    const order = x < y ? -1 : x > y ? 1 : 0;
    return descending ? -order : order;
  });
}

export function formatDuration(seconds: number | null | undefined): string {
  if (seconds == null || !Number.isFinite(seconds)) return "–";
  const s = Math.round(seconds);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${String(s % 60).padStart(2, "0")}s`;
  return `${Math.floor(s / 3600)}h ${String(Math.floor((s % 3600) / 60)).padStart(2, "0")}m`;
}

/** `/compare?ids=3,7` for the router; parse accepts the same list back (unique positive ints, at most 8). */
export function compareRoute(ids: readonly number[]): string {
  return `/compare?ids=${ids.join(",")}`;
}

export function parseIds(raw: string | null): number[] {
  const ids = (raw ?? "").split(",").map((part) => Number(part.trim())).filter((n) => Number.isInteger(n) && n > 0);
  return [...new Set(ids)].slice(0, MAX_COMPARE);
}

/** The API's tag rule (backend/schemas/jobs.py TAG_PATTERN): letters, digits and _ . : = + -, at most 40. */
export const TAG_PATTERN = /^[A-Za-z0-9][A-Za-z0-9_.:=+-]{0,39}$/;
export const MAX_TAGS = 20;

/** Tags typed into one box ("sweep, lr:1e-4 best"): split on commas and spaces, unique, in order; `bad` lists
 * the ones the API would refuse, so the form can say which before sending. */
export function parseTags(text: string): { tags: string[]; bad: string[] } {
  const parts = [...new Set(text.split(/[\s,]+/).filter(Boolean))];
  return { tags: parts.filter((t) => TAG_PATTERN.test(t)), bad: parts.filter((t) => !TAG_PATTERN.test(t)) };
}

/** The runs table's filters as `GET /runs` query parameters (empty ones left out). */
export interface RunFilters {
  status: JobStatus | "";
  tag: string;
  q: string; // text in the name, tags or notes
}

export function runsQuery(filters: RunFilters): { status?: JobStatus; tag?: string; q?: string; limit: number } {
  const q = filters.q.trim();
  const tag = filters.tag.trim();
  return { status: filters.status || undefined, tag: tag || undefined, q: q || undefined, limit: 200 };
}

/** The first line of a run's notes for the table (the whole notes go in the tooltip). */
export function notesPreview(notes: string | null | undefined, max = 80): string {
  const first = (notes ?? "").trim().split("\n")[0] ?? "";
  return first.length > max ? `${first.slice(0, max - 1)}…` : first;
}
