/** Jobs of the current team: status, progress, samples/s sparkline, owner; filter by status and name. */
import { useRef, useState } from "react";
import { Link } from "react-router";
import { api, unwrap } from "../api/client";
import { JOB_STATUSES, jobSpec, type Job, type JobStatus } from "../api/types";
import { Sparkline } from "../components/Sparkline";
import { ErrorBanner, formatNumber, formatTime, Progress, StatusBadge } from "../components/ui";
import { metricSeries, type SeriesPoint } from "../lib/sparkline";
import { usePolling } from "../lib/usePolling";

const SPARK_POINTS = 30;

async function throughputTrend(job: Job): Promise<SeriesPoint[]> {
  const done = job.progress?.iteration ?? 0;
  if (done === 0) return [];
  const page = await unwrap(
    api.GET("/api/v1/jobs/{job_id}/iterations", {
      params: { path: { job_id: job.id }, query: { after: Math.max(0, done - SPARK_POINTS), limit: SPARK_POINTS } },
    }),
  );
  return metricSeries(page.data, "samples_per_s");
}

export function JobsPage() {
  const [status, setStatus] = useState<JobStatus | "">("");
  const [name, setName] = useState("");
  // Sparkline series by job id, refetched only when the job has finished another iteration.
  const trendCache = useRef(new Map<number, { iteration: number; points: SeriesPoint[] }>());
  const trendOf = async (job: Job): Promise<SeriesPoint[]> => {
    const iteration = job.progress?.iteration ?? 0;
    const cached = trendCache.current.get(job.id);
    if (cached && cached.iteration === iteration) return cached.points;
    const points = await throughputTrend(job).catch(() => cached?.points ?? []);
    trendCache.current.set(job.id, { iteration, points });
    return points;
  };
  const { data, error } = usePolling(
    async () => {
      const page = await unwrap(
        api.GET("/api/v1/jobs", { params: { query: { status: status || undefined, name: name || undefined, limit: 50 } } }),
      );
      const trends = await Promise.all(page.data.map(trendOf));
      return { jobs: page.data, count: page.count, trends };
    },
    [status, name],
  );

  return (
    <div>
      <div className="page-head">
        <h2>Jobs</h2>
        <div className="filters">
          <select aria-label="status filter" value={status} onChange={(e) => setStatus(e.target.value as JobStatus | "")}>
            <option value="">all statuses</option>
            {JOB_STATUSES.map((s) => (
              <option key={s} value={s}>{s}</option>
            ))}
          </select>
          <input aria-label="name filter" placeholder="filter by name" value={name} onChange={(e) => setName(e.target.value)} />
          <Link className="button primary" to="/submit">New job</Link>
        </div>
      </div>
      <ErrorBanner error={error} />
      <table className="table" data-testid="jobs-table">
        <thead>
          <tr>
            <th>Name</th>
            <th>Status</th>
            <th>Progress</th>
            <th>Samples/s</th>
            <th>Mode</th>
            <th>Owner</th>
            <th>Created</th>
          </tr>
        </thead>
        <tbody>
          {data?.jobs.map((job, i) => (
            <tr key={job.id}>
              <td>
                <Link to={`/jobs/${job.id}`}>{job.name}</Link> <span className="muted">#{job.id}</span>
              </td>
              <td><StatusBadge status={job.status} /></td>
              <td><Progress value={job.progress?.iteration ?? 0} total={job.progress?.total_iterations ?? 0} /></td>
              <td>
                <div className="spark-cell">
                  <Sparkline points={data.trends[i]} title="samples/s over recent iterations" />
                  <span>{formatNumber(job.latest_metrics?.samples_per_s, 1)}</span>
                </div>
              </td>
              <td>{jobSpec(job).mode}</td>
              <td>{job.created_by_email ?? "–"}</td>
              <td>{formatTime(job.created_at)}</td>
            </tr>
          ))}
        </tbody>
      </table>
      {data && data.jobs.length === 0 ? <p className="muted empty">No jobs{status || name ? " match the filters" : " yet"}.</p> : null}
      {data ? <p className="muted">{data.count} job(s)</p> : null}
    </div>
  );
}
