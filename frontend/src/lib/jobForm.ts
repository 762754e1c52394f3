/** The submit form's state and its translation into a JobSpec request body. */
import { FORM_DEFAULTS } from "../api/choices.gen";
import { parseObject } from "./structured";

/**
 * A reward a freshly built tiny model can climb (the `streamrl up --demo` job's, streamrl/cli/runtime_cmds.py): per
 * character partial credit for lowercase letters, the prompt's letters and similarity to the answer, so samples of
 * one group score differently and GRPO has a signal from the first iteration. (Exact match on arithmetic gives an
 * untrained model 0.000 for every sample: no signal at all.)
 */
export const DEFAULT_REWARD_CODE = `import difflib

def reward(prompt, response, meta):
    answer, text = meta["answer"], response.strip()
    if not text:
        return 0.0
    letters = set(meta.get("pattern") or answer)
    lower = sum(ch.islower() for ch in text) / len(text)
    on_pattern = sum(ch in letters for ch in text) / len(text)
    similar = difflib.SequenceMatcher(None, text, answer).ratio()
    fits = min(len(text), len(answer)) / max(len(text), len(answer))
    return {"lowercase": 0.3 * lower, "pattern": 0.3 * on_pattern, "similarity": 0.2 * similar, "length": 0.2 * fits}
`;

/** Why the default reward has a length term (shown under the reward): the long-tail task's answers are short while
 * an untrained model runs on to max_tokens; without the term most samples score alike and the reward stays flat. */
export const REWARD_LENGTH_NOTE =
  "The default reward scores length against the answer (the demo's term): on the long-tail task most untrained samples hit max_tokens, and without it the reward stays flat.";

/** Per-choice defaults from the registry (contract/form_defaults.py, published in the OpenAPI schema and generated
 * into choices.gen.ts): full fine-tuning or LoRA, each field's value and the reason shown under it. */
type Tuning = keyof typeof FORM_DEFAULTS; // "full" | "lora"
type DefaultEntry = { readonly value: number | string; readonly why: string };
const defaultsOf = (tuning: Tuning) => FORM_DEFAULTS[tuning] as Readonly<Record<string, DefaultEntry>>;
const text = (value: number | string) => String(value);
export const FULL_FINETUNE_LR = text(FORM_DEFAULTS.full["training.lr"].value);
export const LORA_LR = text(FORM_DEFAULTS.lora["training.lr"].value);

/** The form after choosing `training.lora`: every field still at a default (of either choice, or the form's own)
 * takes the new choice's default; a value the user typed is kept. */
export function chooseLora<F extends { "training.lora": "off" | "on"; "training.lr": string }>(form: F, value: "off" | "on"): F {
  const next: Record<string, string> = { ...(form as unknown as Record<string, string>), "training.lora": value };
  const [to, from] = value === "on" ? (["lora", "full"] as const) : (["full", "lora"] as const);
  for (const [key, entry] of Object.entries(defaultsOf(to))) {
    const current = String(next[key] ?? "").trim();
    const untouched = [defaultsOf(from)[key]?.value, entry.value].some((v) => v !== undefined && current === text(v)) ||
      current === String((DEFAULT_FORM as Record<string, string>)[key] ?? "");
    if (key in next && untouched) next[key] = text(entry.value);
  }
  return next as unknown as F;
}

/** The registry's reason for a field's value (null once the user typed another value than the choice's default). */
export function defaultNote(form: { "training.lora": "off" | "on" } & Record<string, string>, key: string): string | null {
  const entry = defaultsOf(form["training.lora"] === "on" ? "lora" : "full")[key];
  return entry && String(form[key] ?? "").trim() === text(entry.value) ? entry.why : null;
}

/** A line under the learning rate saying why its default is what it is, or that a LoRA job kept the full rate. */
export function lrNote(form: { "training.lora": "off" | "on"; "training.lr": string }): string | null {
  const note = defaultNote(form as { "training.lora": "off" | "on" } & Record<string, string>, "training.lr");
  if (note) return note;
  if (form["training.lora"] === "on" && form["training.lr"].trim() === FULL_FINETUNE_LR) {
    return `${FULL_FINETUNE_LR} is the full fine-tuning rate: LoRA adapters need more (default ${LORA_LR}), or the reward stays flat.`;
  }
  return null;
}

