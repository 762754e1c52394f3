import { describe, expect, it } from "vitest";
import { DEFAULT_FORM, toSpec } from "./jobForm";

describe("toSpec", () => {
  it("nests the flat form into a JobSpec body with numbers parsed", () => {
    const spec = toSpec({ ...DEFAULT_FORM, model: "tiny-1m", "dataset.id": "7", "generation.batch_size": "8" });
    expect(spec).toMatchObject({
      model: "tiny-1m",
      dataset: { id: 7 },
      generation: { batch_size: 8, instances: 2 },
      training: { iterations: 60, lr: 0.003 },
      reward: { type: "python" },
    });
  });

  it("sends a built-in task instead of a dataset id, python reward code only for type python", () => {
    const spec = toSpec({ ...DEFAULT_FORM, "dataset.source": "builtin", "reward.type": "python" });
    expect(spec.dataset).toEqual({ builtin: "long_tail", num_prompts: 256 });
    expect((spec.reward as { code?: string }).code).toContain("def reward");
    expect(toSpec({ ...DEFAULT_FORM, "reward.type": "exact_match" }).reward).toEqual({ type: "exact_match" });
  });

  it("leaves blank numbers out so the API applies its defaults, and keeps bad numbers for the API to name", () => {
    const spec = toSpec({ ...DEFAULT_FORM, "generation.instances": "", "training.lr": "abc" });
    expect((spec.generation as { instances: unknown }).instances).toBeNull();
    expect(Number.isNaN((spec.training as { lr: number }).lr)).toBe(true);
  });
});

import { fromSpec, mergeSpec } from "./jobForm";

describe("scheduling fields", () => {
  it("sends priority and preemptible, and a clone keeps them", () => {
    const spec = toSpec({ ...DEFAULT_FORM, priority: "low", preemptible: "off" });
    expect(spec.priority).toBe("low");
    expect(spec.preemptible).toBe(false);
    const form = fromSpec(spec as Record<string, unknown>);
    expect(form.priority).toBe("low");
    expect(form.preemptible).toBe("off");
    expect(toSpec(DEFAULT_FORM).preemptible).toBe(true);
  });
});

describe("clone: fromSpec + mergeSpec", () => {
  const spec = {
    name: "base", model: "tiny", dataset: { id: null, path: null, builtin: "arithmetic", num_prompts: 32, eval_prompts: 8 },
    reward: { type: "exact_match", params: { strip: true }, weight: 1, components: [], code: null },
    generation: { engine: "hf", instances: null, batch_size: 4, temperature: 0.7, top_p: 0.9, max_tokens: 16, stop: [] },
    training: { iterations: 3, lr: 0.001 }, checkpoint: { interval: 2, keep: 1 },
  };

  it("pre-fills the form from a spec and names the clone", () => {
    const form = fromSpec(spec);
    expect(form).toMatchObject({ name: "base-clone", "dataset.source": "builtin", "dataset.num_prompts": "32", "generation.instances": "", "generation.temperature": "0.7", "training.lr": "0.001" });
  });

  it("submitting the unchanged clone gives back the original spec but the name", () => {
    const merged = mergeSpec(spec, toSpec(fromSpec(spec)));
    expect(merged).toMatchObject({ ...spec, name: "base-clone", training: { ...spec.training, iterations: 3 } });
    expect((merged.generation as { top_p: number }).top_p).toBe(0.9);
    expect(merged.checkpoint).toEqual({ interval: 2, keep: 1 });
  });

  it("replaces the dataset whole when its source changes, and the reward when its type changes", () => {
    const form = { ...fromSpec(spec), "dataset.source": "uploaded" as const, "dataset.id": "5", "reward.type": "numeric" };
    const merged = mergeSpec(spec, toSpec(form));
    expect(merged.dataset).toEqual({ id: 5 });
    expect(merged.reward).toEqual({ type: "numeric" });
  });
});

import { localErrors } from "./jobForm";

