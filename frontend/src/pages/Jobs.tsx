/**
 * The runs table: every job of the team with status, health, duration, rewards, throughput, mode, model and owner;
 * sortable and filterable, with checkboxes to compare 2-8 runs. One request (`GET /runs`), refetched every 5 s.
 */
import { useMemo, useState } from "react";
import { Link, useNavigate } from "react-router";
import { JOB_STATUSES, type JobStatus, type Run } from "../api/types";
import { HealthBadge } from "../components/HealthBadge";
import { ErrorBanner, formatNumber, formatTime, Progress, StatusBadge } from "../components/ui";
import { useRuns } from "../lib/queries";
import { compareRoute, formatDuration, MAX_COMPARE, sortRuns, type SortKey } from "../lib/runs";
import { useSession } from "../session";

const COLUMNS: [SortKey, string][] = [
  ["name", "Name"], ["status", "Status"], ["health", "Health"], ["duration", "Duration"], ["reward", "Reward"],
  ["eval", "Eval reward"], ["throughput", "Samples/s"], ["mode", "Mode"], ["model", "Model"], ["owner", "Created by"],
  ["created", "Created"],
];

export function JobsPage() {
  const navigate = useNavigate();
  const { canWrite } = useSession();
  const [status, setStatus] = useState<JobStatus | "">("");
  const [name, setName] = useState("");
  const [unhealthyOnly, setUnhealthyOnly] = useState(false);
  const [sort, setSort] = useState<{ key: SortKey; desc: boolean }>({ key: "created", desc: true });
  const [selected, setSelected] = useState<number[]>([]);
  const { data, error } = useRuns(status, name);

  const rows = useMemo(() => {
    const runs = (data?.data ?? []).filter((run) => !unhealthyOnly || !run.health.healthy);
    return sortRuns(runs, sort.key, sort.desc);
  }, [data, unhealthyOnly, sort]);

  const toggle = (id: number) =>
    setSelected((cur) => (cur.includes(id) ? cur.filter((x) => x !== id) : cur.length < MAX_COMPARE ? [...cur, id] : cur));
  const sortBy = (key: SortKey) => setSort((cur) => ({ key, desc: cur.key === key ? !cur.desc : key !== "name" }));

  return (
    <div>
      <div className="page-head">
        <h2>Runs</h2>
        <div className="filters">
          <select aria-label="status filter" value={status} onChange={(e) => setStatus(e.target.value as JobStatus | "")}>
            <option value="">all statuses</option>
            {JOB_STATUSES.map((s) => (
              <option key={s} value={s}>{s}</option>
            ))}
          </select>
          <input aria-label="name filter" placeholder="filter by name" value={name} onChange={(e) => setName(e.target.value)} />
          <label className="toggle">
            <input type="checkbox" checked={unhealthyOnly} onChange={(e) => setUnhealthyOnly(e.target.checked)} /> unhealthy only
          </label>
          <button className="primary" disabled={selected.length < 2} onClick={() => navigate(compareRoute(selected))}
            title={`select 2-${MAX_COMPARE} runs`}>
            Compare{selected.length ? ` (${selected.length})` : ""}
          </button>
          {canWrite ? <Link className="button" to="/submit">New job</Link> : null}
        </div>
      </div>
      <ErrorBanner error={error} />
      <table className="table" data-testid="jobs-table">
        <thead>
          <tr>
            <th aria-label="select" />
            {COLUMNS.map(([key, label]) => (
              <th key={key} className="sortable" onClick={() => sortBy(key)} aria-sort={sort.key === key ? (sort.desc ? "descending" : "ascending") : "none"}>
                {label}{sort.key === key ? (sort.desc ? " ▾" : " ▴") : ""}
              </th>
            ))}
          </tr>
        </thead>
        <tbody>
          {rows.map((run) => <RunRow key={run.id} run={run} selected={selected.includes(run.id)} onToggle={() => toggle(run.id)} />)}
        </tbody>
      </table>
      {data && rows.length === 0 ? <p className="muted empty">No jobs{status || name || unhealthyOnly ? " match the filters" : " yet"}.</p> : null}
      {data ? <p className="muted">{data.count} job(s){selected.length ? ` · ${selected.length} selected` : ""}</p> : null}
    </div>
  );
}

function RunRow({ run, selected, onToggle }: { run: Run; selected: boolean; onToggle: () => void }) {
  const latest = (run.latest_metrics ?? {}) as Record<string, unknown>;
  const spec = run.spec as Record<string, unknown>;
  return (
    <tr className={selected ? "selected" : ""} data-testid={`run-${run.id}`}>
      <td><input type="checkbox" aria-label={`select ${run.name}`} checked={selected} onChange={onToggle} /></td>
      <td>
        <Link to={`/jobs/${run.id}`}>{run.name}</Link> <span className="muted">#{run.id}</span>
        <Progress value={run.progress.iteration} total={run.progress.total_iterations} />
      </td>
      <td><StatusBadge status={run.status} /></td>
      <td>
        <HealthBadge health={run.health} />
        {run.health.latest_error && !run.health.healthy ? <div className="muted clip-line" title={run.health.latest_error}>{run.health.latest_error.slice(0, 60)}</div> : null}
      </td>
      <td className="num">{formatDuration(run.duration_s)}</td>
      <td className="num">{formatNumber(latest.reward_mean, 3)}</td>
      <td className="num">{formatNumber(run.eval_reward, 3)}</td>
      <td className="num">{formatNumber(latest.samples_per_s, 1)}</td>
      <td>{String(spec.mode ?? "–")}</td>
      <td>{String(spec.model ?? "–")}</td>
      <td>{run.created_by_email ?? "–"}</td>
      <td>{formatTime(run.created_at)}</td>
    </tr>
  );
}
