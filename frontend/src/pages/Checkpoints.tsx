/** The job's saved checkpoints (HF directories in the artifact store), each downloadable as a tar. */
import { useState } from "react";
import { ErrorBanner, formatTime } from "../components/ui";
import { download } from "../lib/download";
import { useCheckpoints } from "../lib/queries";

export function Checkpoints({ jobId, iteration, status }: { jobId: number; iteration: number; status: string }) {
  const { data, error } = useCheckpoints(jobId, iteration, status);
  const [busy, setBusy] = useState<number | null>(null);
  const [downloadError, setDownloadError] = useState<unknown>(null);
  if (error) return <ErrorBanner error={error} />;
  const rows = data?.data ?? [];
  if (rows.length === 0) return <div className="muted">no checkpoints yet</div>;
  const fetchOne = async (it: number) => {
    setBusy(it);
    setDownloadError(null);
    try {
      await download(`/api/v1/jobs/${jobId}/export/checkpoints/${it}.tar`, `job-${jobId}-iter-${it}.tar`);
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
            <button className="link" disabled={busy !== null} onClick={() => void fetchOne(c.iteration)}>
              {busy === c.iteration ? "downloading…" : "⬇ download"}
            </button>
          </li>
        ))}
      </ul>
      <p className="muted">CLI: <code>streamrl checkpoints download {jobId} --iteration {rows[rows.length - 1].iteration}</code></p>
    </>
  );
}
