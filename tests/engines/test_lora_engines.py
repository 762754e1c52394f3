"""LoRA in the engines: hf and vLLM serve base + adapter (tensors or a PEFT directory) without reloading the base
model, and generate greedily what the merged model generates."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from contract.form_defaults import LORA_TARGETS
from contract.spec import JobSpec, LoraSpec
from workers.generation.engine import GenerationRequest, SamplingParams
from workers.generation.engines import setup_engine
from workers.generation.engines.hf import HFEngine
from workers.models import lora
from workers.training.trainer import Trainer, load_policy

from .conftest import random_adapter

SPEC = LoraSpec(rank=8, alpha=16.0)
# the submit form's LoRA targets: every linear layer and the output head (vLLM's LogitsProcessorWithLoRA adapts it)
FORM_SPEC = LoraSpec(rank=8, alpha=16.0, target_modules=LORA_TARGETS.split(", "))
PROMPTS = ["12+35=", "rep 3 ab:", "x", "7*8="]



def merged_dir(model_dir: Path, adapter: dict[str, torch.Tensor], out: Path, spec: LoraSpec = SPEC) -> Path:
    wrapped = lora.wrap(load_policy(model_dir, torch.device("cpu")), spec)
    lora.load_adapter(wrapped, adapter)
    shutil.copytree(model_dir, out)
    save_file({k: v.contiguous() for k, v in lora.merge_state(wrapped.state_dict(), spec).items()},
              str(out / "model.safetensors"), metadata={"format": "pt"})
    return out


def greedy(engine, hf: HFEngine) -> dict[str, list[int]]:
    requests = [GenerationRequest(str(i), hf.encode(p), SamplingParams(temperature=0, max_tokens=16))
                for i, p in enumerate(PROMPTS)]
    return {r.request_id: r.response_ids for r in engine.generate_stream(requests)}


def test_hf_engine_applies_adapters_in_place(model_dir: Path, tmp_path: Path) -> None:
    base = HFEngine(model_dir, max_batch_size=4)
    engine = HFEngine(model_dir, max_batch_size=4, lora=SPEC)
    assert greedy(engine, base) == greedy(base, base)  # B = 0 until a version arrives: the base model
    embed = engine.model.get_input_embeddings().weight
    first, second = random_adapter(model_dir, 1), random_adapter(model_dir, 2)
    engine.load_tensors(1, first)  # over a collective transport (p2p)
    want = greedy(HFEngine(merged_dir(model_dir, first, tmp_path / "m1"), max_batch_size=4), base)
    assert greedy(engine, base) == want != greedy(base, base)
    lora.write_adapter(tmp_path / "v2", second, lora.adapter_config_json(SPEC, second))
    engine.update_weights(2, tmp_path / "v2")  # a shared-store version directory
    assert engine.version == 2 and engine.model.get_input_embeddings().weight is embed  # the base stayed
    assert greedy(engine, base) == greedy(HFEngine(merged_dir(model_dir, second, tmp_path / "m2"), max_batch_size=4),
                                          base)
    with pytest.raises(ValueError, match="not a LoRA adapter"):
        engine.load_tensors(3, load_policy(model_dir, torch.device("cpu")).state_dict())


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm is not installed")
def test_vllm_serves_each_version_as_a_lora_request(model_dir: Path, tmp_path: Path) -> None:
    """With the form's targets, the output head included (peft's default, no head: test_vllm_multi_lora.py)."""
    base = HFEngine(model_dir, max_batch_size=4)
    engine = setup_engine("vllm", model_dir=model_dir, max_batch_size=4, max_model_len=256, lora=FORM_SPEC)
    assert greedy(engine, base) == greedy(base, base)  # no adapter yet: the base model
    first, second = random_adapter(model_dir, 1, FORM_SPEC), random_adapter(model_dir, 2, FORM_SPEC)
    assert any(".lm_head.lora_B." in name for name in first)
    lora.write_adapter(tmp_path / "v1", first, lora.adapter_config_json(FORM_SPEC, first))
    engine.update_weights(1, tmp_path / "v1")
    assert engine.adapter.lora_int_id == 2
    want = greedy(HFEngine(merged_dir(model_dir, first, tmp_path / "m1", FORM_SPEC), max_batch_size=4), base)
    assert greedy(engine, base) == want != greedy(base, base)
    # the head's part counts: the merged model without it generates otherwise
    headless = {name: torch.zeros_like(t) if ".lm_head.lora_B." in name else t for name, t in first.items()}
    assert greedy(HFEngine(merged_dir(model_dir, headless, tmp_path / "m0", FORM_SPEC), max_batch_size=4), base) != want
    engine.load_tensors(2, second)  # p2p: tensors, written to a directory vLLM reads
    assert engine.version == 2 and engine.adapter.lora_int_id == 3
    assert greedy(engine, base) == greedy(
        HFEngine(merged_dir(model_dir, second, tmp_path / "m2", FORM_SPEC), max_batch_size=4), base)


@pytest.mark.parametrize("stacked", [False, True], ids=["per-adapter", "stacked"])
def test_one_shared_engine_batches_several_adapters_as_each_alone(model_dir: Path, tmp_path: Path,
                                                                  stacked: bool) -> None:
    """Multi-LoRA serving: requests of two adapters (and the base model) share each forward pass, and each row
    generates exactly what a private engine with its own adapter generates, whichever way the engine adds the
    adapters (one low-rank product per adapter, or all stacked); versions and loads are per adapter."""
    from workers.generation.engines.hf_multi_lora import MultiLoraEngine

    base = HFEngine(model_dir, max_batch_size=4)
    first, second = random_adapter(model_dir, 1), random_adapter(model_dir, 2)
    alone = {}
    for name, adapter in (("a", first), ("b", second)):
        private = HFEngine(model_dir, max_batch_size=4, lora=SPEC)
        private.load_tensors(1, adapter)
        alone[name] = greedy(private, base)
    assert alone["a"] != alone["b"]

    # its base mapped from the host's shared copy (the file a LoRA trainer of this base maps): same tokens
    shared = MultiLoraEngine(model_dir, max_batch_size=12, base_cache=tmp_path / "base", stacked=stacked)
    spec = JobSpec.model_validate({"model": str(model_dir), "dataset": {"builtin": "arithmetic"},
                                   "training": {"lora": {"rank": 8}}})
    trainer = Trainer(model_dir, spec, base_cache=tmp_path / "base")
    assert shared.mapped_base is not None and trainer.mapped_base is not None
    assert shared.mapped_base.path == trainer.mapped_base.path and not trainer.mapped_base.written
    view_a, view_b = shared.attach("a", SPEC), shared.attach("b", SPEC)
    view_a.load_tensors(3, first)
    lora.write_adapter(tmp_path / "v5", second, lora.adapter_config_json(SPEC, second))
    view_b.update_weights(5, tmp_path / "v5")
    assert (view_a.version, view_b.version) == (3, 5)
    requests = [GenerationRequest(f"{name}/{i}", base.encode(p), SamplingParams(temperature=0, max_tokens=16),
                                  adapter=adapter)
                for i, p in enumerate(PROMPTS) for name, adapter in (("a", "a"), ("b", "b"), ("base", None))]
    results = list(shared.generate_stream(requests))
    got = {r.request_id: r.response_ids for r in results}
    for name in ("a", "b"):
        assert {str(i): got[f"{name}/{i}"] for i in range(len(PROMPTS))} == alone[name]
    assert {str(i): got[f"base/{i}"] for i in range(len(PROMPTS))} == greedy(base, base)
    view_a.load_tensors(6, second)  # swapped: the next mixed pass must use the new weights (stacks rebuilt)
    view_b.load_tensors(7, first)
    swapped = {r.request_id: r.response_ids for r in shared.generate_stream(requests)}
    assert {str(i): swapped[f"a/{i}"] for i in range(len(PROMPTS))} == alone["b"]
    assert {str(i): swapped[f"b/{i}"] for i in range(len(PROMPTS))} == alone["a"]
    view_a.load_tensors(3, first)
    view_b.load_tensors(5, second)
    for name in ("a", "b", "a"):  # batches of one adapter (the plain forward with that adapter active), in turn
        only = [r for r in requests if r.request_id.startswith(f"{name}/")]
        got = {r.request_id.split("/")[1]: r.response_ids for r in shared.generate_stream(only)}
        assert got == alone[name], name
    marks = {r.request_id.split("/")[0]: r.version_marks for r in results}
    assert (marks["a"], marks["b"], marks["base"]) == ([[0, 3]], [[0, 5]], [[0, 0]])
    with pytest.raises(ValueError, match="not a LoRA adapter"):
        view_a.load_tensors(4, load_policy(model_dir, torch.device("cpu")).state_dict())
    shared.detach("a")
    assert view_a.version == 0 and list(shared.generate_stream(requests[1:2]))[0].response_ids == \
        alone["b"]["0"]
    # a row still naming the detached adapter runs on the base model beside the other adapter's rows
    late = {r.request_id: r.response_ids for r in shared.generate_stream(requests[:2])}
    assert (late["a/0"], late["b/0"]) == (greedy(base, base)["0"], alone["b"]["0"])
