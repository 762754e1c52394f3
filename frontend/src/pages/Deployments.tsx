/** Deployments (docs/dashboard.md#deployments): a base model with the team's adapters served on /openai/v1 under a
 * stable name by replicas that scale between min and max (0 = scale to zero). Each shows its replicas and the last
 * minute's requests/s, p50/p99 latency and tokens/s, and whether its adapters shared a batch; a form creates one, and
 * each row's replica fields (min, max, idle seconds) are edited in place. `PromoteButton` (on a job's checkpoints)
 * serves a checkpoint as a deployment's first adapter. */
import { useState, type FormEvent } from "react";
import { useQuery } from "@tanstack/react-query";
import { api, unwrap } from "../api/client";
import type { components } from "../api/schema";
import { Card, ErrorBanner, Field, formatNumber } from "../components/ui";
import { queryClient } from "../lib/queries";
import { useSession } from "../session";

type Deployment = components["schemas"]["DeploymentPublic"];
export const DEPLOYMENTS_KEY = ["deployments"];

const ms = (value: number | null | undefined) => (value == null ? "–" : `${formatNumber(value * 1000, 0)} ms`);

export function DeploymentsPage() {
  const { canWrite } = useSession();
  const [error, setError] = useState<unknown>(null);
  const list = useQuery({
    queryKey: DEPLOYMENTS_KEY,
    queryFn: () => unwrap(api.GET("/api/v1/deployments")),
    refetchInterval: 3000,
  });
  const act = async (call: () => Promise<unknown>) => {
    setError(null);
    try {
      await call();
      await queryClient.invalidateQueries({ queryKey: DEPLOYMENTS_KEY });
      return true;
    } catch (err) {
      setError(err);
      return false;
    }
  };
  const rows = list.data ?? [];
  return (
    <div>
      <div className="page-head">
        <h2>Deployments</h2>
        <span className="muted">serve a base model and its adapters under a stable name on /openai/v1</span>
      </div>
      <ErrorBanner error={error ?? list.error} />
      <Card title="Deployments">
        {rows.length === 0 ? <div className="muted">no deployments yet</div> : (
          <table className="table" data-testid="deployments">
            <thead><tr><th>name</th><th>base model</th><th>adapters</th><th>replicas</th><th>req/s</th>
              <th>p50</th><th>p99</th><th>tokens/s</th><th>batch</th><th>scale</th><th /></tr></thead>
            <tbody>
              {rows.map((d) => <DeploymentRow key={d.id} deployment={d} canWrite={canWrite} act={act} />)}
            </tbody>
          </table>
        )}
        <p className="muted">Call it with the OpenAI client: <code>model="&lt;name&gt;"</code> (its first adapter) or
          an adapter id. CLI: <code>streamrl deployments list</code></p>
      </Card>
      {canWrite && <CreateDeployment act={act} />}
    </div>
  );
}

function DeploymentRow({ deployment: d, canWrite, act }:
  { deployment: Deployment; canWrite: boolean; act: (call: () => Promise<unknown>) => Promise<boolean> }) {
  const [scale, setScale] = useState({ min: d.min_replicas, max: d.max_replicas, idle: d.idle_s });
  const m = d.metrics;
  const replicas = d.replicas ?? [];
  const ready = replicas.filter((r) => r.state === "ready").length;
  const path = { params: { path: { deployment_id: d.id } } };
  const save = () => act(() => unwrap(api.PATCH("/api/v1/deployments/{deployment_id}", {
    ...path, body: { min_replicas: scale.min, max_replicas: scale.max, idle_s: scale.idle },
  })));
  const remove = () => act(() => unwrap(api.DELETE("/api/v1/deployments/{deployment_id}", path)));
  return (
    <tr data-deployment={d.name}>
      <td><b>{d.name}</b></td>
      <td>{d.base_model}</td>
      <td>{d.adapters.length === 0 ? <span className="muted">none</span> : d.adapters.map((a) => <div key={a}><code>{a}</code></div>)}</td>
      <td data-testid="replicas">{ready} ready{replicas.length > ready ? ` (+${replicas.length - ready} starting)` : ""}
        <div className="muted">{d.min_replicas}–{d.max_replicas}{d.min_replicas === 0 ? ", scales to zero" : ""}</div></td>
      <td>{formatNumber(m?.requests_per_s ?? 0, 2)}</td>
      <td>{ms(m?.p50_latency_s)}</td>
      <td>{ms(m?.p99_latency_s)}</td>
      <td>{formatNumber(m?.tokens_per_s ?? 0, 1)}</td>
      <td className="muted">{m && Number(m.batches.max_adapters ?? 0) > 1 ? `${m.batches.max_adapters} adapters in one batch` : "–"}</td>
      <td>
        {canWrite ? (
          <span className="inline-fields">
            <input aria-label="min replicas" type="number" min={0} max={16} value={scale.min} style={{ width: "3.5em" }}
              onChange={(e) => setScale({ ...scale, min: Number(e.target.value) })} />
            <input aria-label="max replicas" type="number" min={1} max={16} value={scale.max} style={{ width: "3.5em" }}
              onChange={(e) => setScale({ ...scale, max: Number(e.target.value) })} />
            <input aria-label="idle seconds" type="number" min={1} value={scale.idle} style={{ width: "5em" }}
              onChange={(e) => setScale({ ...scale, idle: Number(e.target.value) })} />
            <button className="link" data-action="save-scale" onClick={() => void save()}>save</button>
          </span>
        ) : `${d.min_replicas}–${d.max_replicas}, idle ${d.idle_s}s`}
      </td>
      <td>{canWrite && <button className="link" data-action="delete" onClick={() => void remove()}>delete</button>}</td>
    </tr>
  );
}