/** A user environment that runs as it stands on the built-in tasks' rows (`prompt`, `answer`): the opening is the
 * prompt, a wrong answer gets one more try with feedback (docs/user-guide.md#environments-and-tools). */
export const DEFAULT_ENVIRONMENT_CODE = `def reset(row):
    return [{"role": "user", "content": row["prompt"]}]


def step(messages, row):
    said = str(messages[-1].get("content", "")).strip()
    if said == str(row.get("answer", "")):
        return {"messages": [], "reward": 1.0, "done": True}
    return {"messages": [{"role": "user", "content": "Not quite: try again."}], "reward": 0.0, "done": False}
`;

/** A verifiers environment (`environment.type: verifiers`, docs/user-guide.md) that runs as it stands on the
 * built-in tasks' rows: each row's `prompt` and `answer` become a `Problem`'s data (the taskset's own task is the
 * example only), and the env plays two turns (answer, be asked to check it, answer again), scored by verifiers on the
 * last reply. Tool-less and exporting its classes via `__all__`, as the submit checks want (contract/verifiers.py). */
export const DEFAULT_VERIFIERS_CODE = `import verifiers.v1 as vf
from verifiers.v1.envs.single_agent.env import SingleAgentEnvConfig


class Data(vf.TaskData):
    answer: str = ""


class Problem(vf.Task[Data]):
    @vf.reward
    async def correct(self, trace) -> float:
        replies = [str(m.content) for m in trace.branches[-1].messages if m.role == "assistant"]
        return float(bool(replies) and self.data.answer in replies[-1])


class Problems(vf.Taskset[Problem]):
    def load(self):
        yield Problem(Data(prompt="1+1=", answer="2"), self.config.task)


class CheckAgain(vf.Env[SingleAgentEnvConfig]):
    async def run(self, task, agents):
        async with agents.agent.interaction(task) as play:
            await play.turn()
            await play.turn("Check your answer and give it again.")


__all__ = ["Problems", "CheckAgain"]
`;

/** The code box's template per environment type (the others take no code from the form). */
const CODE_TEMPLATES: Record<string, string> = { python: DEFAULT_ENVIRONMENT_CODE, verifiers: DEFAULT_VERIFIERS_CODE };

/** The form after choosing an environment type: code still at a type's template takes the new type's template (a
 * python environment's code is no verifiers module); code the user wrote is kept. */
export function chooseEnvironment(form: JobForm, type: string): JobForm {
  const untouched = Object.values(CODE_TEMPLATES).includes(form["environment.code"]);
  const template = CODE_TEMPLATES[type];
  return { ...form, "environment.type": type, ...(untouched && template ? { "environment.code": template } : {}) };
}

/** A gateway job's agent as it stands: one plain `openai` call per task, rewarded on the built-in tasks' `answer`
 * (docs/user-guide.md#train-an-agent-you-already-have); `base_url` is the episode's gateway, any model name works. */
export const DEFAULT_AGENT_CODE = `from openai import OpenAI


def run(task, base_url, api_key):
    client = OpenAI(base_url=base_url, api_key=api_key)
    reply = client.chat.completions.create(
        model="policy",
        messages=[{"role": "user", "content": task["prompt"]}],
    )
    answer = (reply.choices[0].message.content or "").strip()
    return 1.0 if answer == str(task.get("answer", "")) else 0.0
`;

/** The form's values, flat; `toSpec` nests them into a JobSpec. Keys are the JobSpec's dotted field paths. The
 * defaults make a job that learns on any registered model (tests/e2e/test_dashboard_signals.py proves it): the
 * long-tail task with the shaped reward above, short answers, a high learning rate for small models. */