describe("localErrors", () => {
  it("reports every non-number and min > max under both instance fields at once", () => {
    const errors = localErrors({ ...DEFAULT_FORM, "training.lr": "abc", "generation.batch_size": "x", "autoscale.min_instances": "5", "autoscale.max_instances": "2" });
    expect(Object.keys(errors).sort()).toEqual(["autoscale.max_instances", "autoscale.min_instances", "generation.batch_size", "training.lr"]);
    expect(localErrors(DEFAULT_FORM)).toEqual({});
  });
});

describe("LoRA fields", () => {
  it("sends training.lora only when LoRA is on, with target modules split (none: all linear layers)", () => {
    expect((toSpec(DEFAULT_FORM).training as { lora: unknown }).lora).toBeNull();
    const on = toSpec({ ...DEFAULT_FORM, "training.lora": "on", "training.lora.rank": "8", "training.lora.target_modules": "q_proj, v_proj" });
    expect((on.training as { lora: unknown }).lora).toEqual({ rank: 8, alpha: 32, dropout: 0, target_modules: ["q_proj", "v_proj"] });
    const all = toSpec({ ...DEFAULT_FORM, "training.lora": "on", "training.lora.target_modules": " " });
    expect((all.training as { lora: { target_modules: unknown } }).lora.target_modules).toBeNull();
  });

  it("round-trips a LoRA spec through clone", () => {
    const form = fromSpec({ name: "l", training: { lora: { rank: 4, alpha: 8, dropout: 0.1, target_modules: ["q_proj", "k_proj"] } } });
    expect(form["training.lora"]).toBe("on");
    expect(form["training.lora.rank"]).toBe("4");
    expect(form["training.lora.target_modules"]).toBe("q_proj, k_proj");
    expect(fromSpec({ name: "f", training: { lora: null } })["training.lora"]).toBe("off");
  });
});

import { parseFormTexts } from "./jobForm";

