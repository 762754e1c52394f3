/**
 * ETA and cost of a job (GET /jobs/{id}/eta, backend/services/job_eta.py): remaining iterations at the recent
 * iterations' median time, the device-seconds used per pool (as GET /usage counts them), the projection to the last
 * iteration and the budgets it counts against (the job's device-seconds limit, the team's device-hours per month).
 */
import { useQuery } from "@tanstack/react-query";
import { api, unwrap } from "../api/client";
import { Card, formatNumber, formatTime } from "../components/ui";
import { formatDuration } from "../lib/runs";

const LIVE_MS = 5000;

const hours = (seconds: number) => seconds / 3600;

export function JobEta({ jobId, iteration, status }: { jobId: number; iteration: number; status: string }) {
  const { data, error } = useQuery({
    queryKey: ["job-eta", jobId, iteration, status],
    queryFn: () => unwrap(api.GET("/api/v1/jobs/{job_id}/eta", { params: { path: { job_id: jobId } } })),
    refetchInterval: ["succeeded", "failed", "cancelled"].includes(status) ? false : LIVE_MS,
  });
  if (error) return <Card title="ETA and cost"><p className="muted">not available: {String(error)}</p></Card>;
  if (!data) return <Card title="ETA and cost"><p className="muted">loading…</p></Card>;
  const budget = data.team_max_device_hours_per_month;
  const projected = data.projected_device_seconds;
  return (
    <Card title="ETA and cost">
      <dl className="facts" data-testid="job-eta">
        <dt>ETA</dt>
        <dd data-testid="eta">
          {data.eta_s === null || data.eta_s === undefined
            ? <span className="muted">{data.note ?? "–"}</span>
            : data.remaining_iterations === 0
              ? "done"
              : <>{formatDuration(data.eta_s)} <span className="muted">({data.remaining_iterations} iterations left × {formatNumber(data.seconds_per_iteration, 1)} s, {data.basis === "recent_iterations" ? "median of the recent iterations" : "wall time per iteration"}; about {formatTime(data.finishes_at)})</span></>}
        </dd>
        <dt>Used</dt>
        <dd data-testid="cost-used">
          {formatNumber(data.usage.device_seconds, 1)} device-s
          <span className="muted"> (generation {formatNumber(data.usage.generation_device_seconds, 1)}, training {formatNumber(data.usage.training_device_seconds, 1)}) · {data.usage.tokens_generated} tokens sampled, {data.usage.tokens_trained} trained</span>
        </dd>
        <dt>Projected</dt>
        <dd data-testid="cost-projected">
          {projected === null || projected === undefined ? <span className="muted">after the first recorded iteration</span>
            : <>{formatNumber(projected, 1)} device-s <span className="muted">({formatNumber(data.device_seconds_per_iteration, 1)} per iteration)</span></>}
          {data.max_device_seconds != null ? <span className="muted"> · job limit {formatNumber(data.max_device_seconds, 0)} device-s</span> : null}
        </dd>
        <dt>Team budget</dt>
        <dd data-testid="cost-budget">
          {budget === null || budget === undefined
            ? <span className="muted">no monthly budget · {formatNumber(data.team_used_device_hours_this_month, 3)} device-hours used this month</span>
            : <>{formatNumber(data.team_used_device_hours_this_month, 3)} of {formatNumber(budget, 1)} device-hours this month
              {projected != null ? <span className="muted"> · this job: {formatNumber((100 * hours(projected)) / budget, 1)}% of the budget when done</span> : null}</>}
        </dd>
      </dl>
    </Card>
  );
}
