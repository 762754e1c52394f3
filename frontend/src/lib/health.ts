/** What the job page and the runs table say about a job's health, status, liveness and rate: pure, so each wording
 * rule is tested once (no repeated words, nothing stale shown as current). */
import type { JobHealth, JobStatus } from "../api/types";

type HealthLike = Pick<JobHealth, "state" | "summary" | "healthy">;
export type Signal = NonNullable<JobHealth["signals"]>[number];

export const HEALTH_LABELS: Record<JobHealth["state"], string> = {
  queued: "queued",
  paused: "paused",
  generating: "healthy",
  waiting_for_instances: "waiting for instances",
  driver_lost: "driver lost",
  restarting_driver: "restarting driver",
  resuming: "resuming",
  stalled: "stalled",
  crash_looping: "crash-looping",
  reward_errors: "reward errors",
  training_signal: "not learning",
  succeeded: "finished",
  failed: "failed",
  cancelled: "cancelled",
};

/** Health states that only restate the job's status: beside the status badge they would repeat it ("failed failed"). */
const MIRRORS: Partial<Record<JobHealth["state"], JobStatus>> = {
  queued: "queued",
  paused: "paused",
  succeeded: "succeeded",
  failed: "failed",
  cancelled: "cancelled",
};

/** The health badge's label beside a status badge, or null when it would only repeat the status. A health answer
 * for another status than the job's current one (fetched before a pause/resume) is stale: null too. */
export function healthBadgeLabel(status: JobStatus, health: HealthLike | null | undefined): string | null {
  if (!health) return null;
  const mirrored = MIRRORS[health.state];
  if (mirrored !== undefined) return null;
  if (status !== "running" && status !== "starting") return null; // a live-only state while the job is not live
  return HEALTH_LABELS[health.state];
}

/** "label: summary" without saying a word twice: a summary that starts with the label loses that prefix, and one
 * that already names the state ("restarting: ...", "resuming from checkpoint 4: ...") is shown alone. */
export function bannerText(label: string, summary: string): string {
  let rest = summary.trim();
  const prefix = `${label.toLowerCase()}:`;
  while (rest.toLowerCase().startsWith(prefix)) rest = rest.slice(prefix.length).trim();
  if (!rest) return label;
  const firstWord = label.toLowerCase().split(/\s+/)[0];
  if (rest.toLowerCase().startsWith(firstWord)) return rest;
  return `${label}: ${rest}`;
}

const TERMINAL: readonly string[] = ["succeeded", "failed", "cancelled"];

/** The live dot: green only while the stream is connected to a job that can still change. */
export function liveIndicator(status: JobStatus | undefined, connected: boolean): { tone: "on" | "off" | "ended"; title: string } {
  if (status && TERMINAL.includes(status)) return { tone: "ended", title: `${status}: no more live updates` };
  return connected ? { tone: "on", title: "live" } : { tone: "off", title: "reconnecting" };
}

/** The samples/s (or tokens/s) to show now: the newest iteration's rate only while the job is producing; a paused,
 * stalled or waiting job shows no rate (its last one is not what it does now), with the reason. */
export function currentRate(
  status: JobStatus,
  health: Pick<JobHealth, "state"> | null | undefined,
  latest: unknown,
): { value: number | null; note?: string } {
  const value = typeof latest === "number" && Number.isFinite(latest) ? latest : null;
  if (TERMINAL.includes(status)) return { value, note: value === null ? undefined : "final" };
  if (status === "paused") return { value: null, note: "paused" };
  if (status !== "running") return { value: null };
  if (health?.state === "stalled") return { value: null, note: "stalled" };
  return { value };
}

/** Signals as short chips for the runs table: the check's name, worst first, with the message as the title. */
export function signalChips(signals: readonly Signal[] | undefined): { text: string; title: string; tone: "bad" | "warn" }[] {
  return [...(signals ?? [])]
    .sort((a, b) => (a.severity === b.severity ? 0 : a.severity === "error" ? -1 : 1))
    .map((s) => ({ text: s.check.replace(/_/g, " "), title: s.message, tone: s.severity === "error" ? "bad" : "warn" }));
}
