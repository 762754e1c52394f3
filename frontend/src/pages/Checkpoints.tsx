/** The job's saved checkpoints (HF directories in the artifact store), each downloadable as a tar: the whole
 * checkpoint, the model alone (a LoRA job's merged with its adapter) or, for a LoRA job, the adapter alone. Each shows
 * its evaluation suites' means and the best one (checkpoint.select best) a badge; Evaluate runs the job's suites on it
 * (POST /evaluations), listed below with their results; Promote serves a LoRA checkpoint as a deployment's first adapter
 * (Deployments.tsx); Chat opens it in the playground (`job:<id>@<iteration>`); Fork starts a new run from one (ForkCheckpoint.tsx), and a
 * fork shows its parent here. */
import { useState } from "react";
import { Link } from "react-router";
import { api, unwrap } from "../api/client";
import { jobSpec } from "../api/types";
import { ErrorBanner, formatNumber, formatTime } from "../components/ui";
import { download } from "../lib/download";
import { playgroundRoute } from "../lib/playground";
import { queryClient, useCheckpoints, useJob } from "../lib/queries";
import { useSession } from "../session";
import { Evaluations, evaluationsKey } from "./Evaluations";
import { PromoteButton } from "./Deployments";
import { ForkButton, Lineage } from "./ForkCheckpoint";

type Form = "checkpoint" | "merged" | "adapter";
const LABELS: Record<Form, string> = { checkpoint: "⬇ download", merged: "⬇ merged model", adapter: "⬇ adapter" };

export function Checkpoints({ jobId, iteration, status, lora = false }:
  { jobId: number; iteration: number; status: string; lora?: boolean }) {
  const { data, error } = useCheckpoints(jobId, iteration, status);
  const { canWrite } = useSession(); // evaluate, chat, promote and fork need member: a viewer gets downloads only
  const [busy, setBusy] = useState<string | null>(null);
  const [downloadError, setDownloadError] = useState<unknown>(null);
  const job = useJob(jobId).data;
  const suites = job ? (jobSpec(job).evaluation ?? []).map((suite) => suite.name) : [];
  const lineage = <Lineage parent={job?.parent_job_id} iteration={job?.parent_iteration} />;
  if (error) return <ErrorBanner error={error} />;
  const rows = data?.data ?? [];
  if (rows.length === 0) return <>{lineage}<div className="muted">no checkpoints yet</div></>;
  const forms: Form[] = lora ? ["checkpoint", "merged", "adapter"] : ["checkpoint", "merged"];
  const fetchOne = async (it: number, form: Form) => {
    setBusy(`${it}:${form}`);
    setDownloadError(null);
    const name = form === "checkpoint" ? `job-${jobId}-iter-${it}` : `job-${jobId}-iter-${it}-${form}`;
    try {
      await download(`/api/v1/jobs/${jobId}/export/checkpoints/${it}.tar?form=${form}`, `${name}.tar`);
    } catch (err) {
      setDownloadError(err);
    } finally {
      setBusy(null);
    }
  };
  const evaluate = async (it: number) => {
    setBusy(`${it}:evaluate`);
    setDownloadError(null);
    try {
      for (const suite of suites) {
        await unwrap(api.POST("/api/v1/evaluations", { body: { job_id: jobId, checkpoint: it, suite } }));
      }
      await queryClient.invalidateQueries({ queryKey: evaluationsKey(jobId) });
    } catch (err) {
      setDownloadError(err);
    } finally {
      setBusy(null);
    }
  };
  return (
    <>
      {lineage}
      <ErrorBanner error={downloadError} />
      <ul className="events" data-testid="checkpoints">
        {[...rows].reverse().map((c) => (
          <li key={c.iteration}>
            <span className="muted">{formatTime(c.created_at)}</span> iteration <b>{c.iteration}</b>{" "}
            {c.best && <span className="badge" data-testid="best-checkpoint">★ best</span>}{" "}
            {Object.entries(c.scores ?? {}).map(([suite, values]) => (
              <span key={suite} className="muted" data-suite={suite}>{suite} {formatNumber(values.mean, 4)} </span>
            ))}
            <code>{c.path}</code>{" "}
            {canWrite && suites.length > 0 && (
              <button className="link" disabled={busy !== null} data-action="evaluate"
                onClick={() => void evaluate(c.iteration)}>
                {busy === `${c.iteration}:evaluate` ? "queuing…" : "▶ evaluate"}
              </button>
            )}
            {canWrite &&
              <Link className="link" data-action="chat" to={playgroundRoute(`job:${jobId}@${c.iteration}`)}>💬 chat</Link>}{" "}
            {canWrite && lora && job && <PromoteButton jobId={jobId} iteration={c.iteration} baseModel={jobSpec(job).model} />}
            {forms.map((form) => (
              <button key={form} className="link" disabled={busy !== null} data-form={form}
                onClick={() => void fetchOne(c.iteration, form)}>
                {busy === `${c.iteration}:${form}` ? "downloading…" : LABELS[form]}
              </button>
            ))}
            {canWrite && job && <ForkButton jobId={jobId} iteration={c.iteration} lr={jobSpec(job).training?.lr ?? 0}
              mode={jobSpec(job).mode ?? "sync"} />}
          </li>
        ))}
      </ul>
      <p className="muted">CLI: <code>streamrl checkpoints download {jobId} --iteration {rows[rows.length - 1].iteration}
        {lora ? " --form adapter" : ""}</code>{rows.some((c) => c.best) && <> · serve the best as <code>job:{jobId}@best</code> (OpenAI API)</>}</p>
      <h4>Evaluations</h4>
      <Evaluations jobId={jobId} />
    </>
  );
}
