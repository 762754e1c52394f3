"""`write_minimal_model(path)`: the smallest directory the model registry accepts (config with a causal-LM
architecture, a safetensors file, a tokenizer.json), written without torch, for tests that only register models."""

from __future__ import annotations

import json
import struct
from pathlib import Path


def write_minimal_model(path: Path, *, architecture: str = "LlamaForCausalLM") -> Path:
    from tokenizers import Tokenizer, models

    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps({"architectures": [architecture], "model_type": "llama",
                                                  "vocab_size": 4, "max_position_embeddings": 64}))
    header = json.dumps({"lm_head.weight": {"dtype": "F32", "shape": [4, 1], "data_offsets": [0, 16]}}).encode()
    (path / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + bytes(16))
    Tokenizer(models.WordLevel({"<unk>": 0, "a": 1, "b": 2, "c": 3}, unk_token="<unk>")).save(
        str(path / "tokenizer.json"))
    return path
