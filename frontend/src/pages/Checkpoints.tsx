/** The job's saved checkpoints (HF directories in the artifact store), each downloadable as a tar: the whole
 * checkpoint, the model alone (a LoRA job's merged with its adapter) or, for a LoRA job, the adapter alone. */
import { useState } from "react";
import { ErrorBanner, formatTime } from "../components/ui";
import { download } from "../lib/download";
import { useCheckpoints } from "../lib/queries";

type Form = "checkpoint" | "merged" | "adapter";
const LABELS: Record<Form, string> = { checkpoint: "⬇ download", merged: "⬇ merged model", adapter: "⬇ adapter" };

export function Checkpoints({ jobId, iteration, status, lora = false }:
  { jobId: number; iteration: number; status: string; lora?: boolean }) {
  const { data, error } = useCheckpoints(jobId, iteration, status);
  const [busy, setBusy] = useState<string | null>(null);
  const [downloadError, setDownloadError] = useState<unknown>(null);
  if (error) return <ErrorBanner error={error} />;
  const rows = data?.data ?? [];
  if (rows.length === 0) return <div className="muted">no checkpoints yet</div>;
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
  return (
    <>
      <ErrorBanner error={downloadError} />
      <ul className="events" data-testid="checkpoints">
        {[...rows].reverse().map((c) => (
          <li key={c.iteration}>
            <span className="muted">{formatTime(c.created_at)}</span> iteration <b>{c.iteration}</b> <code>{c.path}</code>{" "}
            {forms.map((form) => (
              <button key={form} className="link" disabled={busy !== null} data-form={form}
                onClick={() => void fetchOne(c.iteration, form)}>
                {busy === `${c.iteration}:${form}` ? "downloading…" : LABELS[form]}
              </button>
            ))}
          </li>
        ))}
      </ul>
      <p className="muted">CLI: <code>streamrl checkpoints download {jobId} --iteration {rows[rows.length - 1].iteration}
        {lora ? " --form adapter" : ""}</code></p>
    </>
  );
}
