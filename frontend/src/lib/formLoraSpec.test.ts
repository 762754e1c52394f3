import { describe, expect, it } from "vitest";
import { chooseLora, DEFAULT_FORM, toSpec } from "./jobForm";

/**
 * The body the submit form posts for a LoRA job on the built-in task with every other field at its default (LoRA
 * switched on, the built-in source picked, the model left to the caller). Written to tests/training/form_lora_spec.json,
 * which tests/training/test_form_defaults_learn.py and bench/form_defaults.py train: a form or registry change that
 * alters this body fails here until the file is regenerated (`npx vitest run -u src/lib/formLoraSpec.test.ts`), so
 * the job proven to learn is the one the form sends.
 */
describe("the form's LoRA job", () => {
  it("matches the spec the learning test trains", async () => {
    const form = chooseLora({ ...DEFAULT_FORM, "dataset.source": "builtin" as const }, "on");
    await expect(JSON.stringify(toSpec(form), null, 2) + "\n").toMatchFileSnapshot("../../../tests/training/form_lora_spec.json");
  });
});