describe("environment and reward params", () => {
  it("sends an environment with its limits and no reward", async () => {
    const form = { ...DEFAULT_FORM, "environment.type": "calculator", "environment.params": "operands: 2\n", "environment.max_turns": "3" };
    const { parsed, errors } = await parseFormTexts(form);
    expect(errors).toEqual({});
    const spec = toSpec(form, parsed);
    expect(spec.environment).toEqual({ type: "calculator", params: { operands: 2 }, max_turns: 3, max_episode_tokens: 512, step_timeout_s: 2, grader: null });
    expect(spec.reward).toBeUndefined();
    expect(JSON.parse(JSON.stringify(spec))).not.toHaveProperty("reward");
  });

  it("sends the reward fields as the environment's grader of the final answer when it is on", async () => {
    const form = { ...DEFAULT_FORM, "environment.type": "calculator", "environment.grader": "on" as const, "reward.type": "multi",
      "reward.params": "graders:\n  exact: {type: string_check, input: '{{ sample.output_text }}', reference: '{{ item.answer }}', operation: eq}\ncalculate_output: exact\n" };
    const { parsed, errors } = await parseFormTexts(form);
    expect(errors).toEqual({});
    const spec = toSpec(form, parsed);
    expect(spec.reward).toBeUndefined();
    expect(spec.environment).toMatchObject({ type: "calculator", grader: { type: "multi", params: { calculate_output: "exact" } } });
    expect((await parseFormTexts({ ...form, "reward.params": "[1]" })).errors["reward.params"]).toMatch(/must be an object/);
    const cloned = fromSpec({ name: "agent", reward: { type: "exact_match" }, environment: spec.environment });
    expect(cloned["environment.grader"]).toBe("on");
    expect(cloned["reward.type"]).toBe("multi");
    expect(JSON.parse(cloned["reward.params"])).toMatchObject({ calculate_output: "exact" });
    expect(fromSpec({ name: "x", environment: { type: "calculator", grader: null } })["environment.grader"]).toBe("off");
  });

  it("sends an openenv environment's url (and clones it back)", () => {
    const spec = toSpec({ ...DEFAULT_FORM, "environment.type": "openenv", "environment.url": " http://envs:8000 " });
    expect(spec.environment).toMatchObject({ type: "openenv", url: "http://envs:8000" });
    expect(toSpec({ ...DEFAULT_FORM, "environment.type": "calculator" }).environment).not.toHaveProperty("url");
    expect(fromSpec({ name: "x", environment: { type: "openenv", url: "http://envs:8000" } })["environment.url"]).toBe("http://envs:8000");
  });

  it("sends python environment code without params, and null without an environment", () => {
    const spec = toSpec({ ...DEFAULT_FORM, "environment.type": "python", "environment.params": "{}" });
    expect(spec.environment).toMatchObject({ type: "python", code: expect.stringContaining("def step(messages, row)") });
    expect(spec.environment).not.toHaveProperty("params");
    expect(toSpec(DEFAULT_FORM).environment).toBeNull();
  });

  it("sends a grader's params (JSON or YAML) and names a box that does not parse", async () => {
    const form = { ...DEFAULT_FORM, "reward.type": "string_check", "reward.params": "input: '{{ sample.output_text }}'\nreference: '{{ item.answer }}'\noperation: eq\n" };
    const { parsed } = await parseFormTexts(form);
    expect(toSpec(form, parsed).reward).toEqual({ type: "string_check", params: { input: "{{ sample.output_text }}", reference: "{{ item.answer }}", operation: "eq" } });
    const bad = await parseFormTexts({ ...form, "reward.params": "[1, 2]" });
    expect(bad.errors["reward.params"]).toMatch(/must be an object/);
    expect((await parseFormTexts({ ...form, "environment.type": "calculator", "reward.params": "[1]" })).errors).toEqual({}); // not sent
  });

  it("clones an environment job: fields pre-filled, the base reward dropped, a changed type replaces params", () => {
    const base = { name: "agent", model: "tiny", dataset: { builtin: "arithmetic" }, reward: { type: "exact_match", params: {} },
      environment: null, checkpoint: { interval: 2 } };
    const form = fromSpec({ ...base, environment: { type: "guess_number", params: { high: 8 }, max_turns: 6 } });
    expect(form["environment.type"]).toBe("guess_number");
    expect(JSON.parse(form["environment.params"])).toEqual({ high: 8 });
    expect(form["environment.max_turns"]).toBe("6");
    const merged = mergeSpec(base, toSpec({ ...form, "environment.type": "calculator", "environment.params": "" }));
    expect(merged).not.toHaveProperty("reward");
    expect(merged.environment).toMatchObject({ type: "calculator", max_turns: 6 });
    expect(merged.environment).not.toHaveProperty("params");
    expect(merged.checkpoint).toEqual({ interval: 2 });
    const graded = mergeSpec({ reward: { type: "string_check", params: { input: "a", reference: "b", operation: "eq" } } },
      { reward: { type: "string_check", params: { input: "a", reference: "c" } } });
    expect(graded.reward).toEqual({ type: "string_check", params: { input: "a", reference: "c" } }); // params whole
  });
});

import { shareSpec } from "./jobForm";

describe("generation.share", () => {
  const lora = { ...DEFAULT_FORM, "training.lora": "on" as const };
  const share = (form: typeof DEFAULT_FORM) => (toSpec(form).generation as { share: unknown }).share;

  it("maps the three choices of a LoRA job: automatic null, own instances false, require sharing true", () => {
    expect(DEFAULT_FORM["generation.share"]).toBe("auto");
    expect(share(lora)).toBeNull();
    expect(share({ ...lora, "generation.share": "own" })).toBe(false);
    expect(share({ ...lora, "generation.share": "require" })).toBe(true);
    expect(toSpec({ ...lora, "generation.share": "own" }).generation).toMatchObject({ engine: "hf", instances: 2, share: false });
  });

  it("sends null without LoRA, whatever was chosen before LoRA was turned off (the control is hidden)", () => {
    expect(share(DEFAULT_FORM)).toBeNull();
    expect(shareSpec({ ...DEFAULT_FORM, "generation.share": "require" })).toBeNull();
    expect(shareSpec({ ...DEFAULT_FORM, "generation.share": "own" })).toBeNull();
  });

  it("round-trips through clone, and automatic on a clone of a job that said false sends null over it", () => {
    const base = { name: "l", generation: { engine: "hf", share: false }, training: { lora: { rank: 4 } } };
    expect(fromSpec(base)["generation.share"]).toBe("own");
    expect(fromSpec({ ...base, generation: { share: true } })["generation.share"]).toBe("require");
    expect(fromSpec({ ...base, generation: { share: null } })["generation.share"]).toBe("auto");
    expect(fromSpec({ name: "old" })["generation.share"]).toBe("auto");
    const merged = mergeSpec(base, toSpec({ ...fromSpec(base), "generation.share": "auto" }));
    expect((merged.generation as { share: unknown }).share).toBeNull();
    expect((mergeSpec(base, toSpec(fromSpec(base))).generation as { share: unknown }).share).toBe(false);
  });
});

