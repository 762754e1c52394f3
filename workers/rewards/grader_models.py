"""`LocalGraderModels`: the backend of the model-backed graders (contract/rewards/model_graders.py) in a worker
process. Each model is loaded on first use with transformers on this process's device and kept for the life of the
process (one copy per (directory, kind, device), shared by every reward built here), then scored in batches:
- classify: `AutoModelForSequenceClassification`, right-padded batches, the logit of label 0;
- chat: `AutoModelForCausalLM`, the conversation rendered with the model's chat template (generation prompt added),
  left-padded batches, greedy decoding, the reply decoded without special tokens.
A model that cannot be loaded, or a name the job did not resolve, is a ValueError: each sample that needed it is a
reward error naming why (the controller fails the job on the error rate), not a crashed instance.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer

_LOADED: dict[tuple[str, str, str], tuple[Any, Any]] = {}  # (directory, kind, device) -> (tokenizer, model)
_LOCK = threading.Lock()


def _load(directory: Path, kind: str, device: str) -> tuple[Any, Any]:
    key = (str(directory), kind, device)
    with _LOCK:
        if key not in _LOADED:
            tokenizer = AutoTokenizer.from_pretrained(str(directory))
            if tokenizer.pad_token is None:
                tokenizer.pad_token = tokenizer.eos_token
            dtype = "auto" if device.startswith("cuda") else torch.float32
            cls: Any = AutoModelForSequenceClassification if kind == "classifier" else AutoModelForCausalLM
            model = cls.from_pretrained(str(directory), torch_dtype=dtype).to(device).eval()
            if kind == "classifier":
                model.config.pad_token_id = tokenizer.pad_token_id  # finds each row's last token
                tokenizer.padding_side, tokenizer.truncation_side = "right", "left"  # keep the response's end
            else:
                tokenizer.padding_side = "left"  # generation continues every row from its last token
                if not getattr(tokenizer, "chat_template", None):
                    raise ValueError("its tokenizer has no chat template")
            _LOADED[key] = (tokenizer, model)
        return _LOADED[key]


class LocalGraderModels:
    """GraderModels over `dirs` (registered name -> model directory, as the control plane resolved them)."""

    def __init__(self, dirs: Mapping[str, str | Path], device: str = "cpu"):
        self.dirs = {name: Path(path) for name, path in dirs.items()}
        self.device = device

    def _model(self, name: str, kind: str) -> tuple[Any, Any]:
        if name not in self.dirs:
            raise ValueError(f"model {name!r} is not among this job's resolved grader models")
        try:
            return _load(self.dirs[name], kind, self.device)
        except (OSError, ValueError, RuntimeError, KeyError) as exc:
            what = "sequence-classification" if kind == "classifier" else "chat"
            raise ValueError(f"model {name!r} could not be loaded as a {what} model: {exc}") from None

    @torch.no_grad()
    def classify(self, model: str, texts: Sequence[str], *, max_length: int, batch_size: int) -> list[float]:
        tokenizer, net = self._model(model, "classifier")
        out: list[float] = []
        for start in range(0, len(texts), batch_size):
            batch = tokenizer(list(texts[start:start + batch_size]), padding=True, truncation=True,
                              max_length=max_length, return_tensors="pt").to(self.device)
            out += net(**batch).logits[:, 0].float().tolist()
        return out

    @torch.no_grad()
    def chat(self, model: str, conversations: Sequence[list[dict[str, str]]], *, max_tokens: int,
             batch_size: int) -> list[str]:
        tokenizer, net = self._model(model, "chat")
        texts = [tokenizer.apply_chat_template(c, tokenize=False, add_generation_prompt=True) for c in conversations]
        out: list[str] = []
        for start in range(0, len(texts), batch_size):
            batch = tokenizer(texts[start:start + batch_size], padding=True, add_special_tokens=False,
                              return_tensors="pt").to(self.device)
            generated = net.generate(**batch, do_sample=False, max_new_tokens=max_tokens, temperature=None,
                                     top_p=None, top_k=None, pad_token_id=tokenizer.pad_token_id)
            replies = generated[:, batch["input_ids"].shape[1]:]
            out += [str(text) for text in tokenizer.batch_decode(replies, skip_special_tokens=True)]
        return out
