/** The job's saved checkpoints (HF safetensors in the artifact store), refreshed as iterations complete. */
import { useEffect, useState } from "react";
import { api, unwrap } from "../api/client";
import type { Schemas } from "../api/types";
import { ErrorBanner, formatTime } from "../components/ui";

type Checkpoint = Schemas["CheckpointPublic"];

export function Checkpoints({ jobId, iteration, status }: { jobId: number; iteration: number; status: string }) {
  const [rows, setRows] = useState<Checkpoint[]>([]);
  const [error, setError] = useState<unknown>(null);
  useEffect(() => {
    unwrap(api.GET("/api/v1/jobs/{job_id}/checkpoints", { params: { path: { job_id: jobId } } })).then(
      (page) => setRows(page.data),
      setError,
    );
  }, [jobId, iteration, status]); // the final checkpoint lands after the last iteration's metrics
  if (error) return <ErrorBanner error={error} />;
  if (rows.length === 0) return <div className="muted">no checkpoints yet</div>;
  return (
    <ul className="events" data-testid="checkpoints">
      {[...rows].reverse().map((c) => (
        <li key={c.iteration}>
          <span className="muted">{formatTime(c.created_at)}</span> iteration <b>{c.iteration}</b> <code>{c.path}</code>
        </li>
      ))}
    </ul>
  );
}
