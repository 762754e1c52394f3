"""Byte-level BPE tokenizers with chat templates for the `chat-*` presets (no model hub needed).

`build_bpe_tokenizer("llama")` / `("qwen2")` trains a byte-level BPE (the `tokenizers` library) on a small built-in
corpus (the built-in tasks' prompts and answers, chat markup, some English) and wraps it in a
`PreTrainedTokenizerFast` with the family's special tokens and chat template, as the real checkpoints ship them:
- llama: Llama-3 markup (`<|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|>`); `<|begin_of_text|>` is
  added in front of plain text and by the template; EOS `<|eot_id|>`; the generation config stops on both
  `<|eot_id|>` and `<|end_of_text|>`; no pad token (the trainer pads with EOS).
- qwen2: ChatML (`<|im_start|>role\n...<|im_end|>\n`); no BOS; EOS `<|im_end|>`, pad `<|endoftext|>`; the generation
  config stops on both.
Byte-level: every string encodes (no unknown token) and decodes back exactly. Training is deterministic.
"""

from __future__ import annotations

from dataclasses import dataclass

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

from workers.datasets import generate_rows

VOCAB_SIZE = 1024

LLAMA_TEMPLATE = (
    "{{- bos_token }}"
    "{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}"
    "{{- message['content'] | trim + '<|eot_id|>' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"
)
CHATML_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


@dataclass(frozen=True)
class ChatFamily:
    specials: tuple[str, ...]  # ids 0.. in this order
    bos: str | None
    eos: str  # the tokenizer's EOS: what ends an assistant turn
    stop: tuple[str, ...]  # every EOS of the generation config (eos first)
    pad: str | None
    template: str


FAMILIES: dict[str, ChatFamily] = {
    "llama": ChatFamily(
        specials=("<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"),
        bos="<|begin_of_text|>", eos="<|eot_id|>", stop=("<|eot_id|>", "<|end_of_text|>"), pad=None,
        template=LLAMA_TEMPLATE),
    "qwen2": ChatFamily(
        specials=("<|endoftext|>", "<|im_start|>", "<|im_end|>"),
        bos=None, eos="<|im_end|>", stop=("<|im_end|>", "<|endoftext|>"), pad="<|endoftext|>",
        template=CHATML_TEMPLATE),
}

ENGLISH = (
    "You are a helpful assistant. Answer with the result only. What is the sum of these numbers? "
    "The quick brown fox jumps over the lazy dog. Please repeat the pattern as many times as asked. "
    "system user assistant tool Think step by step, then give the final answer. Hello, how are you today? "
    "A model learns from rewards: the higher the reward, the more likely the answer becomes."
)


def corpus() -> list[str]:
    """Deterministic training text: the built-in tasks' rows, chat markup and some English."""
    lines = [ENGLISH] * 20
    for task in ("arithmetic", "long_tail"):
        for row in generate_rows(task, 2000, seed=7):
            lines.append(f"{row['prompt']} {row['answer']}")
    for role in ("system", "user", "assistant"):
        lines += [f"{role}\n\n", f"{role}\n"] * 50
    return lines


def build_bpe_tokenizer(family: str, vocab_size: int = VOCAB_SIZE) -> PreTrainedTokenizerFast:
    if family not in FAMILIES:
        raise ValueError(f"unknown tokenizer family {family!r}; choose one of {sorted(FAMILIES)}")
    spec = FAMILIES[family]
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(spec.specials), show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    core.train_from_iterator(corpus(), trainer=trainer)
    if spec.bos is not None:  # plain text gets BOS in front, as Llama's tokenizer does
        bos_id = core.token_to_id(spec.bos)
        core.post_processor = processors.TemplateProcessing(
            single=f"{spec.bos} $A", pair=f"{spec.bos} $A {spec.bos} $B", special_tokens=[(spec.bos, bos_id)])
    else:
        core.post_processor = processors.ByteLevel(trim_offsets=False)
    return PreTrainedTokenizerFast(
        tokenizer_object=core, bos_token=spec.bos, eos_token=spec.eos, pad_token=spec.pad,
        additional_special_tokens=[t for t in spec.specials if t not in (spec.bos, spec.eos, spec.pad)],
        chat_template=spec.template, padding_side="left", clean_up_tokenization_spaces=False, model_max_length=2048,
    )


def stop_token_ids(tokenizer: PreTrainedTokenizerFast, family: str) -> list[int]:
    """The generation config's EOS ids (the tokenizer's EOS first)."""
    return [int(tokenizer.convert_tokens_to_ids(t)) for t in FAMILIES[family].stop]  # type: ignore[arg-type]