import { trainingShareSpec } from "./jobForm";

describe("training.share", () => {
  const lora = { ...DEFAULT_FORM, "training.lora": "on" as const };
  const share = (form: typeof DEFAULT_FORM) => (toSpec(form).training as { share: unknown }).share;

  it("sends true only for a LoRA job that chose to share, else false", () => {
    expect(DEFAULT_FORM["training.share"]).toBe("off");
    expect(share(lora)).toBe(false);
    expect(share({ ...lora, "training.share": "on" })).toBe(true);
    expect(toSpec({ ...lora, "training.share": "on" }).training).toMatchObject({ devices: 1, lora: { rank: 16 }, share: true });
    expect(trainingShareSpec({ ...DEFAULT_FORM, "training.share": "on" })).toBe(false); // LoRA off: the control is hidden
  });

  it("round-trips through clone, and a clone that stops sharing sends false over the base's true", () => {
    const base = { name: "l", training: { lora: { rank: 4 }, share: true } };
    expect(fromSpec(base)["training.share"]).toBe("on");
    expect(fromSpec({ ...base, training: { lora: { rank: 4 }, share: false } })["training.share"]).toBe("off");
    expect(fromSpec({ name: "old" })["training.share"]).toBe("off");
    expect((mergeSpec(base, toSpec(fromSpec(base))).training as { share: unknown }).share).toBe(true);
    const off = mergeSpec(base, toSpec({ ...fromSpec(base), "training.lora": "off" }));
    expect((off.training as { share: unknown; lora: unknown })).toMatchObject({ share: false, lora: null });
  });
});

describe("generation.speculative", () => {
  it("sends the choice and round-trips it through clone", () => {
    expect(DEFAULT_FORM["generation.speculative"]).toBe("auto");
    expect(toSpec(DEFAULT_FORM).generation).toMatchObject({ speculative: "auto" });
    expect(toSpec({ ...DEFAULT_FORM, "generation.speculative": "off" }).generation).toMatchObject({ speculative: "off" });
    expect(fromSpec({ name: "s", generation: { speculative: "group" } })["generation.speculative"]).toBe("group");
    expect(fromSpec({ name: "old" })["generation.speculative"]).toBe("auto");
  });
});

describe("algorithm distill", () => {
  it("sends the teacher and reward weight only for distill, and drops a cloned teacher otherwise", () => {
    const form = { ...DEFAULT_FORM, model: "small", "algorithm.name": "distill", "algorithm.teacher": "big", "algorithm.reward_coef": "0.5" };
    expect(toSpec(form).algorithm).toEqual({ name: "distill", group_size: 8, kl_coef: 0, teacher: "big", reward_coef: 0.5 });
    const grpo = toSpec({ ...form, "algorithm.name": "grpo" }).algorithm as Record<string, unknown>;
    expect(grpo.teacher).toBeNull();
    expect(grpo.reward_coef).toBeUndefined();
    const base = { model: "small", algorithm: { name: "distill", teacher: "big", kl_discount: 0.5 } };
    const cloned = fromSpec(base);
    expect([cloned["algorithm.name"], cloned["algorithm.teacher"]]).toEqual(["distill", "big"]);
    const switched = mergeSpec(base, toSpec({ ...cloned, "algorithm.name": "grpo" }));
    expect((switched.algorithm as Record<string, unknown>).teacher).toBeNull();
    expect(localErrors({ ...form, "algorithm.reward_coef": "lots" })["algorithm.reward_coef"]).toBe('"lots" is not a number');
  });
});

