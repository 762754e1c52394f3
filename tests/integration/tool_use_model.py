"""A locally built chat model warmed on tool use, for the agent-learning test (test_agent_code_job.py).

`tiny-1m`'s Llama shape with its own small BPE tokenizer (the `tokenizers` library), trained on the rendered
conversations below: digits stay single tokens (copying operands into a call is learnable by a 1M-parameter model),
the rest of each line merges into a few tokens (the call's opening `<tool_call>{"name":"calc",...:"` is one), so a
conversation is ~20 tokens instead of ~130 characters. A compact chat template takes `tools` and names them in one
line:

    S: Use calc. [calc]⏎Q: Ann has 34 pens and gets 58 more.⏎A: <tool_call>{...}</tool_call><eos>⏎R: 92⏎A: 92<eos>⏎

It is SFT'd on the OpenAI Agents SDK agent's two calls (test_agent_code_job.py `LEARNING_AGENT`) as the rollout
gateway records them: the first call's prompt is the template's rendering tokenised (no BOS), the next call's the
previous prompt + the sampled ids (the call's text and `<eos>`) + the rest of the rendering (workers/runtime/gateway.py
`_continued`), so each problem is one sequence, the whole conversation rendered, with loss on the assistant's turns.

Warmed only partly: on a share `TOOL_SHARE` of the problems the model calls `calc` with the problem's expression and
then answers with the tool's result; on the rest it answers the number at once (two-digit sums and differences that
a 1M model, barely trained on them, gets wrong); then `DIRECT_STEPS` steps on answering at once lower its tool use
without touching the copying. A share `MISCOPIED` of the tool conversations call another problem's expression, that
call untrained and the answer its result: without them the answer after the tool's result was worked out from the
problem, not copied (right 0.09 with right calls 0.39). Measured on 128 held-out problems at temperature 1 (the
gateway's two-call flow, locally): calls the tool on 0.28, with the right expression on 0.27, answers right 0.27,
right at once 0.00 (12 direct steps: 0.41, 0.40, 0.40). Cheaper settings failed: 400 steps (right 0.03: the result
not copied), 600 steps with half the tool conversations miscopied (right calls 0.02), batch 16 (right 0.02). So the
held-out reward starts low (0.3-0.4 in the job: its own sampling) and RL that reinforces calling the tool raises it.

`warm_tool_model(out)` builds it in `out` (the test's temporary directory: no cache across test sessions, so a fresh
CI machine's cost is the one measured): 70 CPU-seconds in a process of its own, imports included (the character
tokenizer's ~130-character conversations took ~330). The SFT runs on one thread, so every host builds the same model.
"""

from __future__ import annotations

import functools
import json
import random
from pathlib import Path
from typing import Any

INSTRUCTIONS = "Use calc."
TOOL = "calc"
TOOLS = [{"type": "function", "function": {
    "name": TOOL, "description": "Evaluate an arithmetic expression such as 12+3.",
    "parameters": {"type": "object", "properties": {"expression": {"title": "Expression", "type": "string"}},
                   "required": ["expression"], "additionalProperties": False}}}]
TEMPLATES = (  # (word problem, expression): the operator follows from the wording
    ("Ann has {a} pens and gets {b} more.", "{a}+{b}"),
    ("Ann has {a} pens and loses {b}.", "{a}-{b}"),
)
# one line per message; `tools` named in the system line (the gateway passes tools to a template that mentions them)
TEMPLATE = (
    "{%- for m in messages -%}"
    "{%- if m['role'] == 'system' -%}{{ 'S: ' + m['content'] }}"
    "{%- if tools %}{{ ' [' + (tools | map(attribute='function') | map(attribute='name') | join(',')) + ']' }}"
    "{%- endif %}{{ '\\n' }}"
    "{%- elif m['role'] == 'user' -%}{{ 'Q: ' + m['content'] + '\\n' }}"
    "{%- elif m['role'] == 'assistant' -%}{{ 'A: ' + (m['content'] or '') + '<eos>\\n' }}"
    "{%- else -%}{{ 'R: ' + (m['content'] or '') + '\\n' }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt %}{{ 'A: ' }}{%- endif %}"
)
PRESET, SEED, OPERANDS, VOCAB = "tiny-1m", 0, (10, 99), 200
MISCOPIED = 0.3  # of the tool conversations: the call's expression another problem's, untrained (`conversation`)
TOOL_SHARE, SFT_PROBLEMS, SFT_STEPS, SFT_BATCH, SFT_LR = 0.6, 2000, 800, 32, 3e-3
# then a few steps on answering at once (the first turn only): fewer tool calls, the copying learnt intact
DIRECT_STEPS, DIRECT_BATCH, DIRECT_LR = 24, 16, 1e-4


