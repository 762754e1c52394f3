/**
 * Planner what-if: model, devices (one cluster, or two for heterogeneous generation/training), mode and output
 * lengths -> the recommended mode (the fastest the simulation found, whichever mode was asked for) and its
 * generation/training split, predicted throughput per mode and a simulated timeline of the requested mode.
 * "Jobs sharing generation instances" prices a LoRA job whose generation instances serve N jobs of its shape: each
 * decode step batches all their rows and the job pays 1/N of the generation devices (colocated never shares).
 */
import { useMemo, useState, type FormEvent } from "react";
import { api, ApiError, unwrap } from "../api/client";
import { useApiQuery } from "../lib/queries";
import type { Device, Plan, PlanRequest } from "../api/types";
import { BarChart } from "../components/BarChart";
import { PipelineTimeline } from "../components/PipelineTimeline";
import { Card, ErrorBanner, Field, formatNumber } from "../components/ui";
import { DISPATCH_POLICIES, MODES } from "../lib/choices";

const MODE_COLORS = ["#94a3b8", "#2563eb", "#059669"];

const TIMELINE_LANES = 64;

export function PlannerPage() {
  const devicesQuery = useApiQuery(["plans", "devices"], () => unwrap(api.GET("/api/v1/plans/devices")));
  const devices: Device[] = devicesQuery.data?.data ?? [];
  const [form, setForm] = useState({
    model_size: "7B",
    device: "H800",
    count: "16",
    hetero: false,
    train_device: "H800",
    train_count: "8",
    mode: "sync" as (typeof MODES)[number][0],
    median: "2000",
    max_tokens: "20000",
    prompts: "256",
    group_size: "8",
    dispatch: "skew_aware" as NonNullable<PlanRequest["dispatch"]>,
    shared_jobs: "1",
  });
  const [plan, setPlan] = useState<Plan | null>(null);
  const [fields, setFields] = useState<Record<string, string>>({});
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);
  const set = (key: keyof typeof form) => (e: { target: { value: string } }) => setForm((f) => ({ ...f, [key]: e.target.value }));

  const submit = async (e: FormEvent) => {
    e.preventDefault();
    setBusy(true);
    setError(null);
    setFields({});
    if (Number(form.median) > Number(form.max_tokens)) {
      // a median above the cut-off cannot be: every response stops at max_tokens
      setFields({ "lengths.median": `the median (${form.median}) cannot exceed max tokens (${form.max_tokens})` });
      setBusy(false);
      return;
    }
    const body: PlanRequest = {
      model_size: form.model_size,
      clusters: [
        { device: form.device, count: Number(form.count) },
        ...(form.hetero ? [{ device: form.train_device, count: Number(form.train_count) }] : []),
      ],
      mode: form.mode,
      lengths: { kind: "lognormal", median: Number(form.median), max_tokens: Number(form.max_tokens) },
      prompts_per_iteration: Number(form.prompts),
      group_size: Number(form.group_size),
      dispatch: form.dispatch,
      shared_jobs: Number(form.shared_jobs),
      timeline_lanes: TIMELINE_LANES, // draw every recommended instance (the API keeps 8 by default)
    };
    try {
      setPlan(await unwrap(api.POST("/api/v1/plans", { body })));
    } catch (err) {
      if (err instanceof ApiError) setFields(err.fields);
      setError(err);
      setPlan(null);
    } finally {
      setBusy(false);
    }
  };

  const deviceOptions = devices.map((d) => (
    <option key={d.name} value={d.name}>
      {d.name} ({d.memory_gb} GB, cost {d.cost_per_hour})
    </option>
  ));

  return (
    <div>
      <div className="page-head">
        <h2>Planner</h2>
        <span className="muted">what-if: how to split devices between generation and training, and what each mode gains</span>
      </div>
      <ErrorBanner error={error ?? devicesQuery.error} />
      <div className="planner">
        <form className="card" onSubmit={submit}>
          <div className="row">
            <Field label="Model size" error={fields.model_size}>
              <input name="model_size" list="model-sizes" value={form.model_size} onChange={set("model_size")} />
              <datalist id="model-sizes">
                {["7B", "14B", "32B", "72B"].map((s) => <option key={s} value={s} />)}
              </datalist>
            </Field>
            <Field label="Mode" error={fields.mode}>
              <select name="mode" value={form.mode} onChange={set("mode")}>
                {MODES.map(([value, label]) => <option key={value} value={value}>{label}</option>)}
              </select>
            </Field>
          </div>
          <div className="row">
            <Field label={form.hetero ? "Generation devices" : "Devices"} error={fields["clusters.0.device"]}>
              <select name="device" value={form.device} onChange={set("device")}>{deviceOptions}</select>
            </Field>
            <Field label="Count" error={fields["clusters.0.count"] ?? fields.clusters}>
              <input name="count" inputMode="numeric" value={form.count} onChange={set("count")} />
            </Field>
          </div>
          <label className="toggle">
            <input type="checkbox" checked={form.hetero} onChange={(e) => setForm((f) => ({ ...f, hetero: e.target.checked }))} />
            separate training cluster (heterogeneous)
          </label>
          {form.hetero ? (
            <div className="row">
              <Field label="Training devices" error={fields["clusters.1.device"]}>
                <select name="train_device" value={form.train_device} onChange={set("train_device")}>{deviceOptions}</select>
              </Field>
              <Field label="Count" error={fields["clusters.1.count"]}>
                <input name="train_count" inputMode="numeric" value={form.train_count} onChange={set("train_count")} />
              </Field>
            </div>
          ) : null}
          <div className="row">
            <Field label="Median output length" error={fields["lengths.median"]}>
              <input name="median" inputMode="numeric" value={form.median} onChange={set("median")} />
            </Field>
            <Field label="Max output length" error={fields["lengths.max_tokens"] ?? fields.lengths}>
              <input name="max_tokens" inputMode="numeric" value={form.max_tokens} onChange={set("max_tokens")} />
            </Field>
          </div>
          <div className="row">
            <Field label="Prompts / iteration" error={fields.prompts_per_iteration}>
              <input name="prompts" inputMode="numeric" value={form.prompts} onChange={set("prompts")} />
            </Field>
            <Field label="Group size" error={fields.group_size}>
              <input name="group_size" inputMode="numeric" value={form.group_size} onChange={set("group_size")} />
            </Field>
            <Field label="Dispatch" error={fields.dispatch}>
              <select name="dispatch" value={form.dispatch} onChange={set("dispatch")}>
                {DISPATCH_POLICIES.map(([value, label]) => <option key={value} value={value}>{label}</option>)}
              </select>
            </Field>
          </div>
          <div className="row">
            <Field label="Jobs sharing generation instances" error={fields.shared_jobs}
              hint="LoRA jobs of this shape on one base model: steps batch all their rows, each pays 1/N of generation (sync/async)">
              <input name="shared_jobs" inputMode="numeric" value={form.shared_jobs} onChange={set("shared_jobs")} />
            </Field>
          </div>
          {fields[""] ? <div className="field-error">{fields[""]}</div> : null}
          <button type="submit" className="primary" disabled={busy}>{busy ? "Planning…" : "Plan"}</button>
        </form>
        {plan ? <PlanResult plan={plan} /> : <div className="card muted">Run the planner to see the recommended split.</div>}
      </div>
    </div>
  );
}

