/**
 * Submit a job: model from the registered models, dataset (pick, or upload JSONL with line errors shown), reward or
 * multi-turn environment (RewardFields), algorithm, mode and resources with the planner's suggestion; 422 errors
 * appear next to the fields they name.
 */
import { useEffect, useState, type FormEvent } from "react";
import { Link, useNavigate, useSearchParams } from "react-router";
import { api, ApiError, unwrap } from "../api/client";
import type { Dataset, Model } from "../api/types";
import { ErrorBanner, Field } from "../components/ui";
import { PlanSuggestion } from "./PlanSuggestion";
import { useCluster } from "./Cluster";
import { capacityWarning } from "../lib/cluster";
import { DatasetFromHub } from "./DatasetFromHub";
import { DatasetUpload } from "./DatasetUpload";
import { chooseEnvironment, chooseLora, DEFAULT_FORM, defaultNote, fromSpec, localErrors, lrNote, mergeSpec, parseFormTexts, SHARE_CHOICES, toSpec, type JobForm } from "../lib/jobForm";
import { trackersOf, withTrackers, type TrackerChoice } from "../lib/trackers";
import { TrackerPicker } from "../components/TrackerPicker";
import { useApiQuery, useJob } from "../lib/queries";
import { newestVersions } from "../lib/modelVersions";
import { useSession } from "../session";
import { ALGORITHMS, DISPATCH_POLICIES, ENGINES, MODES } from "../lib/choices";
import { RewardFields } from "./RewardFields";

export function SubmitJobPage() {
  const { canWrite } = useSession();
  if (!canWrite) {
    return (
      <div className="not-found" data-testid="needs-member">
        <h2>Submitting jobs needs the member role</h2>
        <p className="muted">You are a viewer in this team; ask an admin to make you a member.</p>
        <Link className="button" to="/jobs">← Back to runs</Link>
      </div>
    );
  }
  return <SubmitJobForm />;
}

