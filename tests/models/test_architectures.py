"""Any causal LM that `AutoModelForCausalLM` loads, not only the Llama/Qwen2 presets: tiny Mistral, Qwen3, Gemma,
Phi-3 and Phi checkpoints (byte-level BPE tokenizer with a chat template, built here) pass registration's validation
with a card, roll out with the hf engine on a chat prompt, train a LoRA adapter over all their linear layers, and
export an adapter (peft loads it) and a merged model (transformers loads it) that generate greedily what the engine
serving the adapter generates."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from peft import PeftModel
from transformers import (
    AutoModelForCausalLM,
    GemmaConfig,
    GenerationConfig,
    MistralConfig,
    Phi3Config,
    PhiConfig,
    PretrainedConfig,
    Qwen3Config,
)

from backend.services.model_card import inspect_model_dir
from contract.spec import JobSpec
from models.chat_support import CHAT
from workers.core import make_requests, rollout, sampling_params
from workers.core.chat import ChatEncoder
from workers.generation.engine import GenerationRequest, SamplingParams
from workers.generation.engines.hf import HFEngine
from workers.models import lora
from workers.models.bpe import build_bpe_tokenizer, stop_token_ids
from workers.rewards import build_reward
from workers.training.trainer import Trainer, load_policy

torch.set_num_threads(1)
SIZES = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
             max_position_embeddings=512)
# architecture -> (tokenizer family, config factory, the block's linear layers LoRA must adapt)
ARCHITECTURES: dict[str, tuple[str, Callable[..., PretrainedConfig], set[str]]] = {
    "MistralForCausalLM": ("llama", lambda **kw: MistralConfig(sliding_window=None, head_dim=32, **kw),
                           {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}),
    "Qwen3ForCausalLM": ("qwen2", lambda **kw: Qwen3Config(head_dim=32, tie_word_embeddings=False, **kw),
                         {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}),
    "GemmaForCausalLM": ("llama", lambda **kw: GemmaConfig(head_dim=32, **kw),  # tied embeddings
                         {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}),
    "Phi3ForCausalLM": ("llama", lambda **kw: Phi3Config(**kw), {"qkv_proj", "o_proj", "gate_up_proj", "down_proj"}),
    "PhiForCausalLM": ("qwen2", lambda **kw: PhiConfig(**kw), {"q_proj", "k_proj", "v_proj", "dense", "fc1", "fc2"}),
}
LORA = {"rank": 4, "alpha": 8.0}


def build_checkpoint(architecture: str, out: Path) -> Path:
    """A randomly initialised checkpoint of `architecture` in Hugging Face layout, as a team would bring one."""
    family, make_config, _ = ARCHITECTURES[architecture]
    tokenizer = build_bpe_tokenizer(family)
    eos = stop_token_ids(tokenizer, family)
    config = make_config(vocab_size=len(tokenizer), bos_token_id=tokenizer.bos_token_id, eos_token_id=eos[0],
                         pad_token_id=tokenizer.pad_token_id, **SIZES)
    torch.manual_seed(0)
    model: Any = AutoModelForCausalLM.from_config(config)
    model.generation_config = GenerationConfig(bos_token_id=config.bos_token_id, eos_token_id=eos,
                                               pad_token_id=config.pad_token_id)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return out


def greedy(engine: HFEngine, prompts: list[list[int]]) -> list[list[int]]:
    requests = [GenerationRequest(str(i), ids, SamplingParams(temperature=0, max_tokens=12))
                for i, ids in enumerate(prompts)]
    done = {r.request_id: r.response_ids for r in engine.generate_stream(requests)}
    return [done[str(i)] for i in range(len(prompts))]


@pytest.mark.parametrize("architecture", sorted(ARCHITECTURES))
def test_a_checkpoint_of_any_causal_lm_registers_trains_with_lora_and_exports(architecture: str,
                                                                              tmp_path: Path) -> None:
    path = build_checkpoint(architecture, tmp_path / "model")
    card = inspect_model_dir(path)
    assert card["architecture"] == architecture and card["chat_template"] and card["vocab_size"] == 1024

    spec = JobSpec.model_validate({"model": str(path), "dataset": {"builtin": "arithmetic"},
                                   "reward": {"type": "regex", "params": {"pattern": "[0-9]"}},
                                   "generation": {"max_tokens": 6}, "algorithm": {"group_size": 2},
                                   "training": {"lr": 5e-2, "lora": LORA}})
    trainer = Trainer(path, spec)
    adapted = {name.split(".")[-4] for name, p in trainer.model.named_parameters() if p.requires_grad}
    assert adapted == ARCHITECTURES[architecture][2]  # every linear layer of the blocks, never the output head

    encode = ChatEncoder(trainer.tokenizer, system_prompt="Add.")
    rows = [{"prompt": CHAT[1:], "prompt_id": "p", "answer": "47"}]
    requests = [r for g in make_requests(rows, 0, group_size=2, encode=encode, job_seed=0, min_version=0) for r in g]
    engine = HFEngine(path, max_batch_size=2, lora=spec.training.lora)
    samples = rollout(engine, build_reward(spec.reward), requests, sampling_params(spec.generation), job_id=0,
                      instance_id="local")
    assert len(samples) == 2 and all(s.response_ids for s in samples)
    for sample, reward in zip(samples, (1.0, 0.0), strict=True):
        sample.reward = reward  # a group with signal: the step must move the adapter
    trainer.micro_step(samples)
    metrics = trainer.optimizer_step()
    assert torch.isfinite(torch.tensor(metrics["loss"]))

    adapter = trainer.state_dict_for_sync()
    assert lora.is_adapter(adapter) and any(float(t.abs().max()) > 0 for k, t in adapter.items() if "lora_B" in k)
    engine.load_tensors(1, adapter)  # the engine serves the new version without reloading the base model
    prompts = [encode.chat(CHAT)[1], trainer.tokenizer.encode("12+35=")]
    served = greedy(engine, prompts)

    exported = trainer.export_weights(tmp_path / "export")
    assert greedy(HFEngine(exported, max_batch_size=2), prompts) == served  # the merged model, transformers layout
    peft = PeftModel.from_pretrained(load_policy(path, torch.device("cpu")), exported / lora.ADAPTER_DIR)
    ids = torch.tensor([prompts[0]])
    with torch.no_grad():
        want = AutoModelForCausalLM.from_pretrained(exported)(input_ids=ids).logits
        assert float((peft(input_ids=ids).logits - want).abs().max()) < 1e-4  # base + adapter (peft) = merged