function CreateDeployment({ act }: { act: (call: () => Promise<unknown>) => Promise<boolean> }) {
  const empty = { name: "", base: "", adapters: "", min: 0, max: 1, idle: 300 };
  const [form, setForm] = useState(empty);
  const submit = async (event: FormEvent) => {
    event.preventDefault();
    const adapters = form.adapters.split(/[\s,]+/).filter(Boolean);
    const ok = await act(() => unwrap(api.POST("/api/v1/deployments", {
      body: { name: form.name, base_model: form.base, adapters, min_replicas: form.min, max_replicas: form.max,
        idle_s: form.idle },
    })));
    if (ok) setForm(empty);
  };
  return (
    <Card title="New deployment">
      <form onSubmit={(e) => void submit(e)} data-testid="create-deployment">
        <Field label="Name"><input aria-label="name" value={form.name} required
          onChange={(e) => setForm({ ...form, name: e.target.value })} /></Field>
        <Field label="Base model" hint="a registered model of the team"><input aria-label="base model"
          value={form.base} required onChange={(e) => setForm({ ...form, base: e.target.value })} /></Field>
        <Field label="Adapters" hint="ft: ids or job:<id>@best|@last|@<iteration>, separated by spaces or commas">
          <input aria-label="adapters" value={form.adapters}
            onChange={(e) => setForm({ ...form, adapters: e.target.value })} /></Field>
        <Field label="Min replicas" hint="0: scale to zero when idle"><input aria-label="new min replicas" type="number"
          min={0} max={16} value={form.min} onChange={(e) => setForm({ ...form, min: Number(e.target.value) })} /></Field>
        <Field label="Max replicas"><input aria-label="new max replicas" type="number" min={1} max={16} value={form.max}
          onChange={(e) => setForm({ ...form, max: Number(e.target.value) })} /></Field>
        <Field label="Idle seconds" hint="a replica above min stops after this long without requests">
          <input aria-label="new idle seconds" type="number" min={1} value={form.idle}
            onChange={(e) => setForm({ ...form, idle: Number(e.target.value) })} /></Field>
        <button type="submit" className="primary">Create deployment</button>
      </form>
    </Card>
  );
}

/** On a checkpoint row: serve `job:<id>@<iteration>` as the first adapter of a deployment (created over the job's
 * base model when the team has none of that name). */
export function PromoteButton({ jobId, iteration, baseModel }: { jobId: number; iteration: number; baseModel: string }) {
  const [open, setOpen] = useState(false);
  const [name, setName] = useState(`job-${jobId}`);
  const [state, setState] = useState<{ error?: unknown; done?: string }>({});
  const promote = async () => {
    setState({});
    try {
      const row = await unwrap(api.POST("/api/v1/deployments/promote", {
        body: { adapter: `job:${jobId}@${iteration}`, name, base_model: baseModel },
      }));
      await queryClient.invalidateQueries({ queryKey: DEPLOYMENTS_KEY });
      setState({ done: row.name });
      setOpen(false);
    } catch (err) {
      setState({ error: err });
    }
  };
  if (!open) {
    return (
      <>
        <button className="link" data-action="promote" onClick={() => setOpen(true)}>🚀 promote</button>
        {state.done && <span className="muted" data-testid="promoted"> serving as <code>{state.done}</code></span>}{" "}
      </>
    );
  }
  return (
    <span className="inline-fields" data-testid="promote-form">
      <input aria-label="deployment name" value={name} onChange={(e) => setName(e.target.value)} />
      <button className="link" data-action="promote-confirm" onClick={() => void promote()}>deploy</button>
      <button className="link" onClick={() => setOpen(false)}>cancel</button>
      <ErrorBanner error={state.error} />
    </span>
  );
}
