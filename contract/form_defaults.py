"""The submit form's per-choice defaults, with the reason the dashboard shows under each field.

The dashboard reads this table from the OpenAPI schema (`x-form-defaults` on `TrainingSpec.lora`, written into
frontend/src/api/choices.gen.ts by `npm run gen:api`): choosing full fine-tuning or LoRA in the form sets each field
below to the choice's value unless the user typed another, and shows `why`. The form's spec is checked against this
table in a browser test (tests/e2e/test_dashboard_form_defaults.py) and a LoRA job with these defaults is trained on
the built-in long-tail task in CI by tests/training/test_form_defaults_learn.py (the body the form posts, written by
frontend/src/lib/formLoraSpec.test.ts) and with a flat control by bench/form_defaults.py.

Why a LoRA job from the form did not learn (issue 39): peft's default targets ("all-linear") leave out the output head.
After the final RMSNorm the hidden state's size is fixed, so a model whose head is small, as in a freshly built model
like the demo's, can move its logits only within a narrow band (about +-2.5 for hidden size 128) whatever the adapted
layers do: its next-token distribution stays near uniform, the entropy near log(vocab), and the reward flat at any
learning rate (0.01 and 0.05 alike; a supervised probe plateaus at the same loss at lr 0.5). Adapting `lm_head` too
removes the bound: on the long-tail task the reward rises from 0.17 to 0.34 in 5 iterations at lr 0.01. Full
fine-tuning trains the head itself, so it never had the problem.
"""

from __future__ import annotations

from typing import Any

FULL_FINETUNE_LR = 3e-3
LORA_LR = 1e-2
# every linear layer of Llama/Qwen/Mistral-style models and the output head (names another architecture lacks are a
# 422 naming them); both engines serve adapters on the head (vLLM through its LogitsProcessorWithLoRA:
# tests/engines/test_lora_engines.py::test_vllm_serves_each_version_as_a_lora_request)
LORA_TARGETS = "q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj, lm_head"

FORM_DEFAULTS: dict[str, dict[str, dict[str, Any]]] = {  # choice -> form field -> {value, why}
    "full": {
        "training.lr": {
            "value": FULL_FINETUNE_LR,
            "why": f"Full fine-tuning default {FULL_FINETUNE_LR:g}: right for small models, high for large ones.",
        },
    },
    "lora": {
        "training.lr": {
            "value": LORA_LR,
            "why": (f"LoRA default {LORA_LR:g}: only the small adapters train, so they take a larger step than full "
                    f"fine-tuning ({FULL_FINETUNE_LR:g})."),
        },
        "training.lora.target_modules": {
            "value": LORA_TARGETS,
            "why": ("every linear layer and the output head: without lm_head a freshly built model (like the demo's) "
                    "cannot sharpen its outputs and the reward stays flat."),
        },
        "training.lora.rank": {"value": 16, "why": "RL's updates are small: a low rank learns them; more adds cost."},
        "training.lora.alpha": {"value": 32, "why": "the update is scaled by alpha / rank (2 here); with alpha kept, "
                                "the learning rate above holds across ranks."},
    },
}


def schema_extra() -> dict[str, Any]:
    """The OpenAPI extension the dashboard's generator reads (frontend/scripts/gen-choices.mjs)."""
    return {"x-form-defaults": FORM_DEFAULTS}
