import { describe, expect, it } from "vitest";
import { DEFAULT_FORM, toSpec } from "./jobForm";

describe("toSpec", () => {
  it("nests the flat form into a JobSpec body with numbers parsed", () => {
    const spec = toSpec({ ...DEFAULT_FORM, model: "tiny-1m", "dataset.id": "7", "generation.batch_size": "8" });
    expect(spec).toMatchObject({
      model: "tiny-1m",
      dataset: { id: 7 },
      generation: { batch_size: 8, instances: 2 },
      training: { iterations: 20 },
      reward: { type: "exact_match" },
    });
  });

  it("sends a built-in task instead of a dataset id, python reward code only for type python", () => {
    const spec = toSpec({ ...DEFAULT_FORM, "dataset.source": "builtin", "reward.type": "python" });
    expect(spec.dataset).toEqual({ builtin: "arithmetic", num_prompts: 256 });
    expect((spec.reward as { code?: string }).code).toContain("def reward");
    expect(toSpec(DEFAULT_FORM).reward).toEqual({ type: "exact_match" });
  });

  it("leaves blank numbers out so the API applies its defaults, and keeps bad numbers for the API to name", () => {
    const spec = toSpec({ ...DEFAULT_FORM, "generation.instances": "", "training.lr": "abc" });
    expect((spec.generation as { instances: unknown }).instances).toBeNull();
    expect(Number.isNaN((spec.training as { lr: number }).lr)).toBe(true);
  });
});

import { fromSpec, mergeSpec } from "./jobForm";

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
