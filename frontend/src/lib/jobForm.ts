/** The submit form's state and its translation into a JobSpec request body. */

/** The form's values, flat; `toSpec` nests them into a JobSpec. Keys are the JobSpec's dotted field paths. */
export const DEFAULT_FORM = {
  name: "grpo-run",
  model: "",
  "dataset.source": "uploaded" as "uploaded" | "builtin",
  "dataset.id": "",
  "dataset.builtin": "arithmetic",
  "dataset.num_prompts": "256",
  "reward.type": "exact_match",
  "reward.code": "def reward(prompt, response, meta):\n    return float(response.strip() == str(meta.get(\"answer\", \"\")))\n",
  "algorithm.name": "grpo",
  "algorithm.group_size": "8",
  "algorithm.kl_coef": "0",
  mode: "sync",
  max_staleness: "1",
  "generation.engine": "hf",
  "generation.instances": "2",
  "generation.batch_size": "32",
  "generation.max_tokens": "64",
  "generation.temperature": "1.0",
  "training.devices": "1",
  "training.iterations": "20",
  "training.prompts_per_iteration": "16",
  "training.lr": "0.0001",
  "dispatch.policy": "skew_aware",
  "autoscale.policy": "manual",
  "autoscale.min_instances": "1",
  "autoscale.max_instances": "4",
};
export type JobForm = typeof DEFAULT_FORM;

const num = (value: string) => (value.trim() === "" ? undefined : Number(value));

/** Nest the flat form into a JobSpec body (numbers parsed; the API validates and names any bad field). */
export function toSpec(form: JobForm): Record<string, unknown> {
  const dataset =
    form["dataset.source"] === "builtin"
      ? { builtin: form["dataset.builtin"], num_prompts: num(form["dataset.num_prompts"]) }
      : { id: num(form["dataset.id"]) ?? null };
  return {
    name: form.name,
    model: form.model,
    dataset,
    reward: form["reward.type"] === "python" ? { type: "python", code: form["reward.code"] } : { type: form["reward.type"] },
    algorithm: { name: form["algorithm.name"], group_size: num(form["algorithm.group_size"]), kl_coef: num(form["algorithm.kl_coef"]) },
    mode: form.mode,
    max_staleness: num(form.max_staleness),
    generation: {
      engine: form["generation.engine"],
      instances: num(form["generation.instances"]) ?? null,
      batch_size: num(form["generation.batch_size"]),
      max_tokens: num(form["generation.max_tokens"]),
      temperature: num(form["generation.temperature"]),
    },
    training: {
      devices: num(form["training.devices"]),
      iterations: num(form["training.iterations"]),
      prompts_per_iteration: num(form["training.prompts_per_iteration"]),
      lr: num(form["training.lr"]),
    },
    dispatch: { policy: form["dispatch.policy"] },
    autoscale: {
      policy: form["autoscale.policy"],
      min_instances: num(form["autoscale.min_instances"]),
      max_instances: num(form["autoscale.max_instances"]),
    },
  };
}

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => v !== null && typeof v === "object" && !Array.isArray(v);
const str = (v: unknown, fallback: string) => (v === null || v === undefined ? fallback : String(v));

/** The form pre-filled from an existing job's spec (clone); fields the form does not show stay in the base spec. */
export function fromSpec(spec: Obj, defaults: JobForm = DEFAULT_FORM): JobForm {
  const get = (path: string): unknown => path.split(".").reduce<unknown>((node, key) => (isObj(node) ? node[key] : undefined), spec);
  const form = { ...defaults };
  for (const key of Object.keys(defaults) as (keyof JobForm)[]) {
    if (key === "dataset.source") continue;
    const value = key === "reward.type" ? get("reward.type") : get(key);
    if (value === null && (key === "generation.instances" || key === "dataset.id")) (form as Record<string, string>)[key] = "";
    else if (value !== undefined && value !== null && typeof value !== "object") (form as Record<string, string>)[key] = String(value);
  }
  form.name = `${str(spec.name, "job")}-clone`;
  form["dataset.source"] = get("dataset.builtin") ? "builtin" : "uploaded";
  return form;
}

/**
 * The form's spec laid over the spec it was cloned from: nested sections merge (so e.g. `checkpoint`, `top_p` or
 * reward params survive), but a dataset whose source changed (built-in vs uploaded) or a reward whose type changed
 * is replaced whole, never mixed.
 */
export function mergeSpec(base: Obj, patch: Obj): Obj {
  const out: Obj = { ...base };
  for (const [key, value] of Object.entries(patch)) {
    const old = base[key];
    const replace =
      (key === "dataset" && isObj(old) && isObj(value) && Boolean(old.builtin) !== Boolean(value.builtin)) ||
      (key === "reward" && isObj(old) && isObj(value) && old.type !== value.type);
    if (value === undefined) continue;
    out[key] = !replace && isObj(old) && isObj(value) ? mergeSpec(old, value) : value;
  }
  return out;
}

const NUMERIC: (keyof JobForm)[] = [
  "dataset.num_prompts", "algorithm.group_size", "algorithm.kl_coef", "max_staleness", "generation.instances",
  "generation.batch_size", "generation.max_tokens", "generation.temperature", "training.devices", "training.iterations",
  "training.prompts_per_iteration", "training.lr", "autoscale.min_instances", "autoscale.max_instances",
];

/**
 * Mistakes the form can see before sending, all at once (the API validates cross-field rules only after every field
 * parses, so it would report them one round-trip at a time): non-numbers, and min above max instances.
 */
export function localErrors(form: JobForm): Record<string, string> {
  const out: Record<string, string> = {};
  for (const key of NUMERIC) {
    const raw = form[key].trim();
    if (raw !== "" && !Number.isFinite(Number(raw))) out[key] = `"${raw}" is not a number`;
  }
  if (form["autoscale.policy"] === "auto" || form["autoscale.min_instances"] || form["autoscale.max_instances"]) {
    const [lo, hi] = [Number(form["autoscale.min_instances"]), Number(form["autoscale.max_instances"])];
    if (Number.isFinite(lo) && Number.isFinite(hi) && form["autoscale.min_instances"] && form["autoscale.max_instances"] && lo > hi) {
      out["autoscale.min_instances"] = `min (${lo}) is above max (${hi})`;
      out["autoscale.max_instances"] = `max (${hi}) is below min (${lo})`;
    }
  }
  return out;
}
