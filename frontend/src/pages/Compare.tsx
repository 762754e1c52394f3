/**
 * Compare 2-8 runs (URL `#/compare?ids=3,7`, so it can be shared): overlaid metric panels, any recorded metric, on a
 * shared x axis (iteration, samples seen or wall time since each run's first iteration; the panels zoom together, and
 * hover shows each run's value at that x, interpolated where a run has no point there), with the job page's chart
 * controls (smoothing, log scale, zero baseline; kept in the URL), the runs ranked by an evaluation suite (SuiteRanking.tsx)
 * and a side-by-side spec diff that marks what differs.
 */
import { useMemo, useState } from "react";
import { Link, useSearchParams } from "react-router";
import { jobSpec, type Job } from "../api/types";
import { ChartControls } from "../components/ChartControls";
import { LineChart } from "../components/LineChart";
import { minSpanOf, X_LABELS } from "../lib/chartView";
import { useChartView } from "../lib/useChartView";
import { Card, ErrorBanner, formatNumber, StatusBadge } from "../components/ui";
import { availableMetrics, commonTarget, PREFERRED_METRICS, RUN_COLORS, runSeries, runSummary } from "../lib/compare";
import { formatDuration } from "../lib/runs";
import { useCompared } from "../lib/queries";
import { parseIds } from "../lib/runs";
import { samplesRoute } from "../lib/sideBySide";
import { specDiff } from "../lib/specDiff";
import { SuiteRanking } from "./SuiteRanking";

const DEFAULT_PANELS = PREFERRED_METRICS.filter((m) => m !== "reward_errors"); // those a run recorded