function PlanResult({ plan }: { plan: Plan }) {
  const modes = MODES.map(([m]) => m).filter((m) => plan.per_mode[m]);
  const best = plan.per_mode[plan.recommended_mode]; // the fastest row of the table below
  const asked = plan.predicted; // the mode the form asked for (and the simulated pipeline shows)
  const a = plan.recommended_allocation;
  const chart = (key: "samples_per_s" | "throughput_per_cost" | "iteration_seconds", label: string) => ({
    categories: modes.map((m) => m),
    series: [{ label, color: MODE_COLORS[1], values: modes.map((m) => plan.per_mode[m][key]) }],
  });
  const charts = useMemo(
    () => [chart("samples_per_s", "samples/s"), chart("throughput_per_cost", "samples/s per cost"), chart("iteration_seconds", "iteration s")],
    [plan], // eslint would want `chart`: it only reads `plan`
  );
  const end = plan.timeline.reduce((m, s) => Math.max(m, s.end), 0);
  const slower = 1 - asked.samples_per_s / best.samples_per_s;
  const shared = modes.some((m) => (plan.per_mode[m].shared_jobs ?? 1) > 1); // the request shared generation
  return (
    <div className="plan-result" data-testid="plan">
      <Card title={`Recommended: ${best.mode}`}>
        <div className="kpis">
          <div className="kpi"><span className="kpi-value">{a.gen_devices} × {a.gen_device}</span><span className="kpi-label">generation ({a.gen_instances} instances, TP {a.tp})</span></div>
          <div className="kpi"><span className="kpi-value">{a.train_devices} × {a.train_device}</span><span className="kpi-label">training</span></div>
          <div className="kpi"><span className="kpi-value">{a.freed_devices}</span><span className="kpi-label">freed devices</span></div>
          <div className="kpi" data-testid="plan-best"><span className="kpi-value">{formatNumber(best.samples_per_s, 2)}</span><span className="kpi-label">samples/s ({best.mode})</span></div>
          <div className="kpi"><span className="kpi-value">{formatNumber(best.iteration_seconds, 1)} s</span><span className="kpi-label">iteration</span></div>
          <div className="kpi"><span className="kpi-value">{formatNumber(a.cost_per_hour, 1)}</span><span className="kpi-label">{shared && best.mode !== "colocated" ? "cost / hour (relative, this job's share)" : "cost / hour (relative)"}</span></div>
        </div>
        {asked.mode !== best.mode ? (
          <p className="plan-note" data-testid="plan-note">
            You asked for <b>{asked.mode}</b>: {formatNumber(asked.samples_per_s, 2)} samples/s, {Math.round(slower * 100)}% slower
            than {best.mode} on these devices. The simulated pipeline below shows {asked.mode}.
          </p>
        ) : null}
        <table className="table compact plan-table" data-testid="plan-table">
          <thead>
            <tr><th>Mode</th><th>Iteration s</th><th>Generation s</th><th>Training s</th><th>Samples/s</th><th>Per cost</th><th>Gen bubble</th><th>Train bubble</th></tr>
          </thead>
          <tbody>
            {modes.map((m) => {
              const p = plan.per_mode[m];
              return (
                <tr key={m} className={m === best.mode ? "recommended" : ""} data-testid={`plan-row-${m}`}>
                  <td>
                    {m}
                    {m === best.mode ? <span className="pill">recommended</span> : null}
                    {m === asked.mode && m !== best.mode ? <span className="pill muted-pill">requested</span> : null}
                    {shared ? (
                      <span className="pill muted-pill" data-testid={`plan-shared-${m}`}>
                        {(p.shared_jobs ?? 1) > 1 ? `shared by ${p.shared_jobs}` : "unshared"}
                      </span>
                    ) : null}
                  </td>
                  <td>{formatNumber(p.iteration_seconds, 1)}</td>
                  <td>{formatNumber(p.gen_seconds, 1)}</td>
                  <td>{formatNumber(p.train_seconds, 1)}</td>
                  <td className="samples">{formatNumber(p.samples_per_s, 2)}</td>
                  <td>{formatNumber(p.throughput_per_cost, 2)}</td>
                  <td>{Math.round(p.gen_bubble_fraction * 100)}%</td>
                  <td>{Math.round(p.train_bubble_fraction * 100)}%</td>
                </tr>
              );
            })}
          </tbody>
        </table>
        <p className="muted">planned in {formatNumber(plan.plan_seconds * 1000, 0)} ms</p>
      </Card>
      <div className="grid three">
        <Card title="Samples/s by mode"><BarChart {...charts[0]} height={160} /></Card>
        <Card title="Samples/s per cost by mode"><BarChart {...charts[1]} height={160} /></Card>
        <Card title="Iteration time by mode (s)"><BarChart {...charts[2]} height={160} /></Card>
      </div>
      <Card title={`Simulated pipeline (${asked.mode}${plan.allocation.gen_instances > TIMELINE_LANES ? `, first ${TIMELINE_LANES} of ${plan.allocation.gen_instances} instances` : ""})`}>
        <PipelineTimeline spans={plan.timeline} now={end} windowSeconds={end} elapsed />
      </Card>
    </div>
  );
}
