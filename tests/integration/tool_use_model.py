"""A locally built chat model warmed on tool use, for the agent-learning test (test_agent_code_job.py).

`tiny-1m` (Llama, the character tokenizer: digits are single tokens, so copying operands into a call is learnable by
a 1M-parameter model) with a compact chat template that takes `tools` and names them in one line:

    S: Use calc. [calc]⏎Q: Ann has 34 pens and gets 58 more.⏎A: <tool_call>{...}</tool_call><eos>⏎R: 92⏎A: 92<eos>⏎

It is SFT'd on the OpenAI Agents SDK agent's two calls (test_agent_code_job.py `LEARNING_AGENT`) as the rollout
gateway records them: the first call's prompt is the template's rendering tokenised (no BOS), the next call's the
previous prompt + the sampled ids (the call's text and `<eos>`) + the rest of the rendering (workers/runtime/gateway.py
`_continued`), so each problem is one sequence, the whole conversation rendered, with loss on the assistant's turns.

Warmed only partly: on a share `TOOL_SHARE` of the problems the model calls `calc` with the problem's expression and
then answers with the tool's result; on the rest it answers the number at once (two-digit sums and differences that
a 1M model, barely trained on them, gets wrong); then `DIRECT_STEPS` steps on answering at once lower its tool use
without touching the copying. Measured on 100 held-out problems at temperature 1 (the gateway's two-call flow,
locally): share 0.6, 800 steps: calls the tool on 0.54, always with the right expression, right 0.54 (share 0.4:
calls on 0.37 but copies the operands on 0.02; 0.3 and 400 steps: 0.19 / 0.01: too few calls to learn copying from);
+ 12 direct steps: calls on 0.37, right 0.37 (P(first character is the call's `<`) 0.59 -> 0.29). So the held-out
reward starts near a third, and RL that reinforces calling the tool raises it.

`warm_tool_model()` builds it once per machine under `<tmp>/streamrl-tool-model/<key>` (the key names every setting,
so a change rebuilds), with a file lock, like bench/distill.py keeps its teacher: about 5.5 CPU-minutes on one
thread (400 s wall on a loaded 2-core host); the SFT runs on one thread, so every host builds the same model.
"""

from __future__ import annotations

import fcntl
import json
import random
import shutil
import tempfile
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
PRESET, SEED, OPERANDS = "tiny-1m", 0, (10, 99)
TOOL_SHARE, SFT_PROBLEMS, SFT_STEPS, SFT_BATCH, SFT_LR = 0.6, 2000, 800, 32, 3e-3
# then a few steps on answering at once (the first turn only): fewer tool calls, the copying learnt intact
DIRECT_STEPS, DIRECT_BATCH, DIRECT_LR = 12, 16, 1e-4
CACHE = Path(tempfile.gettempdir()) / "streamrl-tool-model"


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


def conversation(row: dict[str, Any], use_tool: bool) -> list[dict[str, Any]]:
    """The SDK agent's messages (system, user) and the assistant turns a warmed model gives."""
    opening = [{"role": "system", "content": INSTRUCTIONS}, {"role": "user", "content": row["prompt"]}]
    if not use_tool:
        return [*opening, {"role": "assistant", "content": row["answer"]}]
    return [*opening, {"role": "assistant", "content": call_text(row["expression"])},
            {"role": "tool", "content": row["answer"]}, {"role": "assistant", "content": row["answer"]}]


def encode_conversation(tokenizer: Any, messages: list[dict[str, Any]]) -> tuple[list[int], list[int]]:
    """(ids, loss mask): the conversation's rendering tokenised as the gateway tokenises it, mask 1 on each assistant
    turn's content and its `<eos>` (the sampled ids), 0 on the rest."""
    ids: list[int] = []
    mask: list[int] = []
    for index, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        before = tokenizer.apply_chat_template(messages[:index], tools=TOOLS, tokenize=False,
                                               add_generation_prompt=True)
        context = tokenizer(before, add_special_tokens=False)["input_ids"][len(ids):]
        sampled = [*tokenizer(message["content"], add_special_tokens=False)["input_ids"], tokenizer.eos_token_id]
        ids += [*context, *sampled]
        mask += [0] * len(context) + [1] * len(sampled)
    return ids, mask


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


def warm_tool_model(cache: Path = CACHE, tool_share: float = TOOL_SHARE, steps: int = SFT_STEPS,
                    lr: float = SFT_LR, n: int = SFT_PROBLEMS) -> Path:
    """The warmed model's directory (built on the first call on this machine, then reused)."""
    from transformers import AutoTokenizer

    from workers.models import build_tiny_model

    key = (f"{PRESET}-s{SEED}-share{tool_share}-n{n}-steps{steps}-b{SFT_BATCH}-lr{lr}"
           f"-ops{OPERANDS[0]}-{OPERANDS[1]}-direct{DIRECT_STEPS}-{DIRECT_LR}-v1")
    final = cache / key
    if (final / "config.json").exists():
        return final
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / f".{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build per machine; concurrent callers wait and reuse it
        if (final / "config.json").exists():
            return final
        with tempfile.TemporaryDirectory(dir=cache) as tmp:
            model_dir = build_tiny_model(PRESET, Path(tmp) / "model", seed=SEED)
            tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
            tokenizer.chat_template = TEMPLATE
            tokenizer.save_pretrained(model_dir)
            rng = random.Random(SEED)
            examples = [encode_conversation(tokenizer, conversation(row, rng.random() < tool_share))
                        for row in problems(n, seed=SEED)]
            sft(model_dir, examples, steps=steps, batch=SFT_BATCH, lr=lr, seed=SEED)
            direct = [encode_conversation(tokenizer, conversation(row, False)) for row in problems(n, seed=SEED)]
            sft(model_dir, direct, steps=DIRECT_STEPS, batch=DIRECT_BATCH, lr=DIRECT_LR, seed=SEED)
            shutil.move(str(model_dir), str(final))  # complete before it is visible under its key
    return final
