/** Fork a run from one of its checkpoints (POST /jobs/{id}/fork): a new job that starts from that checkpoint's
 * weights with a changed learning rate and/or mode, and counts iterations on from it; the job page and the runs
 * list show a fork's parent (`Lineage`). */
import { useState } from "react";
import { Link, useNavigate } from "react-router";
import { api, unwrap } from "../api/client";
import { ErrorBanner } from "../components/ui";

const MODES = ["sync", "async", "colocated"] as const;

export function ForkButton({ jobId, iteration, lr, mode }: { jobId: number; iteration: number; lr: number; mode: string }) {
  const navigate = useNavigate();
  const [open, setOpen] = useState(false);
  const [rate, setRate] = useState(String(lr));
  const [chosenMode, setChosenMode] = useState(mode);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(null);
  if (!open) {
    return <button className="link" data-action="fork" onClick={() => setOpen(true)}>⑂ fork</button>;
  }
  const start = async () => {
    setBusy(true);
    setError(null);
    const overrides: Record<string, unknown> = {};
    if (Number(rate) !== lr) overrides["training.lr"] = Number(rate);
    if (chosenMode !== mode) overrides.mode = chosenMode;
    try {
      const fork = await unwrap(api.POST("/api/v1/jobs/{job_id}/fork", {
        params: { path: { job_id: jobId } }, body: { iteration, overrides },
      }));
      navigate(`/jobs/${fork.id}`);
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  };
  return (
    <span className="fork-form" data-testid="fork-form">
      <label>learning rate <input aria-label="fork learning rate" value={rate} size={8}
        onChange={(e) => setRate(e.target.value)} /></label>{" "}
      <label>mode <select aria-label="fork mode" value={chosenMode} onChange={(e) => setChosenMode(e.target.value)}>
        {MODES.map((m) => <option key={m} value={m}>{m}</option>)}
      </select></label>{" "}
      <button disabled={busy} data-action="start-fork" onClick={() => void start()}>
        {busy ? "forking…" : `Fork at iteration ${iteration}`}
      </button>{" "}
      <button className="link" disabled={busy} onClick={() => setOpen(false)}>cancel</button>
      <ErrorBanner error={error} />
    </span>
  );
}

/** "forked from #P at iteration N" (nothing for a job that is not a fork). */
export function Lineage({ parent, iteration }: { parent?: number | null; iteration?: number | null }) {
  if (parent == null) return null;
  return (
    <div className="muted" data-testid="lineage">
      ⑂ fork of <Link to={`/jobs/${parent}`}>#{parent}</Link> at iteration {iteration}
    </div>
  );
}