export const DEFAULT_FORM = {
  name: "grpo-run",
  model: "",
  "dataset.source": "uploaded" as "uploaded" | "builtin",
  "dataset.id": "",
  "dataset.builtin": "long_tail",
  "dataset.num_prompts": "256",
  "reward.type": "python",
  "reward.code": DEFAULT_REWARD_CODE,
  "reward.params": "", // JSON or YAML (parsed by parseFormTexts); empty: the type's defaults
  "environment.type": "", // "": single-turn (the reward scores one completion); else a built-in or "python"
  "environment.params": "", // a built-in's params, JSON or YAML
  "environment.code": DEFAULT_ENVIRONMENT_CODE,
  "environment.url": "", // openenv: the OpenEnv server's base URL
  "environment.source": "code" as "code" | "installed" | "url", // verifiers: your module in code, params.taskset's plugin, or your EnvServer's tcp:// url
  "environment.requirements": "", // verifiers: the environment's packages, one per line (verifiers==0.4.0 is added)
  "environment.max_turns": "4",
  "environment.max_episode_tokens": "512",
  "environment.step_timeout_s": "2",
  "environment.grader": "off" as "off" | "on", // on: the reward fields grade each episode's final answer
  "agent.where": "code" as "code" | "url", // gateway: the agent's code in the jail, or a service at a URL
  "agent.code": DEFAULT_AGENT_CODE,
  "agent.requirements": "openai", // one per line, for code
  "agent.url": "", // a remote agent service; the platform POSTs to {url}/rollout
  "agent.concurrency": "4",
  "agent.timeout_s": "300",
  "agent.episodes_per_jail": "32", // code: consecutive episodes one jail runs, loading the code once
  "algorithm.name": "grpo",
  "algorithm.group_size": "8",
  "algorithm.kl_coef": "0",
  "algorithm.teacher": "", // distill only: a registered model sharing the student's tokenizer
  "algorithm.reward_coef": "0", // distill only: weight of the task reward's group advantage
  mode: "sync",
  max_staleness: "1",
  "generation.engine": "hf",
  "generation.instances": "2",
  "generation.batch_size": "64",
  "generation.max_tokens": "32",
  "generation.temperature": "1.0",
  "generation.share": "auto" as ShareChoice, // LoRA jobs only (shareSpec); the control is shown with LoRA on
  "generation.speculative": "auto" as "auto" | "group" | "off", // grouped speculative decoding (hf engine)
  "training.devices": "1",
  "training.iterations": "60",
  "training.prompts_per_iteration": "8",
  "training.lr": FULL_FINETUNE_LR,
  "training.lora": "off" as "off" | "on",
  "training.lora.rank": String(FORM_DEFAULTS.lora["training.lora.rank"].value),
  "training.lora.alpha": String(FORM_DEFAULTS.lora["training.lora.alpha"].value),
  "training.lora.dropout": "0",
  "training.lora.target_modules": String(FORM_DEFAULTS.lora["training.lora.target_modules"].value), // sent with LoRA on
  "training.share": "off" as "off" | "on", // LoRA jobs only (trainingShareSpec); the control is shown with LoRA on
  "dispatch.policy": "skew_aware",
  "autoscale.policy": "manual",
  "autoscale.min_instances": "1",
  "autoscale.max_instances": "4",
  priority: "normal" as "low" | "normal" | "high", // at most the team's max_priority (the API names both)
  preemptible: "on" as "on" | "off", // off: team admins only
};
export type JobForm = typeof DEFAULT_FORM;

/** `generation.share`, as the form offers it: auto (null: LoRA jobs share when they can), own (false), require
 * (true: the API refuses, naming `generation.share`, a job that cannot share). */
export type ShareChoice = "auto" | "own" | "require";
export const SHARE_CHOICES: [ShareChoice, string][] = [
  ["auto", "Automatic (LoRA jobs share)"],
  ["own", "Own instances"],
  ["require", "Require sharing"],
];

/** `generation.share` of the form: null (the API's default) unless LoRA is on and the choice is not automatic; sent
 * as null rather than left out so a clone of a job that said true or false goes back to automatic when asked. */
