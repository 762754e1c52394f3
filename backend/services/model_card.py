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


def _loads(raw: str | bytes, name: str) -> Any:
    """JSON of a model file; nesting deeper than Python's recursion limit is refused, not a RecursionError."""
    try:
        return json.loads(raw)
    except RecursionError:
        raise ModelInvalid(f"{name} is nested too deeply to be a model file") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelInvalid(f"{name} is not valid JSON ({exc.__class__.__name__}: {exc})") from None


def _read_json(path: Path) -> Any:
    try:
        raw = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ModelInvalid(f"{path.name} is not valid JSON ({exc.__class__.__name__}: {exc})") from None
    return _loads(raw, path.name)


def _count(value: Any, where: str, *, minimum: int = 0) -> int:
    """A JSON integer >= `minimum` (not a bool, a float, a string or a list); ModelInvalid naming `where`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ModelInvalid(f"{where} must be an integer >= {minimum}, got {json.dumps(value)[:100]}")
    return value


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
    if not isinstance(config["model_type"], str):
        raise ModelInvalid("config.json `model_type` must be a string")
    _count(config["vocab_size"], "config.json `vocab_size`", minimum=1)
    nested = config.get("text_config")
    if isinstance(nested, dict) and "vocab_size" in nested:
        _count(nested["vocab_size"], "config.json `text_config.vocab_size`", minimum=1)
    return config


def safetensors_header(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as handle:
            (size,) = struct.unpack("<Q", handle.read(8))
            if size > MAX_HEADER_BYTES:
                raise ValueError("header too large")
            raw = handle.read(size)
    except (OSError, struct.error, ValueError) as exc:
        raise ModelInvalid(f"{path.name} is not a valid safetensors file ({exc})") from None
    header = _loads(raw, f"{path.name}'s safetensors header")
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
            shape = info.get("shape", [])
            if not isinstance(shape, list):
                raise ModelInvalid(f"{path.name}: tensor {name[:100]!r} has a shape that is not a list of sizes")
            numel = 1
            for dim in shape:
                numel *= _count(dim, f"{path.name}: tensor {name[:100]!r} shape entry")
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
        try:
            return jinja.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ModelInvalid(f"chat_template.jinja is not readable UTF-8 text ({exc.__class__.__name__})") from None
    config_path = model_dir / "tokenizer_config.json"
    if config_path.is_file():
        template = _read_json(config_path).get("chat_template")
        if isinstance(template, str):
            return template
        if isinstance(template, list):  # named templates: the default one
            named = {t.get("name"): t.get("template") for t in template
                     if isinstance(t, dict) and isinstance(t.get("name"), str) and isinstance(t.get("template"), str)}
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
    context = next((text[k] for k in CONTEXT_KEYS if isinstance(text.get(k), int)
                    and not isinstance(text.get(k), bool) and text[k] > 0), None)
    dtype = weight_dtype or config.get("torch_dtype") or config.get("dtype")
    return {
        "architecture": next(a for a in config["architectures"] if a.endswith(SUPPORTED_HEADS)),
        "model_type": str(config["model_type"]),
        "parameters": params,
        "dtype": dtype[:64] if isinstance(dtype, str) else None,
        "context_length": context,
        "vocab_size": text.get("vocab_size", config["vocab_size"]),  # a positive int (check_config)
        "chat_template": chat_template(model_dir) is not None,
        "disk_bytes": disk_bytes(model_dir),
    }