import { chooseLora, FULL_FINETUNE_LR, LORA_LR, lrNote } from "./jobForm";

describe("per-choice learning-rate defaults", () => {
  it("moves a default rate with the LoRA choice, keeps a typed one, and says why", () => {
    const on = chooseLora(DEFAULT_FORM, "on");
    expect(on["training.lr"]).toBe(LORA_LR);
    expect(lrNote(on)).toContain("only the small adapters train");
    expect(chooseLora(on, "off")["training.lr"]).toBe(FULL_FINETUNE_LR);
    const typed = chooseLora({ ...DEFAULT_FORM, "training.lr": "0.0005" }, "on");
    expect(typed["training.lr"]).toBe("0.0005");
    expect(lrNote(typed)).toBeNull();
    expect(lrNote({ ...on, "training.lr": FULL_FINETUNE_LR })).toContain("LoRA adapters need more");
  });
});

import { FORM_DEFAULTS } from "../api/choices.gen";

describe("the form's spec carries the registry's per-choice defaults", () => {
  it("LoRA on: lr, rank and alpha of contract/form_defaults.py; off again: the full fine-tuning rate", () => {
    const lora = toSpec(chooseLora(DEFAULT_FORM, "on")).training as Record<string, unknown>;
    expect(lora.lr).toBe(FORM_DEFAULTS.lora["training.lr"].value);
    expect(lora.lora).toMatchObject({ rank: FORM_DEFAULTS.lora["training.lora.rank"].value, alpha: FORM_DEFAULTS.lora["training.lora.alpha"].value });
    const targets = String(FORM_DEFAULTS.lora["training.lora.target_modules"].value).split(", ");
    expect((lora.lora as Record<string, unknown>).target_modules).toEqual(targets);
    expect(targets).toContain("lm_head"); // without the output head a fresh model cannot learn (contract/form_defaults.py)
    const full = toSpec(chooseLora(chooseLora(DEFAULT_FORM, "on"), "off")).training as Record<string, unknown>;
    expect(full.lr).toBe(FORM_DEFAULTS.full["training.lr"].value);
    expect(full.lora).toBeNull();
  });
});

import { chooseEnvironment, DEFAULT_ENVIRONMENT_CODE, DEFAULT_VERIFIERS_CODE } from "./jobForm";