export function shareSpec(form: JobForm): boolean | null {
  if (form["training.lora"] !== "on") return null; // the control is hidden: a choice left from before does not count
  return form["generation.share"] === "own" ? false : form["generation.share"] === "require" ? true : null;
}

/** `training.share` of the form: true only when LoRA is on and sharing was chosen, else false (the API's default),
 * sent rather than left out so a clone of a sharing job that turns LoRA off or sharing off does not keep the base's
 * true (the API would refuse it at a field the form no longer shows). */
export function trainingShareSpec(form: JobForm): boolean {
  return form["training.lora"] === "on" && form["training.share"] === "on";
}

const num = (value: string) => (value.trim() === "" ? undefined : Number(value));

/** The form's JSON-or-YAML text boxes, parsed (parseFormTexts); absent: empty. */
export interface ParsedTexts {
  "reward.params"?: Record<string, unknown>;
  "environment.params"?: Record<string, unknown>;
}

/** Parse the text boxes the form sends as objects (reward params, environment params); errors by field path. */
export async function parseFormTexts(form: JobForm): Promise<{ parsed: ParsedTexts; errors: Record<string, string> }> {
  const parsed: ParsedTexts = {};
  const errors: Record<string, string> = {};
  const keys: (keyof ParsedTexts)[] = form["environment.type"] ? ["environment.params"] : [];
  if (!form["environment.type"] || form["environment.grader"] === "on") keys.push("reward.params");
  for (const key of keys) {
    try {
      parsed[key] = await parseObject(form[key], key.replace(".", " "));
    } catch (caught) {
      errors[key] = caught instanceof Error ? caught.message : String(caught);
    }
  }
  return { parsed, errors };
}

function rewardSpec(form: JobForm, parsed: ParsedTexts): Record<string, unknown> {
  if (form["reward.type"] === "python") return { type: "python", code: form["reward.code"] };
  const params = parsed["reward.params"] ?? {};
  return Object.keys(params).length ? { type: form["reward.type"], params } : { type: form["reward.type"] };
}

/** `environment`: the chosen built-in (with its params), python or verifiers code, and the episode limits; null:
 * single-turn. */
function environmentSpec(form: JobForm, parsed: ParsedTexts): Record<string, unknown> | null {
  const type = form["environment.type"];
  if (!type) return null;
  const params = parsed["environment.params"] ?? {};
  return {
    type,
    ...(type === "python" ? { code: form["environment.code"] } : type === "verifiers" ? verifiersPlace(form, params)
      : Object.keys(params).length && type !== "gateway" ? { params } : {}),
    ...(type === "openenv" ? { url: form["environment.url"].trim() } : {}),
    max_turns: num(form["environment.max_turns"]),
    max_episode_tokens: num(form["environment.max_episode_tokens"]),
    step_timeout_s: num(form["environment.step_timeout_s"]),
    grader: form["environment.grader"] === "on" ? rewardSpec(form, parsed) : null,
  };
}

/** A text box's lines, trimmed, empty ones dropped (requirements: one per line). */
const lines = (value: string) => value.split("\n").map((r) => r.trim()).filter(Boolean);

/** A verifiers environment's code (null with an installed taskset or a served env: the API takes one of them),
 * its server's `url` (a served env, verifiers' EnvServer at tcp://host:port; no requirements then), requirements and
 * params, all sent even when empty so that on a clone they replace the base's (mergeSpec would keep a base's code
 * beside a params.taskset or a url, which the API refuses). */
function verifiersPlace(form: JobForm, params: Record<string, unknown>): Record<string, unknown> {
  const source = form["environment.source"];
  return {
    code: source === "code" ? form["environment.code"] : null,
    url: source === "url" ? form["environment.url"].trim() : null,
    requirements: source === "url" ? [] : lines(form["environment.requirements"]),
    params,
  };
}

/** `agent` of a gateway job: code with its requirements (one per line), or a service's URL; null otherwise, so a
 * clone switched away from the gateway drops the base's agent. */
