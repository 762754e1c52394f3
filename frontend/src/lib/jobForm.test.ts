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
