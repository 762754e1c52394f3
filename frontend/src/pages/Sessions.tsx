/**
 * Tinker sessions (docs/tinker.md): the team's training clients with their owner, base model, steps, last call and
 * parked state; a selected session shows its checkpoints (expiry, published, user metadata) and charts of its loss
 * and of its calls' compute time per step.
 */
import { useState } from "react";
import { useQuery } from "@tanstack/react-query";
import { Link } from "react-router";
import { api, unwrap } from "../api/client";
import type { components } from "../api/schema";
import { LineChart } from "../components/LineChart";
import { Card, ErrorBanner, formatNumber, formatTime, StatusBadge } from "../components/ui";

type Session = components["schemas"]["TinkerSessionPublic"];
type Detail = components["schemas"]["TinkerSessionDetail"];
type Checkpoint = components["schemas"]["TinkerCheckpointPublic"];

function Metadata({ value }: { value: Record<string, string> | null | undefined }) {
  const entries = Object.entries(value ?? {});
  if (!entries.length) return <span className="muted">—</span>;
  return <span data-testid="user-metadata">{entries.map(([k, v]) => `${k}=${v}`).join(", ")}</span>;
}

export function SessionsPage() {
  const [selected, setSelected] = useState<number | null>(null);
  const sessions = useQuery({
    queryKey: ["tinker", "sessions"],
    queryFn: () => unwrap(api.GET("/api/v1/tinker/sessions")),
    refetchInterval: 5000,
  });
  const rows: Session[] = sessions.data ?? [];
  return (
    <div className="page">
      <h1>Tinker sessions</h1>
      <ErrorBanner error={sessions.error} />
      {rows.length === 0 && !sessions.isLoading ? (
        <p className="muted" data-testid="no-sessions">No Tinker training clients yet (docs/tinker.md: point the tinker SDK at this server).</p>
      ) : (
        <div className="table-scroll">
          <table className="table" data-testid="sessions-table">
            <thead>
              <tr>
                <th>model id</th><th>owner</th><th>base model</th><th>status</th><th>steps</th><th>last call</th>
                <th>checkpoints</th><th>user metadata</th>
              </tr>
            </thead>
            <tbody>
              {rows.map((s) => (
                <tr key={s.job_id} data-testid={`session-${s.job_id}`} className={selected === s.job_id ? "selected" : ""}
                    onClick={() => setSelected(s.job_id)} style={{ cursor: "pointer" }}>
                  <td><Link to={`/jobs/${s.job_id}`}>{s.model_id}</Link></td>
                  <td>{s.owner ?? "—"}{s.api_key ? <span className="muted"> · key {s.api_key}</span> : null}</td>
                  <td>{s.base_model}{s.lora_rank ? <span className="muted"> · LoRA {s.lora_rank}</span> : null}</td>
                  <td><StatusBadge status={s.status} />{s.parked ? <span className="muted" data-testid="parked"> parked</span> : null}</td>
                  <td>{s.steps}</td>
                  <td>{formatTime(s.last_call)}</td>
                  <td>{s.checkpoints?.length ?? 0}</td>
                  <td><Metadata value={s.user_metadata} /></td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      {selected !== null ? <SessionDetail jobId={selected} /> : null}
    </div>
  );
}

function CheckpointRow({ checkpoint }: { checkpoint: Checkpoint }) {
  return (
    <tr data-testid="session-checkpoint">
      <td><code>{checkpoint.tinker_path}</code></td>
      <td>{checkpoint.checkpoint_type}</td>
      <td>{formatTime(checkpoint.time)}</td>
      <td data-testid="checkpoint-expiry">{checkpoint.expires_at ? `expires ${formatTime(checkpoint.expires_at)}` : "never expires"}</td>
      <td>{checkpoint.public ? "published (team)" : "private (its key)"}</td>
      <td><Metadata value={checkpoint.user_metadata} /></td>
    </tr>
  );
}

function SessionDetail({ jobId }: { jobId: number }) {
  const detail = useQuery({
    queryKey: ["tinker", "sessions", jobId],
    queryFn: () => unwrap(api.GET("/api/v1/tinker/sessions/{job_id}", { params: { path: { job_id: jobId } } })),
    refetchInterval: 5000,
  });
  const data: Detail | undefined = detail.data;
  const steps = data?.steps_series ?? [];
  const loss = steps.filter((s) => s.loss != null).map((s) => ({ x: s.step, y: s.loss as number }));
  const latency = steps.filter((s) => s.step_seconds != null).map((s) => ({ x: s.step, y: (s.step_seconds as number) * 1000 }));
  return (
    <Card title={data ? `Session ${data.model_id}` : "Session"}>
      <ErrorBanner error={detail.error} />
      {data ? (
        <>
          <p>
            {data.steps} steps on {data.base_model} · last call {formatTime(data.last_call)}
            {data.parked ? " · parked: holds no training slot, its next call restores it" : ""}
          </p>
          <div className="chart-grid" data-testid="session-charts">
            <div>
              <h3>loss per step</h3>
              <LineChart series={[{ label: "loss", color: "#2563eb", points: loss }]} xLabel="step" />
            </div>
            <div>
              <h3>calls' compute time per step (ms)</h3>
              <LineChart series={[{ label: "step ms", color: "#dc2626", points: latency }]} xLabel="step" />
            </div>
          </div>
          <h3>checkpoints</h3>
          {data.checkpoints?.length ? (
            <div className="table-scroll">
              <table className="table" data-testid="session-checkpoints">
                <thead>
                  <tr><th>path</th><th>type</th><th>saved</th><th>expiry</th><th>visibility</th><th>user metadata</th></tr>
                </thead>
                <tbody>
                  {data.checkpoints.map((c) => <CheckpointRow key={c.tinker_path} checkpoint={c} />)}
                </tbody>
              </table>
            </div>
          ) : (
            <p className="muted">No named saves.</p>
          )}
          <p className="muted">mean step time {formatNumber(latency.length ? latency.reduce((a, p) => a + p.y, 0) / latency.length : null, 1)} ms</p>
        </>
      ) : null}
    </Card>
  );
}