export function agentSpec(form: JobForm): Record<string, unknown> | null {
  if (form["environment.type"] !== "gateway") return null;
  const place = form["agent.where"] === "url"
    ? { url: form["agent.url"].trim() }
    : { code: form["agent.code"], requirements: lines(form["agent.requirements"]), episodes_per_jail: num(form["agent.episodes_per_jail"]) };
  return { ...place, concurrency: num(form["agent.concurrency"]), timeout_s: num(form["agent.timeout_s"]) };
}

/** Nest the flat form into a JobSpec body (numbers parsed; the API validates and names any bad field). With an
 * environment the body has no `reward`: the episode's reward comes from the environment's steps, plus (grader on)
 * the reward fields' grader of the final answer, sent as `environment.grader`. */
export function toSpec(form: JobForm, parsed: ParsedTexts = {}): Record<string, unknown> {
  const environment = environmentSpec(form, parsed);
  const dataset =
    form["dataset.source"] === "builtin"
      ? { builtin: form["dataset.builtin"], num_prompts: num(form["dataset.num_prompts"]) }
      : { id: num(form["dataset.id"]) ?? null };
  return {
    name: form.name,
    model: form.model,
    priority: form.priority,
    preemptible: form.preemptible === "on",
    dataset,
    reward: environment ? undefined : rewardSpec(form, parsed),
    environment,
    agent: agentSpec(form),
    algorithm: algorithmSpec(form),
    mode: form.mode,
    max_staleness: num(form.max_staleness),
    generation: {
      engine: form["generation.engine"],
      instances: num(form["generation.instances"]) ?? null,
      batch_size: num(form["generation.batch_size"]),
      max_tokens: num(form["generation.max_tokens"]),
      temperature: num(form["generation.temperature"]),
      speculative: form["generation.speculative"],
      share: shareSpec(form),
    },
    training: {
      devices: num(form["training.devices"]),
      iterations: num(form["training.iterations"]),
      prompts_per_iteration: num(form["training.prompts_per_iteration"]),
      lr: num(form["training.lr"]),
      lora: form["training.lora"] === "on" ? loraSpec(form) : null,
      share: trainingShareSpec(form),
    },
    dispatch: { policy: form["dispatch.policy"] },
    autoscale: {
      policy: form["autoscale.policy"],
      min_instances: num(form["autoscale.min_instances"]),
      max_instances: num(form["autoscale.max_instances"]),
    },
  };
}

/** `algorithm`; a teacher (and the reward's weight) only for distill, `teacher: null` otherwise, so a clone of a
 * distillation job switched to another algorithm drops its teacher. */
function algorithmSpec(form: JobForm): Record<string, unknown> {
  const distill = form["algorithm.name"] === "distill";
  return {
    name: form["algorithm.name"],
    group_size: num(form["algorithm.group_size"]),
    kl_coef: num(form["algorithm.kl_coef"]),
    teacher: distill ? form["algorithm.teacher"] || null : null,
    reward_coef: distill ? num(form["algorithm.reward_coef"]) : undefined,
  };
}

/** `training.lora`; target modules comma-separated, none given: every linear layer (null). */
function loraSpec(form: JobForm): Record<string, unknown> {
  const modules = form["training.lora.target_modules"].split(",").map((m) => m.trim()).filter(Boolean);
  return {
    rank: num(form["training.lora.rank"]),
    alpha: num(form["training.lora.alpha"]),
    dropout: num(form["training.lora.dropout"]),
    target_modules: modules.length ? modules : null,
  };
}

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => v !== null && typeof v === "object" && !Array.isArray(v);
const str = (v: unknown, fallback: string) => (v === null || v === undefined ? fallback : String(v));