def word_problem(rng: random.Random) -> dict[str, Any]:
    """{"prompt", "answer", "expression"}: operands in OPERANDS, a difference never negative."""
    template, expression = rng.choice(TEMPLATES)
    a, b = rng.randint(*OPERANDS), rng.randint(*OPERANDS)
    if "-" in expression and b > a:
        a, b = b, a
    text = expression.format(a=a, b=b)
    return {"prompt": template.format(a=a, b=b), "answer": str(eval(text)), "expression": text}  # noqa: S307


def problems(n: int, seed: int, exclude: frozenset[str] = frozenset()) -> list[dict[str, Any]]:
    """`n` distinct problems (none of whose prompts is in `exclude`), the same for the same arguments."""
    rng, seen = random.Random(f"word-problems:{seed}"), set(exclude)
    out: list[dict[str, Any]] = []
    while len(out) < n:
        row = word_problem(rng)
        if row["prompt"] not in seen:
            seen.add(row["prompt"])
            out.append(row)
    return out


def held_out_split(train: int, held: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(training rows, held-out rows): the held-out prompts are none of the SFT problems nor the training rows."""
    seen = frozenset(r["prompt"] for r in problems(SFT_PROBLEMS, seed=SEED))
    rows = problems(train + held, seed=SEED + 1, exclude=seen)
    return rows[:train], rows[train:]


def call_text(expression: str) -> str:
    """The policy's tool call, as the gateway parses it (workers/core/episode.py `parse_tool_calls`)."""
    return "<tool_call>" + json.dumps({"name": TOOL, "arguments": {"expression": expression}},
                                      separators=(",", ":")) + "</tool_call>"


def conversation(row: dict[str, Any], use_tool: bool, called: str | None = None) -> list[dict[str, Any]]:
    """The SDK agent's messages (system, user) and the assistant turns a warmed model gives. `called`: the call has
    this expression instead of the problem's (a miscopied call, not trained: `"trained": False`), and the answer is
    its result, which teaches the answer to copy the tool's result rather than to work the sum out again."""
    opening = [{"role": "system", "content": INSTRUCTIONS}, {"role": "user", "content": row["prompt"]}]
    if not use_tool:
        return [*opening, {"role": "assistant", "content": row["answer"]}]
    expression = called or row["expression"]
    result = str(eval(expression))  # noqa: S307 - our own arithmetic
    return [*opening, {"role": "assistant", "content": call_text(expression), "trained": called is None},
            {"role": "tool", "content": result}, {"role": "assistant", "content": result}]


def render(messages: list[dict[str, Any]], generation_prompt: bool) -> str:
    """`TEMPLATE`'s rendering with `TOOLS`, as `apply_chat_template` makes it (the same sandboxed Jinja settings;
    `warm_tool_model` checks they agree), without its per-call overhead (~1.5 ms a rendering)."""
    return str(_compiled().render(messages=messages, tools=TOOLS, add_generation_prompt=generation_prompt))


@functools.cache
def _compiled() -> Any:
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    return ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True).from_string(TEMPLATE)


def segments(messages: list[dict[str, Any]]) -> list[tuple[str, bool, bool]]:
    """(text, sampled, trained) in order, each tokenised on its own as the gateway does: the first call's prompt,
    then per assistant turn its content (sampled, followed by `<eos>`) and the rendering up to the next call's
    generation prompt (after the `<eos>`: workers/runtime/gateway.py `_continued`)."""
    out: list[tuple[str, bool, bool]] = []
    covered = ""
    for index, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        before = render(messages[:index], generation_prompt=True)
        assert before.startswith(covered), (before, covered)
        out += [(before[len(covered):], False, False), (message["content"], True, message.get("trained", True))]
        covered = before + message["content"] + "<eos>"
    return out


def encode_conversation(tokenizer: Any, messages: list[dict[str, Any]]) -> tuple[list[int], list[int]]:
    """(ids, loss mask): the conversation tokenised as the gateway records it, mask 1 on each assistant turn's
    content and its `<eos>` (the sampled ids) unless it is marked untrained, 0 on the rest."""
    ids: list[int] = []
    mask: list[int] = []
    for text, sampled, trained in segments(messages):
        piece = [*tokenizer(text, add_special_tokens=False)["input_ids"], *([tokenizer.eos_token_id] * sampled)]
        ids += piece
        mask += [int(trained)] * len(piece)
    return ids, mask


def tokenizer_corpus(n: int) -> list[str]:
    """The text the tokenizer is trained on: every piece of every SFT conversation (both ways, with the tool and
    without), as the gateway tokenises them."""
    return [text for row in problems(n, seed=SEED) for use_tool in (True, False)
            for text, _, _ in segments(conversation(row, use_tool))]