describe("verifiers environment", () => {
  const verifiers = { ...chooseEnvironment({ ...DEFAULT_FORM, model: "tiny" }, "verifiers"),
    "environment.requirements": " my-vf-helpers==1.0\n\nnumpy \n", "environment.params": "concurrency: 2\n" };

  it("posts the module's code with its requirements one per line and its params, and no reward", async () => {
    const { parsed, errors } = await parseFormTexts(verifiers);
    expect(errors).toEqual({});
    const spec = toSpec(verifiers, parsed);
    expect(spec.reward).toBeUndefined();
    expect(spec.agent).toBeNull();
    expect(spec.environment).toMatchObject({ type: "verifiers", code: DEFAULT_VERIFIERS_CODE,
      requirements: ["my-vf-helpers==1.0", "numpy"], params: { concurrency: 2 }, max_turns: 4, grader: null });
    expect(spec.environment).toMatchObject({ url: null }); // null over a cloned base's served env
    // the template passes the API's checks as the form sends it: exports via __all__, declares no tools
    expect(DEFAULT_VERIFIERS_CODE).toMatch(/^__all__ = \[/m);
    expect(DEFAULT_VERIFIERS_CODE).not.toMatch(/toolsets|Toolset/);
  });

  it("posts an installed taskset without code (the API takes one of them) and empty requirements as []", async () => {
    const form = { ...verifiers, "environment.source": "installed" as const, "environment.requirements": "",
      "environment.params": "taskset: reverse-text" };
    const spec = toSpec(form, (await parseFormTexts(form)).parsed);
    expect(spec.environment).toMatchObject({ type: "verifiers", code: null, requirements: [], params: { taskset: "reverse-text" } });
  });

  it("the code box follows the type's template until edited", () => {
    expect(DEFAULT_FORM["environment.code"]).toBe(DEFAULT_ENVIRONMENT_CODE);
    expect(verifiers["environment.code"]).toBe(DEFAULT_VERIFIERS_CODE);
    expect(chooseEnvironment(verifiers, "python")["environment.code"]).toBe(DEFAULT_ENVIRONMENT_CODE);
    const edited = { ...verifiers, "environment.code": "import verifiers.v1 as vf\n__all__ = []\n" };
    expect(chooseEnvironment(edited, "python")["environment.code"]).toBe(edited["environment.code"]);
    expect(chooseEnvironment(verifiers, "calculator")).toMatchObject({ "environment.type": "calculator", "environment.code": DEFAULT_VERIFIERS_CODE });
  });

  it("a clone fills code, requirements and params back, and resubmits the same environment", async () => {
    const base = { name: "vf", model: "tiny", dataset: { builtin: "arithmetic", num_prompts: 16 }, reward: null,
      environment: { type: "verifiers", code: "import verifiers.v1 as vf\n\n__all__ = ['T']\n", requirements: ["a==1", "b"],
        params: { concurrency: 2 }, max_turns: 3, episode_timeout_s: 120 } };
    const form = fromSpec(base);
    expect(form["environment.type"]).toBe("verifiers");
    expect(form["environment.source"]).toBe("code");
    expect(form["environment.code"]).toBe(base.environment.code);
    expect(form["environment.requirements"]).toBe("a==1\nb");
    expect(JSON.parse(form["environment.params"])).toEqual({ concurrency: 2 });
    const { parsed } = await parseFormTexts(form);
    const merged = mergeSpec(base, toSpec(form, parsed));
    expect(merged.environment).toMatchObject({ ...base.environment, grader: null });
    expect(merged).not.toHaveProperty("reward");
  });

  it("a clone of an installed taskset switched to code sends the template and drops the base's params", async () => {
    const base = { name: "vf", environment: { type: "verifiers", params: { taskset: "reverse-text" }, requirements: ["reverse-text"] } };
    const form = fromSpec(base);
    expect(form["environment.source"]).toBe("installed");
    expect(form["environment.requirements"]).toBe("reverse-text");
    const toCode = { ...form, "environment.source": "code" as const, "environment.params": "" };
    const merged = mergeSpec(base, toSpec(toCode, (await parseFormTexts(toCode)).parsed));
    expect(merged.environment).toMatchObject({ code: DEFAULT_VERIFIERS_CODE, params: {}, requirements: ["reverse-text"] });
    // and the reverse: a code job switched to the installed taskset sends code null over the base's code
    const coded = { name: "vf", environment: { type: "verifiers", code: DEFAULT_VERIFIERS_CODE } };
    const installed = { ...fromSpec(coded), "environment.source": "installed" as const, "environment.params": "taskset: reverse-text" };
    const back = mergeSpec(coded, toSpec(installed, (await parseFormTexts(installed)).parsed));
    expect(back.environment).toMatchObject({ code: null, params: { taskset: "reverse-text" } });
    expect(fromSpec({ name: "p", environment: { type: "python", code: "x" } })["environment.requirements"]).toBe("");
  });

  it("posts a served env's tcp:// url without code or requirements, and a clone fills it back", async () => {
    const form = { ...verifiers, "environment.source": "url" as const, "environment.url": " tcp://envs.example.com:5000 " };
    const spec = toSpec(form, (await parseFormTexts(form)).parsed);
    expect(spec.environment).toMatchObject({ type: "verifiers", url: "tcp://envs.example.com:5000", code: null,
      requirements: [], params: { concurrency: 2 } });
    const base = { name: "vf", environment: { type: "verifiers", url: "tcp://envs.example.com:5000", params: {} } };
    const cloned = fromSpec(base);
    expect(cloned["environment.source"]).toBe("url");
    expect(cloned["environment.url"]).toBe("tcp://envs.example.com:5000");
    // switched to code: url null over the base's url (the API refuses both)
    const toCode = { ...cloned, "environment.source": "code" as const };
    const merged = mergeSpec(base, toSpec(toCode, (await parseFormTexts(toCode)).parsed));
    expect(merged.environment).toMatchObject({ url: null, code: DEFAULT_VERIFIERS_CODE });
  });
});
