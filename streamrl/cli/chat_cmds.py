"""`streamrl chat MODEL MESSAGE`: one chat completion from a registered model or a fine-tuned checkpoint, served on
the generation pool on demand (POST /openai/v1/chat/completions; docs/openai.md#chat-completions-and-models)."""

from __future__ import annotations

import typer

from streamrl.cli.common import client, emit_json


def chat(
    ctx: typer.Context,
    model: str = typer.Argument(..., help="a model name, or a fine-tuned id ft:...(:ckpt-step-N) (`streamrl models "
                                "list`, the fine-tuning job's checkpoints)"),
    message: str = typer.Argument(..., help="the user message"),
    system: str | None = typer.Option(None, "--system", "-s", help="a system message before it"),
    max_tokens: int = typer.Option(256, "--max-tokens", min=1, max=16384),
    temperature: float = typer.Option(1.0, "--temperature", "-t", min=0.0, max=2.0, help="0: greedy"),
    n: int = typer.Option(1, "-n", min=1, max=16, help="completions to sample"),
    seed: int | None = typer.Option(None, "--seed", min=0),
    stop: list[str] | None = typer.Option(None, "--stop", help="a stop string (repeat for several)"),
) -> None:
    """Chat with a model: prints the completion (each of them with -n)."""
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": message}]
    with client(ctx) as api:
        answer = api.chat_completion(model, messages, max_tokens=max_tokens, temperature=temperature, n=n, seed=seed,
                                     stop=list(stop) if stop else None)
    if emit_json(ctx, answer):
        return
    choices = answer.get("choices", [])
    for choice in choices:
        if len(choices) > 1:
            typer.echo(f"--- {choice['index']} ({choice['finish_reason']})")
        typer.echo(choice["message"]["content"])


def register(app: typer.Typer) -> None:
    app.command("chat")(chat)