def build_tokenizer(texts: list[str], vocab_size: int = VOCAB) -> Any:
    """BPE over printable ASCII (no unknown character in the SDK's text), the character tokenizer's specials at ids
    0..3 (pad, bos, eos, unk) so `tiny_config`'s ids hold; digits split apart before merging."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    from workers.models.tokenizer import BOS, CHARS, EOS, PAD, SPECIAL_TOKENS, UNK

    core = Tokenizer(models.BPE(unk_token=UNK))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"\d"), behavior="isolated")  # each digit a word of its own
    core.decoder = decoders.Fuse()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=list(CHARS), show_progress=False)
    core.train_from_iterator(texts, trainer=trainer)
    core.post_processor = processors.TemplateProcessing(single=f"{BOS} $A", pair=f"{BOS} $A $B",
                                                        special_tokens=[(BOS, core.token_to_id(BOS))])
    return PreTrainedTokenizerFast(tokenizer_object=core, bos_token=BOS, eos_token=EOS, pad_token=PAD, unk_token=UNK,
                                   chat_template=TEMPLATE, padding_side="left", clean_up_tokenization_spaces=False,
                                   model_max_length=1024)


def build_model(out: Path, tokenizer: Any) -> Path:
    """`PRESET`'s shape (random, seeded) with the tokenizer's vocabulary, saved with it in `out`."""
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig

    from workers.models.tiny import tiny_config

    config = tiny_config(PRESET)
    config.vocab_size = len(tokenizer)
    assert (tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id) == (
        config.pad_token_id, config.bos_token_id, config.eos_token_id)
    torch.manual_seed(SEED)
    model: Any = AutoModelForCausalLM.from_config(config)
    model.generation_config = GenerationConfig(bos_token_id=config.bos_token_id, eos_token_id=config.eos_token_id,
                                               pad_token_id=config.pad_token_id)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return out


def sft(model_dir: Path, examples: list[tuple[list[int], list[int]]], *, steps: int, batch: int, lr: float,
        seed: int) -> None:
    """Cross-entropy on the masked tokens, AdamW with a linear decay; saves the model in place."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread: the same model on every host (as measured), and no contention
    try:
        _sft(model_dir, examples, steps=steps, batch=batch, lr=lr, seed=seed)
    finally:
        torch.set_num_threads(threads)


def _sft(model_dir: Path, examples: list[tuple[list[int], list[int]]], *, steps: int, batch: int, lr: float,
         seed: int) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    rng = random.Random(seed)
    model: Any = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: max(0.05, 1.0 - step / steps))
    for _ in range(steps):
        chosen = rng.sample(examples, batch)
        width = max(len(ids) for ids, _ in chosen)
        input_ids = torch.zeros((batch, width), dtype=torch.long)
        labels = torch.full((batch, width), -100, dtype=torch.long)
        attention = torch.zeros((batch, width), dtype=torch.long)
        for row, (ids, mask) in enumerate(chosen):
            input_ids[row, :len(ids)] = torch.tensor(ids)
            attention[row, :len(ids)] = 1
            labels[row, :len(ids)] = torch.tensor([t if m else -100 for t, m in zip(ids, mask, strict=True)])
        loss = model(input_ids=input_ids, attention_mask=attention, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad()
    model.save_pretrained(model_dir, safe_serialization=True)


def warm_tool_model(out: Path, *, tool_share: float = TOOL_SHARE, steps: int = SFT_STEPS, lr: float = SFT_LR,
                    n: int = SFT_PROBLEMS, direct_steps: int = DIRECT_STEPS, miscopied: float = MISCOPIED) -> Path:
    """Build the warmed model in `out` (created) and return it (about a CPU-minute on one thread, every time)."""
    tokenizer = build_tokenizer(tokenizer_corpus(n))
    build_model(out, tokenizer)
    sample = conversation(problems(1, seed=SEED)[0], use_tool=True)
    assert render(sample, False) == tokenizer.apply_chat_template(sample, tools=TOOLS, tokenize=False)
    rng = random.Random(SEED)
    rows = problems(n, seed=SEED)
    examples = []
    for row in rows:
        use_tool, called = rng.random() < tool_share, word_problem(rng)["expression"]
        examples.append(encode_conversation(tokenizer, conversation(
            row, use_tool, called if use_tool and rng.random() < miscopied else None)))
    sft(out, examples, steps=steps, batch=SFT_BATCH, lr=lr, seed=SEED)
    if direct_steps:
        direct = [encode_conversation(tokenizer, conversation(row, False)) for row in rows]
        sft(out, direct, steps=direct_steps, batch=DIRECT_BATCH, lr=DIRECT_LR, seed=SEED)
    return out
