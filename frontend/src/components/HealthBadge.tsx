/** The job's health state as a badge (colour by severity); the title carries the one-line summary. */
import type { JobHealth } from "../api/types";

const LABELS: Record<JobHealth["state"], string> = {
  queued: "queued",
  paused: "paused",
  generating: "healthy",
  waiting_for_instances: "waiting for instances",
  restarting_driver: "restarting driver",
  stalled: "stalled",
  crash_looping: "crash-looping",
  reward_errors: "reward errors",
  succeeded: "finished",
  failed: "failed",
  cancelled: "cancelled",
};

/** States the platform is recovering from by itself. */
const WARN_STATES = new Set<JobHealth["state"]>(["waiting_for_instances", "restarting_driver"]);

export function HealthBadge({ health }: { health: JobHealth }) {
  const tone = health.healthy ? "ok" : WARN_STATES.has(health.state) ? "warn" : "bad";
  return (
    <span className={`health health-${tone}`} data-testid="health" data-state={health.state} title={health.summary}>
      {LABELS[health.state]}
    </span>
  );
}

/** A banner on the job page for an unhealthy job: what is wrong and the newest error text. */
export function HealthBanner({ health }: { health: JobHealth }) {
  if (health.healthy) return null;
  const tone = WARN_STATES.has(health.state) ? "banner-warn" : "banner-error";
  return (
    <div className={`banner ${tone}`} role="status" data-testid="health-banner">
      <b>{LABELS[health.state]}</b>: {health.summary}
      {health.latest_error ? <div className="mono health-error">{health.latest_error}</div> : null}
    </div>
  );
}
