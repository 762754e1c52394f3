/** A job's evaluations (suite runs on its checkpoints: periodic and on demand), newest first: status, mean, pass@1,
 * pass@k; a row opens the prompts with each output and its score (docs/dashboard.md#evaluations). */
import { useState } from "react";
import { useQuery } from "@tanstack/react-query";
import { api, unwrap } from "../api/client";
import { ErrorBanner, StatusBadge, formatNumber } from "../components/ui";

export const evaluationsKey = (jobId: number) => ["job", jobId, "evaluations"] as const;
const ACTIVE = new Set(["queued", "running"]);

export function Evaluations({ jobId }: { jobId: number }) {
  const { data, error } = useQuery({
    queryKey: evaluationsKey(jobId),
    queryFn: () => unwrap(api.GET("/api/v1/evaluations", { params: { query: { job_id: jobId } } })),
    refetchInterval: (query) => (query.state.data ?? []).some((e) => ACTIVE.has(e.status)) ? 2000 : false,
  });
  const [open, setOpen] = useState<number | null>(null);
  if (error) return <ErrorBanner error={error} />;
  const rows = data ?? [];
  if (rows.length === 0) return <div className="muted">no evaluations yet</div>;
  return (
    <>
      <table className="table" data-testid="evaluations">
        <thead><tr><th>id</th><th>checkpoint</th><th>suite</th><th>status</th><th>mean</th><th>pass@1</th><th>pass@k</th></tr></thead>
        <tbody>
          {rows.map((e) => (
            <tr key={e.id} data-evaluation={e.id} style={{ cursor: "pointer" }} onClick={() => setOpen(open === e.id ? null : e.id)}>
              <td>{e.id}</td><td>{e.iteration ?? e.model}</td><td>{e.suite_name}</td>
              <td><StatusBadge status={e.status} />{e.error ? <span className="muted"> {e.error}</span> : null}</td>
              <td>{formatNumber(e.summary?.mean, 4)}</td><td>{formatNumber(e.summary?.["pass@1"], 4)}</td>
              <td>{e.summary ? `${formatNumber(e.summary["pass@k"], 4)} (k=${e.summary.k})` : "–"}</td>
            </tr>
          ))}
        </tbody>
      </table>
      {open !== null && <EvaluationRows evaluationId={open} />}
    </>
  );
}

function EvaluationRows({ evaluationId }: { evaluationId: number }) {
  const { data, error } = useQuery({
    queryKey: ["evaluation", evaluationId],
    queryFn: () => unwrap(api.GET("/api/v1/evaluations/{evaluation_id}", { params: { path: { evaluation_id: evaluationId } } })),
  });
  if (error) return <ErrorBanner error={error} />;
  if (!data) return <div className="muted">loading…</div>;
  return (
    <ul className="events" data-testid="evaluation-rows">
      {(data.rows ?? []).map((row) => (
        <li key={row.prompt_id}>
          <code>{row.prompt_id}</code> {row.prompt} <span className="muted">answer: {String(row.answer ?? "–")}</span>
          <ol>{row.outputs.map((text, i) => <li key={i}><b>{formatNumber(row.scores[i], 3)}</b> <code>{text}</code></li>)}</ol>
        </li>
      ))}
    </ul>
  );
}