function SubmitJobForm() {
  const navigate = useNavigate();
  const fromId = Number(useSearchParams()[0].get("from")) || null;
  const source = useJob(fromId);
  const base = fromId !== null ? (source.data?.spec as Record<string, unknown> | undefined) : undefined;
  const [form, setForm] = useState<JobForm>(DEFAULT_FORM);
  const modelsQuery = useApiQuery(["models"], () => unwrap(api.GET("/api/v1/models")));
  const datasetsQuery = useApiQuery(["datasets"], () => unwrap(api.GET("/api/v1/datasets")));
  const models: Model[] = newestVersions(modelsQuery.data?.data ?? []); // a name means its newest version
  const datasets: Dataset[] = datasetsQuery.data?.data ?? [];
  const [fields, setFields] = useState<Record<string, string>>({});
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);
  const [trackers, setTrackers] = useState<TrackerChoice[]>([]);
  const cluster = useCluster().data;
  const capacity = capacityWarning(form["generation.instances"].trim() ? Number(form["generation.instances"]) : null, cluster);

  const set = (key: keyof JobForm) => (e: { target: { value: string } }) => setForm((f) => ({ ...f, [key]: e.target.value }));
  // a key ending in ".*": every error under that path, each with the rest of its path ("graders.judge.model: ...")
  const err = (...keys: string[]) =>
    keys
      .flatMap((k) =>
        k.endsWith(".*")
          ? Object.keys(fields).filter((f) => f.startsWith(k.slice(0, -1))).map((f) => `${f.slice(k.length - 1)}: ${fields[f]}`)
          : [fields[k]],
      )
      .filter(Boolean)
      .join("; ") || undefined;

  useEffect(() => {
    if (base) setForm(fromSpec(base));
    if (base) setTrackers(trackersOf(base));
  }, [base]);

  useEffect(() => {
    const first = modelsQuery.data?.data[0];
    if (first) setForm((f) => (f.model ? f : { ...f, model: first.name }));
  }, [modelsQuery.data]);

  useEffect(() => {
    // no uploaded dataset yet: start on a built-in task rather than an empty choice
    if (datasetsQuery.data?.data.length === 0) {
      setForm((f) => (f["dataset.source"] === "uploaded" && !f["dataset.id"] ? { ...f, "dataset.source": "builtin" } : f));
    }
  }, [datasetsQuery.data]);

  const submit = async (e: FormEvent) => {
    e.preventDefault();
    setError(null);
    const texts = await parseFormTexts(form);
    const local = { ...localErrors(form), ...texts.errors };
    setFields(local);
    if (Object.keys(local).length > 0) {
      setError(new Error("The job spec has errors: see the marked fields."));
      return;
    }
    setBusy(true);
    try {
      // The body is built from the form; the API validates it against JobSpec and answers 422 naming the fields.
      const spec = toSpec(form, texts.parsed);
      const body = withTrackers(base ? mergeSpec(base, spec) : spec, trackers);
      const job = await unwrap(api.POST("/api/v1/jobs", { body: body as never }));
      navigate(`/jobs/${job.id}`);
    } catch (caught) {
      if (caught instanceof ApiError && Object.keys(caught.fields).length > 0) {
        setFields(caught.fields);
        setError(new Error("The job spec has errors: see the marked fields."));
      } else setError(caught);
    } finally {
      setBusy(false);
    }
  };

  const onUploaded = (dataset: Dataset) => {
    void datasetsQuery.reload();
    if (dataset.state === "ready") setForm((f) => ({ ...f, "dataset.source": "uploaded", "dataset.id": String(dataset.id) }));
  };

  return (
    <div>
      <div className="page-head">
        <h2>{fromId ? `Clone job #${fromId}` : "Submit job"}</h2>
      </div>
      {fromId ? <div className="banner banner-info" data-testid="clone-banner">Pre-filled from job #{fromId}{source.data ? ` (${source.data.name})` : ""}; fields the form does not show are kept from its spec.</div> : null}
      <ErrorBanner error={error ?? source.error ?? modelsQuery.error ?? datasetsQuery.error} />
      {fields[""] ? <div className="banner banner-error">{fields[""]}</div> : null}
      <form className="submit-grid" onSubmit={submit} noValidate>
        <section className="card">
          <h3>Job</h3>
          <Field label="Name" error={err("name")}>
            <input name="name" value={form.name} onChange={set("name")} />
          </Field>
          <Field label="Model" error={err("model")} hint={models.length === 0 ? "no models registered in this team yet" : undefined}>
            <select name="model" value={form.model} onChange={set("model")}>
              {models.length === 0 ? <option value="">—</option> : null}
              {models.map((m) => (
                <option key={m.id} value={m.name}>{m.name}</option>
              ))}
            </select>
          </Field>
          <Field label="Prompts" error={err("dataset", "dataset.id", "dataset.builtin", "dataset.num_prompts")}>
            <select name="dataset_source" value={form["dataset.source"]} onChange={set("dataset.source")}>
              <option value="uploaded">uploaded dataset</option>
              <option value="builtin">built-in task</option>
            </select>
          </Field>
          {form["dataset.source"] === "uploaded" ? (
            <>
              <Field label="Dataset" error={err("dataset.id")}>
                <select name="dataset" value={form["dataset.id"]} onChange={set("dataset.id")}>
                  <option value="">— choose —</option>
                  {datasets.map((d) => (
                    <option key={d.id} value={d.id} disabled={d.state !== "ready"}>{d.name} ({d.state === "ready" ? `${d.row_count} rows` : d.state})</option>
                  ))}
                </select>
              </Field>
              <DatasetUpload onUploaded={onUploaded} />
              <DatasetFromHub onReady={onUploaded} />
            </>
          ) : (
            <div className="row">
              <Field label="Task" error={err("dataset.builtin")}>
                <select name="builtin" value={form["dataset.builtin"]} onChange={set("dataset.builtin")}>
                  <option value="arithmetic">arithmetic</option>
                  <option value="long_tail">long_tail</option>
                </select>
              </Field>
              <Field label="Prompts" error={err("dataset.num_prompts")}>
                <input name="num_prompts" inputMode="numeric" value={form["dataset.num_prompts"]} onChange={set("dataset.num_prompts")} />
              </Field>
            </div>
          )}
          <RewardFields form={form} set={set} err={err} chooseType={(type) => setForm((f) => chooseEnvironment(f, type))} />
        </section>

        <section className="card">
          <h3>Algorithm</h3>
          <div className="row">
            <Field label="Algorithm" error={err("algorithm.name")}>
              <select name="algorithm" value={form["algorithm.name"]} onChange={set("algorithm.name")}>
                {ALGORITHMS.map(([value, label]) => <option key={value} value={value}>{label}</option>)}
              </select>
            </Field>
            <Field label="Group size" error={err("algorithm.group_size")}>
              <input name="group_size" inputMode="numeric" value={form["algorithm.group_size"]} onChange={set("algorithm.group_size")} />
            </Field>
            <Field label="KL coef" error={err("algorithm.kl_coef")}>
              <input name="kl_coef" inputMode="decimal" value={form["algorithm.kl_coef"]} onChange={set("algorithm.kl_coef")} />
            </Field>
          </div>
          {form["algorithm.name"] === "distill" ? (
            <div className="row" data-testid="distill-fields">
              <Field label="Teacher" error={err("algorithm.teacher", "algorithm")} hint="a registered model with the student's tokenizer; each sampled token's advantage is its negative reverse KL to the teacher">
                <select name="teacher" value={form["algorithm.teacher"]} onChange={set("algorithm.teacher")}>
                  <option value="">—</option>
                  {models.filter((m) => m.name !== form.model).map((m) => <option key={m.id} value={m.name}>{m.name}</option>)}
                </select>
              </Field>
              <Field label="Reward weight" error={err("algorithm.reward_coef")} hint="0: the teacher alone; > 0 adds the task reward's group advantage">
                <input name="reward_coef" inputMode="decimal" value={form["algorithm.reward_coef"]} onChange={set("algorithm.reward_coef")} />
              </Field>
            </div>
          ) : null}
          <div className="row">
            <Field label="Mode" error={err("mode")}>
              <select name="mode" value={form.mode} onChange={set("mode")}>
                {MODES.map(([value, label]) => <option key={value} value={value}>{label}</option>)}
              </select>
            </Field>
            <Field label="Max staleness" error={err("max_staleness")}>
              <input name="max_staleness" inputMode="numeric" value={form.max_staleness} onChange={set("max_staleness")} disabled={form.mode !== "async"} />
            </Field>
            <Field label="Dispatch" error={err("dispatch.policy")}>
              <select name="dispatch" value={form["dispatch.policy"]} onChange={set("dispatch.policy")}>
                {DISPATCH_POLICIES.map(([value, label]) => <option key={value} value={value}>{label}</option>)}
              </select>
            </Field>
          </div>
          <div className="row">
            <Field label="Iterations" error={err("training.iterations")}>
              <input name="iterations" inputMode="numeric" value={form["training.iterations"]} onChange={set("training.iterations")} />
            </Field>
            <Field label="Prompts / iteration" error={err("training.prompts_per_iteration")}>
              <input name="prompts_per_iteration" inputMode="numeric" value={form["training.prompts_per_iteration"]} onChange={set("training.prompts_per_iteration")} />
            </Field>
            <Field label="Learning rate" error={err("training.lr")} hint={lrNote(form) ? <span data-testid="lr-note">{lrNote(form)}</span> : undefined}>
              <input name="lr" inputMode="decimal" value={form["training.lr"]} onChange={set("training.lr")} />
            </Field>
          </div>
          <div className="row">
            <Field label="Max tokens" error={err("generation.max_tokens")}>
              <input name="max_tokens" inputMode="numeric" value={form["generation.max_tokens"]} onChange={set("generation.max_tokens")} />
            </Field>
            <Field label="Temperature" error={err("generation.temperature")}>
              <input name="temperature" inputMode="decimal" value={form["generation.temperature"]} onChange={set("generation.temperature")} />
            </Field>
            <Field label="Engine" error={err("generation.engine")}>
              <select name="engine" value={form["generation.engine"]} onChange={set("generation.engine")}>
                {ENGINES.map(([value, label]) => <option key={value} value={value}>{label}</option>)}
              </select>
            </Field>
            <Field label="Speculative decoding" error={err("generation.speculative")}
              hint="drafts from the other samples of each prompt group, verified in one forward pass: same tokens, faster long tail (hf engine)">
              <select name="speculative" value={form["generation.speculative"]} onChange={set("generation.speculative")}>
                <option value="auto">automatic (the engine default: off for now)</option>
                <option value="group">group drafts (hf)</option>
                <option value="off">off</option>
              </select>
            </Field>
          </div>
          <div className="row" data-testid="scheduling-fields">
            <Field label="Priority" error={err("priority")}
              hint="the scheduler orders by priority, then by each team's fair share; above your team's maximum is refused">
              <select name="priority" value={form.priority} onChange={set("priority")}>
                <option value="low">low (fills spare slots)</option>
                <option value="normal">normal</option>
                <option value="high">high</option>
              </select>
            </Field>
            <Field label="Preemptible" error={err("preemptible")}
              hint="a preemptible job may hand its slots back at a checkpoint to higher-priority or under-share work, then resume">
              <select name="preemptible" value={form.preemptible} onChange={set("preemptible")}>
                <option value="on">yes</option>
                <option value="off">no (team admins only)</option>
              </select>
            </Field>
          </div>
          <div className="row" data-testid="lora-fields">
            <Field label="Fine-tuning" error={err("training.lora")} hint="LoRA trains and syncs a small adapter only">
              <select name="lora" value={form["training.lora"]} onChange={(e) => setForm((f) => chooseLora(f, e.target.value as "off" | "on"))}>
                <option value="off">full (every weight)</option>
                <option value="on">LoRA adapter</option>
              </select>
            </Field>
            {form["training.lora"] === "on" && (
              <>
                <Field label="LoRA rank" error={err("training.lora.rank")} hint={defaultNote(form, "training.lora.rank") ?? undefined}>
                  <input name="lora_rank" inputMode="numeric" value={form["training.lora.rank"]} onChange={set("training.lora.rank")} />
                </Field>
                <Field label="LoRA alpha" error={err("training.lora.alpha")} hint={defaultNote(form, "training.lora.alpha") ?? undefined}>
                  <input name="lora_alpha" inputMode="decimal" value={form["training.lora.alpha"]} onChange={set("training.lora.alpha")} />
                </Field>
                <Field label="LoRA dropout" error={err("training.lora.dropout")}>
                  <input name="lora_dropout" inputMode="decimal" value={form["training.lora.dropout"]} onChange={set("training.lora.dropout")} />
                </Field>
                <Field label="Target modules" error={err("training.lora.target_modules")} hint={<span data-testid="targets-note">{defaultNote(form, "training.lora.target_modules") ?? "comma-separated; empty: all linear layers (not the output head)"}</span>}>
                  <input name="lora_target_modules" value={form["training.lora.target_modules"]} onChange={set("training.lora.target_modules")} />
                </Field>
              </>
            )}
          </div>
          {form["training.lora"] === "on" && (
            <div className="row" data-testid="share-field">
              <Field label="Share generation instances" error={err("generation.share")}
                hint={"LoRA jobs on the same base model share one generation process and batch; \u201cOwn instances\u201d opts out"}>
                <select name="share" value={form["generation.share"]} onChange={set("generation.share")}>
                  {SHARE_CHOICES.map(([value, label]) => <option key={value} value={value}>{label}</option>)}
                </select>
              </Field>
            </div>
          )}
          {form["training.lora"] === "on" && (
            <div className="row" data-testid="training-share-field">
              <Field label="Share a training process" error={err("training.share")}
                hint={"LoRA jobs on the same base model train in one process and one training slot, each with its own adapter, optimizer and checkpoints; they split that slot\u2019s cores, so share to save memory and slots, not for speed"}>
                <select name="training_share" value={form["training.share"]} onChange={set("training.share")}>
                  <option value="off">Own training process</option>
                  <option value="on">Share (or refuse the job saying why)</option>
                </select>
              </Field>
            </div>
          )}
        </section>

        <section className="card">
          <h3>Resources</h3>
          <div className="row">
            <Field label="Generation instances" error={err("generation.instances")} hint={capacity ? <span className="capacity-warning" data-testid="capacity-warning">⚠ {capacity}</span> : undefined}>
              <input name="instances" inputMode="numeric" value={form["generation.instances"]} onChange={set("generation.instances")} />
            </Field>
            <Field label="Batch size / instance" error={err("generation.batch_size")}>
              <input name="batch_size" inputMode="numeric" value={form["generation.batch_size"]} onChange={set("generation.batch_size")} />
            </Field>
            <Field label="Training devices" error={err("training.devices")}>
              <input name="devices" inputMode="numeric" value={form["training.devices"]} onChange={set("training.devices")} />
            </Field>
          </div>
          <div className="row">
            <Field label="Autoscale" error={err("autoscale.policy")}>
              <select name="autoscale" value={form["autoscale.policy"]} onChange={set("autoscale.policy")}>
                <option value="manual">manual</option>
                <option value="auto">auto</option>
              </select>
            </Field>
            <Field label="Min instances" error={err("autoscale.min_instances", "autoscale")}>
              <input name="min_instances" inputMode="numeric" value={form["autoscale.min_instances"]} onChange={set("autoscale.min_instances")} />
            </Field>
            <Field label="Max instances" error={err("autoscale.max_instances", "autoscale")}>
              <input name="max_instances" inputMode="numeric" value={form["autoscale.max_instances"]} onChange={set("autoscale.max_instances")} />
            </Field>
          </div>
          <PlanSuggestion form={form} onApply={(patch) => setForm((f) => ({ ...f, ...patch }))} />
          <TrackerPicker value={trackers} onChange={setTrackers}
            error={err("telemetry.trackers", "telemetry.trackers.0", "telemetry.trackers.1", "telemetry.trackers.2")} />
        </section>

        <div className="form-actions">
          <button type="submit" className="primary" disabled={busy}>
            {busy ? "Submitting…" : "Submit job"}
          </button>
        </div>
      </form>
    </div>
  );
}
