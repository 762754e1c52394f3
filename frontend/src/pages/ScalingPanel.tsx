/** Current vs target generation instances, +/− and the autoscale toggle, with the scaling events and their reasons. */
import { useState } from "react";
import { api, unwrap } from "../api/client";
import type { Job, JobEvent, JobHealth } from "../api/types";
import { Card, ErrorBanner, formatTime } from "../components/ui";
import { capacityWarning } from "../lib/cluster";
import { useCluster } from "./Cluster";

const TERMINAL = ["succeeded", "failed", "cancelled"];

export function ScalingPanel({ job, events, canWrite, onChange, health }: { job: Job; events: JobEvent[]; canWrite: boolean; onChange: (job: Job) => void; health?: JobHealth }) {
  // running = heart-beating instances (health); an instance asked for but never started is pending, not running
  const running = health ? health.instances.running : (job.running_instances ?? 0);
  const pending = health ? health.instances.pending : (job.pending_instances ?? 0);
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);
  const scalingEvents = events.filter((e) => e.kind.includes("scal")).slice(-20).reverse();
  const editable = canWrite && !TERMINAL.includes(job.status);
  // the target past the generation pool's slots: the extra instances stay pending (same words as the submit form)
  const capacity = capacityWarning(editable ? job.target_instances : null, useCluster().data);

  const scale = async (body: { target_instances?: number; autoscale?: boolean }) => {
    setBusy(true);
    setError(null);
    try {
      onChange(await unwrap(api.POST("/api/v1/jobs/{job_id}/scale", { params: { path: { job_id: job.id } }, body })));
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  };

  return (
    <Card title="Scaling" className="scaling">
      <div className="scaling-row">
        <div className="kpi">
          <span className="kpi-value" data-testid="running-instances">{running}</span>
          <span className="kpi-label">running{pending ? <b className="kpi-note"> · {pending} pending</b> : null}</span>
        </div>
        <div className="stepper">
          <button aria-label="scale down" disabled={!editable || busy || job.autoscale || job.target_instances <= 1} onClick={() => void scale({ target_instances: job.target_instances - 1 })}>
            −
          </button>
          <div className="kpi">
            <span className="kpi-value" data-testid="target-instances">{job.target_instances}</span>
            <span className="kpi-label">target</span>
          </div>
          <button aria-label="scale up" disabled={!editable || busy || job.autoscale} onClick={() => void scale({ target_instances: job.target_instances + 1 })}>
            +
          </button>
        </div>
        <label className="toggle">
          <input type="checkbox" aria-label="autoscale" checked={job.autoscale} disabled={!editable || busy} onChange={(e) => void scale({ autoscale: e.target.checked })} />
          autoscale
        </label>
      </div>
      {capacity ? <p className="capacity-warning" data-testid="scale-capacity-warning">⚠ {capacity}</p> : null}
      <ErrorBanner error={error} />
      <ul className="scaling-events" data-testid="scaling-events">
        {scalingEvents.length === 0 ? <li className="muted">no scaling events yet</li> : null}
        {scalingEvents.map((e) => (
          <li key={e.id}>
            <span className="muted">{formatTime(e.created_at)}</span> {e.message}
          </li>
        ))}
      </ul>
    </Card>
  );
}
