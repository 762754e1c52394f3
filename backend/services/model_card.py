"""Validate a Hugging Face model directory and describe it (the model card), without torch or transformers.

A directory is a usable causal LM when it has
- `config.json`: a JSON object whose `architectures` names a `...ForCausalLM` class (Llama, Qwen2/Qwen3, Mistral,
  Gemma, Phi, ...), or a `...ForSequenceClassification` class (a reward model for the `model` grader: its card's
  `architecture` says so, and jobs refuse it as their policy), with `model_type` and `vocab_size`;
- weights: `*.safetensors` (headers must parse) or `pytorch_model*.bin`;
- a tokenizer: `tokenizer.json` (loaded with the `tokenizers` library to prove it parses), or a SentencePiece
  `tokenizer.model`, or `vocab.json` + `merges.txt`.
`inspect_model_dir` returns the card (architecture, parameter count, dtype, context length, vocabulary size, chat
template present, disk size) or raises `ModelInvalid` naming the file and the problem.
"""

from __future__ import annotations

import json
import struct
from collections import Counter
from pathlib import Path
from typing import Any

from backend.services.errors import InvalidInput

MAX_HEADER_BYTES = 100 * 1024 * 1024
SUPPORTED_HEADS = ("ForCausalLM", "ForSequenceClassification")  # a policy or judge; a reward model
CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length", "n_ctx")
SAFETENSORS_DTYPES = {"F32": "float32", "F16": "float16", "BF16": "bfloat16", "F64": "float64", "I8": "int8",
                      "U8": "uint8", "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2"}


class ModelInvalid(InvalidInput):
    def __init__(self, message: str, loc: tuple[str, ...] = ("body",)):
        super().__init__(message, loc=loc)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelInvalid(f"{path.name} is not valid JSON ({exc.__class__.__name__}: {exc})") from None


def check_config(model_dir: Path) -> dict[str, Any]:
    path = model_dir / "config.json"
    if not path.is_file():
        raise ModelInvalid("not a model directory: config.json is missing")
    config = _read_json(path)
    if not isinstance(config, dict):
        raise ModelInvalid("config.json must be a JSON object")
    architectures = config.get("architectures")
    if not isinstance(architectures, list) or not architectures or not all(isinstance(a, str) for a in architectures):
        raise ModelInvalid("config.json has no `architectures` (e.g. [\"LlamaForCausalLM\"]): cannot tell which "
                           "model class loads it")
    if not any(a.endswith(SUPPORTED_HEADS) for a in architectures):
        raise ModelInvalid(f"config.json architectures {architectures} has no causal LM (`...ForCausalLM`) or "
                           f"sequence classifier (`...ForSequenceClassification`)")
    for key in ("model_type", "vocab_size"):
        if key not in config:
            raise ModelInvalid(f"config.json has no `{key}`")
    return config


def safetensors_header(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as handle:
            (size,) = struct.unpack("<Q", handle.read(8))
            if size > MAX_HEADER_BYTES:
                raise ValueError("header too large")
            header = json.loads(handle.read(size))
    except (OSError, struct.error, ValueError) as exc:
        raise ModelInvalid(f"{path.name} is not a valid safetensors file ({exc})") from None
    if not isinstance(header, dict):
        raise ModelInvalid(f"{path.name} is not a valid safetensors file (header is not an object)")
    return header


def weights_summary(model_dir: Path) -> tuple[int | None, str | None]:
    """(parameter count, dominant dtype) from the safetensors headers; (None, None) for .bin weights."""
    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        if any(model_dir.glob("pytorch_model*.bin")):
            return None, None
        raise ModelInvalid("no weights: expected *.safetensors (or pytorch_model*.bin)")
    count, dtypes = 0, Counter[str]()
    for path in files:
        for name, info in safetensors_header(path).items():
            if name == "__metadata__" or not isinstance(info, dict):
                continue
            numel = 1
            for dim in info.get("shape", []):
                numel *= int(dim)
            count += numel
            dtypes[SAFETENSORS_DTYPES.get(str(info.get("dtype")), str(info.get("dtype")).lower())] += numel
    return count, dtypes.most_common(1)[0][0] if dtypes else None


def check_tokenizer(model_dir: Path) -> None:
    if (model_dir / "tokenizer.json").is_file():
        from tokenizers import Tokenizer

        try:
            Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        except Exception as exc:  # the Rust loader raises its own exception type
            raise ModelInvalid(f"tokenizer.json does not load ({exc})") from None
    elif not (model_dir / "tokenizer.model").is_file() and not (
        (model_dir / "vocab.json").is_file() and (model_dir / "merges.txt").is_file()
    ):
        raise ModelInvalid("no tokenizer: expected tokenizer.json, tokenizer.model or vocab.json + merges.txt")
    config_path = model_dir / "tokenizer_config.json"
    if config_path.is_file() and not isinstance(_read_json(config_path), dict):
        raise ModelInvalid("tokenizer_config.json must be a JSON object")


def chat_template(model_dir: Path) -> str | None:
    """The tokenizer's chat template (chat_template.jinja, or `chat_template` in tokenizer_config.json)."""
    jinja = model_dir / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    config_path = model_dir / "tokenizer_config.json"
    if config_path.is_file():
        template = _read_json(config_path).get("chat_template")
        if isinstance(template, str):
            return template
        if isinstance(template, list):  # named templates: the default one
            named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
            return named.get("default") or next(iter(named.values()), None)
    return None


def disk_bytes(model_dir: Path) -> int:
    """Bytes of the model's files (not hidden ones such as a download's `.cache`)."""
    return sum(p.stat().st_size for p in model_dir.rglob("*") if p.is_file() and not p.is_symlink()
               and not any(part.startswith(".") for part in p.relative_to(model_dir).parts))


def inspect_model_dir(model_dir: Path) -> dict[str, Any]:
    """The model card of a valid directory; `ModelInvalid` naming the problem otherwise."""
    config = check_config(model_dir)
    check_tokenizer(model_dir)
    params, weight_dtype = weights_summary(model_dir)
    nested = config.get("text_config")
    text: dict[str, Any] = nested if isinstance(nested, dict) else config
    context = next((int(text[k]) for k in CONTEXT_KEYS if isinstance(text.get(k), int)), None)
    return {
        "architecture": next(a for a in config["architectures"] if a.endswith(SUPPORTED_HEADS)),
        "model_type": str(config["model_type"]),
        "parameters": params,
        "dtype": weight_dtype or config.get("torch_dtype") or config.get("dtype"),
        "context_length": context,
        "vocab_size": int(text.get("vocab_size", config["vocab_size"])),
        "chat_template": chat_template(model_dir) is not None,
        "disk_bytes": disk_bytes(model_dir),
    }
