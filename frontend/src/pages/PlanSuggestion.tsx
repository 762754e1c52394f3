/**
 * Resources helper of the submit form: asks POST /api/v1/plans how to split N devices of a type between generation
 * instances and training for this job's mode, batch and lengths, and applies the answer to the form.
 */
import { useState } from "react";
import { api, unwrap } from "../api/client";
import type { Plan, PlanRequest } from "../api/types";
import { ErrorBanner, formatNumber } from "../components/ui";
import type { JobForm } from "../lib/jobForm";

/** The plan request for a job form: the planner models lengths as lognormal around a quarter of max_tokens. */
export function planRequestFor(form: JobForm, device: string, devices: number, modelSize: string): PlanRequest {
  const maxTokens = Math.max(1, Number(form["generation.max_tokens"]) || 64);
  return {
    model_size: modelSize,
    clusters: [{ device, count: devices }],
    mode: form.mode as PlanRequest["mode"],
    prompts_per_iteration: Number(form["training.prompts_per_iteration"]) || 16,
    group_size: Number(form["algorithm.group_size"]) || 8,
    lengths: { kind: "lognormal", max_tokens: maxTokens, median: Math.max(1, maxTokens / 4) },
    dispatch: form["dispatch.policy"] as PlanRequest["dispatch"],
    max_staleness: Math.max(1, Number(form.max_staleness) || 1),
    algorithm: form["algorithm.name"] as PlanRequest["algorithm"],
  };
}

export function PlanSuggestion({ form, onApply }: { form: JobForm; onApply: (patch: Partial<JobForm>) => void }) {
  const [device, setDevice] = useState("H800");
  const [devices, setDevices] = useState("8");
  const [modelSize, setModelSize] = useState("7B");
  const [plan, setPlan] = useState<Plan | null>(null);
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);

  const ask = async () => {
    setBusy(true);
    setError(null);
    try {
      setPlan(await unwrap(api.POST("/api/v1/plans", { body: planRequestFor(form, device, Number(devices), modelSize) })));
    } catch (err) {
      setError(err);
      setPlan(null);
    } finally {
      setBusy(false);
    }
  };

  const a = plan?.allocation;
  return (
    <div className="suggestion" data-testid="plan-suggestion">
      <span className="field-label">Planner: model size · device type · devices to split</span>
      <div className="row">
        <input aria-label="planner model size" placeholder="model size" value={modelSize} onChange={(e) => setModelSize(e.target.value)} />
        <input aria-label="planner device" placeholder="device" value={device} onChange={(e) => setDevice(e.target.value)} />
        <input aria-label="planner device count" inputMode="numeric" value={devices} onChange={(e) => setDevices(e.target.value)} />
        <button type="button" onClick={() => void ask()} disabled={busy}>{busy ? "Planning…" : "Suggest"}</button>
      </div>
      <ErrorBanner error={error} />
      {a && plan ? (
        <div className="row" style={{ alignItems: "center", marginTop: 8 }}>
          <span>
            Planner: <b>{a.gen_instances}</b> generation instance(s) on {a.gen_devices} {a.gen_device} (TP {a.tp}), <b>{a.train_devices}</b> training
            device(s); predicted {formatNumber(plan.predicted.samples_per_s, 1)} samples/s, {formatNumber(plan.predicted.iteration_seconds, 1)} s/iteration.
          </span>
          <button
            type="button"
            onClick={() => onApply({ "generation.instances": String(a.gen_instances), "training.devices": String(a.train_devices) })}
          >
            Apply
          </button>
        </div>
      ) : (
        <span className="muted">Ask the planner for a generation/training split of N devices (paper Algorithm 1).</span>
      )}
    </div>
  );
}