/** The form pre-filled from an existing job's spec (clone); fields the form does not show stay in the base spec. */
export function fromSpec(spec: Obj, defaults: JobForm = DEFAULT_FORM): JobForm {
  const get = (path: string): unknown => path.split(".").reduce<unknown>((node, key) => (isObj(node) ? node[key] : undefined), spec);
  const form = { ...defaults };
  const graded = isObj(get("environment.grader"));
  const rewardAt = graded ? "environment.grader" : "reward"; // where the reward fields' spec sits
  for (const key of Object.keys(defaults) as (keyof JobForm)[]) {
    if (key === "dataset.source") continue;
    const value = key === "environment.grader" ? undefined : key.startsWith("reward.") ? get(rewardAt + key.slice(6)) : get(key);
    if (value === null && (key === "generation.instances" || key === "dataset.id")) (form as Record<string, string>)[key] = "";
    else if (value !== undefined && value !== null && typeof value !== "object") (form as Record<string, string>)[key] = String(value);
  }
  form.name = `${str(spec.name, "job")}-clone`;
  form["dataset.source"] = get("dataset.builtin") ? "builtin" : "uploaded";
  form["training.lora"] = isObj(get("training.lora")) ? "on" : "off";
  const share = get("generation.share");
  form["generation.share"] = share === true ? "require" : share === false ? "own" : "auto";
  form["training.share"] = get("training.share") === true ? "on" : "off";
  form["environment.grader"] = graded ? "on" : "off";
  form.preemptible = get("preemptible") === false ? "off" : "on";
  for (const key of ["reward.params", "environment.params"] as const) {
    const params = get(key === "reward.params" ? `${rewardAt}.params` : key);
    form[key] = isObj(params) && Object.keys(params).length ? JSON.stringify(params, null, 2) : "";
  }
  if (get("environment.type") === "verifiers") {
    const code = get("environment.code");
    form["environment.source"] = typeof code === "string" ? "code" : typeof get("environment.url") === "string" ? "url" : "installed";
    if (typeof code !== "string") form["environment.code"] = DEFAULT_VERIFIERS_CODE; // shown if switched to code
  }
  const envRequirements = get("environment.requirements");
  form["environment.requirements"] = Array.isArray(envRequirements) ? envRequirements.join("\n") : defaults["environment.requirements"];
  form["agent.where"] = typeof get("agent.url") === "string" ? "url" : "code";
  const requirements = get("agent.requirements");
  form["agent.requirements"] = Array.isArray(requirements) ? requirements.join("\n") : defaults["agent.requirements"];
  const modules = get("training.lora.target_modules");
  form["training.lora.target_modules"] = Array.isArray(modules) ? modules.join(", ") : "";
  return form;
}

/**
 * The form's spec laid over the spec it was cloned from: nested sections merge (so e.g. `checkpoint` or `top_p`
 * survive; params the form sends replace the base's whole, params it leaves out are kept), but a dataset whose source changed (built-in vs uploaded) or a reward or environment whose
 * type changed is replaced whole, never mixed; a patch with an environment drops the base's reward (a spec may not
 * have both).
 */
export function mergeSpec(base: Obj, patch: Obj): Obj {
  const out: Obj = { ...base };
  if (isObj(patch.environment)) delete out.reward;
  for (const [key, value] of Object.entries(patch)) {
    const old = base[key];
    const replace =
      (key === "dataset" && isObj(old) && isObj(value) && Boolean(old.builtin) !== Boolean(value.builtin)) ||
      key === "agent" || // code and url exclude each other: the form's agent replaces the base's whole
      ((key === "reward" || key === "environment" || key === "grader") && isObj(old) && isObj(value) && old.type !== value.type) ||
      key === "params"; // the form shows params whole (an edited grader must not keep a removed field)
    if (value === undefined) continue;
    out[key] = !replace && isObj(old) && isObj(value) ? mergeSpec(old, value) : value;
  }
  return out;
}

const NUMERIC: (keyof JobForm)[] = [
  "dataset.num_prompts", "algorithm.group_size", "algorithm.kl_coef", "algorithm.reward_coef", "max_staleness", "generation.instances",
  "generation.batch_size", "generation.max_tokens", "generation.temperature", "training.devices", "training.iterations",
  "training.prompts_per_iteration", "training.lr", "autoscale.min_instances", "autoscale.max_instances",
  "training.lora.rank", "training.lora.alpha", "training.lora.dropout", "environment.max_turns",
  "environment.max_episode_tokens", "environment.step_timeout_s", "agent.concurrency", "agent.timeout_s",
  "agent.episodes_per_jail",
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
