/**
 * The runs table: every job of the team with status, health, duration, rewards, throughput, mode, model and owner,
 * its tags and the first line of its notes; sortable, filterable by status and tag and searchable (name, tags,
 * notes; the filters live in the URL, so a filtered table can be shared), with checkboxes to compare 2-8 runs.
 * One request (`GET /runs`), refetched every 5 s.
 */
import { useMemo, useState } from "react";
import { Link, useNavigate, useSearchParams } from "react-router";
import { JOB_STATUSES, type JobStatus, type Run } from "../api/types";
import { HealthBadge, SignalChips } from "../components/HealthBadge";
import { ErrorBanner, formatNumber, formatTime, Progress, SharedBadge, SharedTrainingBadge, StatusBadge } from "../components/ui";
import { useRuns } from "../lib/queries";
import { compareRoute, formatDuration, MAX_COMPARE, notesPreview, sortRuns, type RunFilters, type SortKey } from "../lib/runs";
import { useSession } from "../session";
import { Lineage } from "./ForkCheckpoint";

const COLUMNS: [SortKey, string][] = [
  ["name", "Name"], ["status", "Status"], ["health", "Health"], ["signals", "Signals"], ["duration", "Duration"], ["reward", "Reward"],
  ["eval", "Eval reward"], ["throughput", "Samples/s"], ["mode", "Mode"], ["model", "Model"], ["owner", "Created by"],
  ["created", "Created"],
];

export function JobsPage() {
  const navigate = useNavigate();
  const { canWrite } = useSession();
  const [params, setParams] = useSearchParams();
  const filters: RunFilters = {
    status: (params.get("status") ?? "") as JobStatus | "",
    tag: params.get("tag") ?? "",
    q: params.get("q") ?? "",
  };
  const setFilter = (key: keyof RunFilters, value: string) => {
    const next = new URLSearchParams(params);
    if (value) next.set(key, value);
    else next.delete(key);
    setParams(next, { replace: true });
  };
  const [unhealthyOnly, setUnhealthyOnly] = useState(false);
  const [sort, setSort] = useState<{ key: SortKey; desc: boolean }>({ key: "created", desc: true });
  const [selected, setSelected] = useState<number[]>([]);
  const { data, error } = useRuns(filters);
  const knownTags = useMemo(() => [...new Set((data?.data ?? []).flatMap((run) => run.tags))].sort(), [data]);

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
          <select aria-label="status filter" value={filters.status} onChange={(e) => setFilter("status", e.target.value)}>
            <option value="">all statuses</option>
            {JOB_STATUSES.map((s) => (
              <option key={s} value={s}>{s}</option>
            ))}
          </select>
          <input aria-label="search runs" type="search" className="run-search" placeholder="search name, tags, notes" value={filters.q} onChange={(e) => setFilter("q", e.target.value)} />
          <label className="toggle">
            tag
            <input aria-label="tag filter" list="known-tags" placeholder="any" className="tag-filter" value={filters.tag}
              onChange={(e) => setFilter("tag", e.target.value.trim())} />
          </label>
          <datalist id="known-tags">{knownTags.map((t) => <option key={t} value={t} />)}</datalist>
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
      <div className="table-scroll">
        <table className="table runs-table" data-testid="jobs-table">
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
            {rows.map((run) => (
              <RunRow key={run.id} run={run} selected={selected.includes(run.id)} onToggle={() => toggle(run.id)} onTag={(tag) => setFilter("tag", tag)} />
            ))}
          </tbody>
        </table>
      </div>
      {data && rows.length === 0 ? <p className="muted empty">No jobs{filters.status || filters.tag || filters.q || unhealthyOnly ? " match the filters" : " yet"}.</p> : null}
      {data ? <p className="muted">{data.count} job(s){selected.length ? ` · ${selected.length} selected` : ""}</p> : null}
    </div>
  );
}

function RunRow({ run, selected, onToggle, onTag }: { run: Run; selected: boolean; onToggle: () => void; onTag: (tag: string) => void }) {
  const latest = (run.latest_metrics ?? {}) as Record<string, unknown>;
  const spec = run.spec as Record<string, unknown>;
  return (
    <tr className={selected ? "selected" : ""} data-testid={`run-${run.id}`}>
      <td><input type="checkbox" aria-label={`select ${run.name}`} checked={selected} onChange={onToggle} /></td>
      <td>
        <Link to={`/jobs/${run.id}`}>{run.name}</Link> <span className="muted">#{run.id}</span>
        <Lineage parent={run.parent_job_id} iteration={run.parent_iteration} />
        <Progress value={run.progress.iteration} total={run.progress.total_iterations} />
        {run.tags.length ? (
          <div className="tags" data-testid="run-tags">
            {run.tags.map((tag) => <button key={tag} type="button" className="tag" title={`only runs tagged ${tag}`} onClick={() => onTag(tag)}>{tag}</button>)}
          </div>
        ) : null}
        {run.notes ? <div className="muted clip-line notes-line" title={run.notes} data-testid="run-notes">{notesPreview(run.notes)}</div> : null}
      </td>
      <td><StatusBadge status={run.status} /></td>
      <td>
        <HealthBadge health={run.health} status={run.status} />
        {run.health.latest_error && !run.health.healthy ? <div className="muted clip-line" title={run.health.latest_error}>{run.health.latest_error.slice(0, 60)}</div> : null}
      </td>
      <td><SignalChips signals={run.health.signals} /></td>
      <td className="num">{formatDuration(run.duration_s)}</td>
      <td className="num">{formatNumber(latest.reward_mean, 3)}</td>
      <td className="num">{formatNumber(run.eval_reward, 3)}</td>
      <td className="num">{formatNumber(latest.samples_per_s, 1)}</td>
      <td>{String(spec.mode ?? "–")}{run.shared_generation ? <SharedBadge short /> : null}{run.shared_training ? <SharedTrainingBadge short /> : null}</td>
      <td>{String(spec.model ?? "–")}</td>
      <td>{run.created_by_email ?? "–"}</td>
      <td>{formatTime(run.created_at)}</td>
    </tr>
  );
}