export function ComparePage() {
  const [params, setParams] = useSearchParams();
  const ids = useMemo(() => parseIds(params.get("ids")), [params]);
  const [view, setView] = useChartView();
  const xMode = view.x;
  const { jobs, iterations } = useCompared(ids);
  const [onlyDiff, setOnlyDiff] = useState(true);

  const loadedJobs = jobs.map((q) => q.data).filter((j): j is Job => Boolean(j));
  const rows = iterations.map((q) => q.data ?? []);
  const metrics = useMemo(() => availableMetrics(rows), [rows]);
  const panels = (params.get("m")?.split(",").filter(Boolean) ?? DEFAULT_PANELS.filter((m) => metrics.includes(m)));
  const diff = useMemo(() => specDiff(loadedJobs.map(jobSpec)), [loadedJobs]);
  const error = [...jobs, ...iterations].find((q) => q.error)?.error;
  const target = commonTarget(rows.map((r) => runSummary(r, null)));
  const summaries = rows.map((r) => runSummary(r, target));

  const update = (key: string, value: string | null) =>
    setParams((current) => {
      const next = new URLSearchParams(current);
      if (value === null) next.delete(key);
      else next.set(key, value);
      return next;
    }, { replace: true });
  const togglePanel = (metric: string) =>
    update("m", (panels.includes(metric) ? panels.filter((m) => m !== metric) : [...panels, metric]).join(","));

  if (ids.length < 2) {
    return (
      <div className="not-found">
        <p>Pick 2 to 8 runs on the runs table to compare them.</p>
        <Link to="/jobs">← Runs</Link>
      </div>
    );
  }
  return (
    <div data-testid="compare">
      <div className="page-head">
        <div>
          <Link to="/jobs" className="muted">← Runs</Link>
          <h2>Compare {ids.length} runs</h2>
          <div>
            {ids.map((id, i) => {
              const job = loadedJobs.find((j) => j.id === id);
              return (
                <span key={id} className="run-chip" data-testid="run-chip">
                  <i style={{ background: RUN_COLORS[i % RUN_COLORS.length] }} />
                  <Link to={`/jobs/${id}`}>{job?.name ?? `#${id}`}</Link> <span className="muted">#{id}</span>
                  {job ? <StatusBadge status={job.status} /> : null}
                  {job?.parent_job_id != null ? (
                    <span className="muted" data-testid="chip-parent">
                      {" "}⑂ <Link to={`/jobs/${job.parent_job_id}`}>#{job.parent_job_id}</Link>@{job.parent_iteration}
                      {ids.includes(job.parent_job_id) ? " (compared)" : ""}
                    </span>
                  ) : null}
                </span>
              );
            })}
          </div>
        </div>
        <div className="filters">
          <Link className="button" to={samplesRoute(ids)}>Samples side by side</Link>
          <ChartControls view={view} onChange={setView} />
          <select aria-label="add panel" value="" onChange={(e) => e.target.value && togglePanel(e.target.value)}>
            <option value="">+ panel…</option>
            {metrics.filter((m) => !panels.includes(m)).map((m) => <option key={m} value={m}>{m}</option>)}
          </select>
        </div>
      </div>
      <ErrorBanner error={error} />
      <Card title="Summary" className="summary-card">
        <table className="table compact" data-testid="summary">
          <thead>
            <tr>
              <th>Run</th><th>Iterations</th><th>Duration</th><th>Final reward</th><th>Best reward</th>
              <th>Reached {target === null ? "–" : formatNumber(target, 3)} at</th><th>Mean samples/s</th><th>Mean iteration s</th>
            </tr>
          </thead>
          <tbody>
            {ids.map((id, i) => {
              const job = loadedJobs.find((j) => j.id === id);
              const sum = summaries[i];
              const started = job?.started_at ? Date.parse(job.started_at) : null;
              const ended = job?.finished_at ? Date.parse(job.finished_at) : Date.now();
              return (
                <tr key={id}>
                  <td><span className="run-chip"><i style={{ background: RUN_COLORS[i % RUN_COLORS.length] }} />{job?.name ?? `#${id}`}</span></td>
                  <td>{sum?.iterations ?? "–"}</td>
                  <td>{formatDuration(started === null ? null : (ended - started) / 1000)}</td>
                  <td>{formatNumber(sum?.finalReward, 3)}</td>
                  <td>{formatNumber(sum?.bestReward, 3)}</td>
                  <td>{sum?.firstIterationAtReward == null ? "–" : `iteration ${sum.firstIterationAtReward}`}</td>
                  <td>{formatNumber(sum?.meanSamplesPerS, 1)}</td>
                  <td>{formatNumber(sum?.meanIterationS, 2)}</td>
                </tr>
              );
            })}
          </tbody>
        </table>
      </Card>
      <SuiteRanking ids={ids} jobs={loadedJobs} />
      <div className="grid">
        {panels.map((metric) => (
          <Card key={metric} title={metric} actions={<button className="link" onClick={() => togglePanel(metric)} aria-label={`remove ${metric}`}>✕</button>}>
            <div data-testid={`panel-${metric}`}>
              <LineChart
                syncKey={`compare-${xMode}`}
                xLabel={X_LABELS[xMode]}
                integerX={xMode === "iteration"}
                view={view}
                minSpan={minSpanOf(metric)}
                series={ids.map((id, i) => ({
                  label: loadedJobs.find((j) => j.id === id)?.name ?? `#${id}`,
                  color: RUN_COLORS[i % RUN_COLORS.length],
                  points: runSeries(rows[i] ?? [], metric, xMode),
                }))}
              />
            </div>
          </Card>
        ))}
        <Card title="Spec diff" className="wide" actions={
          <label className="toggle"><input type="checkbox" checked={onlyDiff} onChange={(e) => setOnlyDiff(e.target.checked)} /> only differences</label>
        }>
          <table className="table compact diff-table" data-testid="spec-diff">
            <thead>
              <tr>
                <th>field</th>
                {ids.map((id) => <th key={id}>{loadedJobs.find((j) => j.id === id)?.name ?? `#${id}`}</th>)}
              </tr>
            </thead>
            <tbody>
              {diff.filter((row) => !onlyDiff || row.differs).map((row) => (
                <tr key={row.path} className={row.differs ? "differs" : ""} data-path={row.path}>
                  <td className="path">{row.path}</td>
                  {row.values.map((value, i) => <td key={i}>{value ?? "—"}</td>)}
                </tr>
              ))}
            </tbody>
          </table>
          <p className="muted">{diff.filter((r) => r.differs).length} of {diff.length} fields differ</p>
        </Card>
      </div>
    </div>
  );
}
