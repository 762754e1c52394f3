/** The job's health state as a badge (colour by severity; the title carries the one-line summary), the banner of an
 * unhealthy job, and its training signals. Wording rules live in lib/health.ts. */
import type { JobHealth, JobStatus } from "../api/types";
import { bannerText, HEALTH_LABELS, healthBadgeLabel, signalChips } from "../lib/health";

/** States the platform is recovering from by itself. */
const WARN_STATES = new Set<JobHealth["state"]>(["waiting_for_instances", "driver_lost", "restarting_driver", "resuming"]);

/** Beside a status badge: nothing when health would only repeat the status (or is stale for it). */
export function HealthBadge({ health, status }: { health: JobHealth; status: JobStatus }) {
  const label = healthBadgeLabel(status, health);
  if (label === null) return null;
  const tone = health.healthy ? "ok" : WARN_STATES.has(health.state) ? "warn" : "bad";
  return (
    <span className={`health health-${tone}`} data-testid="health" data-state={health.state} title={health.summary}>
      {label}
    </span>
  );
}

/** A banner on the job page for an unhealthy job: what is wrong and the newest error text (once). */
export function HealthBanner({ health }: { health: JobHealth }) {
  if (health.healthy) return null;
  const tone = WARN_STATES.has(health.state) ? "banner-warn" : "banner-error";
  const text = bannerText(HEALTH_LABELS[health.state], health.summary);
  const error = health.latest_error && !health.summary.includes(health.latest_error) ? health.latest_error : null;
  return (
    <div className={`banner ${tone}`} role="status" data-testid="health-banner">
      {text}
      {error ? <div className="mono health-error">{error}</div> : null}
    </div>
  );
}

/** The training-signal checks that fire, one line each (job page). */
/** The checks read the newest SIGNAL_WINDOW iterations (backend/services/signals.py WINDOW): before that, say so. */
export const SIGNAL_WINDOW = 3;

export function SignalList({ signals = [], iterations }: { signals: JobHealth["signals"]; iterations?: number }) {
  if (!signals.length && iterations !== undefined && iterations < SIGNAL_WINDOW) {
    return (
      <p className="muted" data-testid="signals-none">
        {iterations === 0 ? "No iteration recorded yet" : `${iterations} iteration(s) recorded`}: the checks need the newest {SIGNAL_WINDOW}.
      </p>
    );
  }
  if (!signals.length) return <p className="muted" data-testid="signals-none">No check fires: the reward varies and the losses are finite.</p>;
  return (
    <ul className="signals" data-testid="signals">
      {signals.map((s) => (
        <li key={s.check} className={`signal signal-${s.severity}`} data-check={s.check}>
          <b>{s.check.replace(/_/g, " ")}</b> <span className="muted">since iteration {s.since_iteration}</span>
          <div>{s.message}</div>
        </li>
      ))}
    </ul>
  );
}

/** The runs table's Signals cell: one chip per check that fires. */
export function SignalChips({ signals }: { signals: JobHealth["signals"] | undefined }) {
  const chips = signalChips(signals);
  if (!chips.length) return <span className="muted">–</span>;
  return (
    <span className="chips" data-testid="signal-chips">
      {chips.map((c) => <span key={c.text} className={`health health-${c.tone}`} title={c.title}>{c.text}</span>)}
    </span>
  );
}
