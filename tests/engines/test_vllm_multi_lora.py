"""`VLLMMultiLoraEngine`: one vLLM engine batches the rows of several adapters, and each row generates exactly what a
private engine with its own adapter (hf, the reference on CPU) generates; versions, loads and detaches are per
adapter; what cannot be served is refused with a ValueError naming it.

Needs vLLM (scripts/install_vllm.sh installs the CPU build); skipped with the reason when it is not importable.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from contract.spec import LoraSpec
from workers.generation.engine import GenerationRequest, SamplingParams
from workers.generation.engines.hf import HFEngine
from workers.models import lora
from workers.training.trainer import load_policy

from .conftest import VLLM_ONLY, random_adapter

pytestmark = VLLM_ONLY

SPEC = LoraSpec(rank=8, alpha=16.0)
PROMPTS = ["12+35=", "rep 3 ab:", "x", "7*8="]
GREEDY = SamplingParams(temperature=0, max_tokens=16)



@pytest.fixture(scope="module")
def adapters(model_dir: Path) -> dict[str, dict[str, torch.Tensor]]:
    return {name: random_adapter(model_dir, seed) for seed, name in enumerate(("first", "second", "third"), 1)}


@pytest.fixture(scope="module")
def hf(model_dir: Path) -> HFEngine:
    return HFEngine(model_dir, max_batch_size=4)


@pytest.fixture(scope="module")
def alone(model_dir: Path, hf: HFEngine, adapters: dict[str, dict[str, torch.Tensor]]) -> dict[str, list[list[int]]]:
    """Each prompt's greedy tokens on a private hf engine with each adapter ("base": none)."""
    found = {"base": greedy(hf, hf)}
    for name, adapter in adapters.items():
        private = HFEngine(model_dir, max_batch_size=4, lora=SPEC)
        private.load_tensors(1, adapter)
        found[name] = greedy(private, hf)
    assert len({str(tokens) for tokens in found.values()}) == len(found)  # every adapter changes the outputs
    return found


@pytest.fixture(scope="module")
def engine(model_dir: Path) -> Iterator[Any]:
    from workers.generation.engines.vllm_multi_lora import VLLMMultiLoraEngine

    engine = VLLMMultiLoraEngine(model_dir, max_batch_size=8, max_loras=3, max_lora_rank=8, max_model_len=256)
    yield engine
    del engine


@pytest.fixture(autouse=True)
def detach_all(engine: Any) -> Iterator[None]:
    yield
    for name in list(engine.versions):
        engine.detach(name)


def greedy(engine: Any, hf: HFEngine, adapter: str | None = None) -> list[list[int]]:
    requests = [GenerationRequest(str(i), hf.encode(p), GREEDY, adapter=adapter) for i, p in enumerate(PROMPTS)]
    got = {r.request_id: r.response_ids for r in engine.generate_stream(requests)}
    return [got[str(i)] for i in range(len(PROMPTS))]


def mixed(engine: Any, hf: HFEngine, names: tuple[str | None, ...]) -> dict[str | None, list[list[int]]]:
    """One stream of every prompt on every adapter in `names`, interleaved; each adapter's rows in prompt order."""
    requests = [GenerationRequest(f"{name}/{i}", hf.encode(p), GREEDY, adapter=name)
                for i, p in enumerate(PROMPTS) for name in names]
    got = {r.request_id: r.response_ids for r in engine.generate_stream(requests)}
    assert len(got) == len(requests)
    return {name: [got[f"{name}/{i}"] for i in range(len(PROMPTS))] for name in names}


def test_mixed_batch_rows_generate_as_private_engines(engine: Any, hf: HFEngine, alone: dict[str, Any],
                                                      adapters: dict[str, Any], tmp_path: Path) -> None:
    view_a, view_b, view_c = engine.attach("a", SPEC), engine.attach("b", SPEC), engine.attach("c", SPEC)
    view_a.load_tensors(1, adapters["first"])  # over a collective transport (p2p)
    lora.write_adapter(tmp_path / "v4", adapters["second"], lora.adapter_config_json(SPEC, adapters["second"]))
    view_b.update_weights(4, tmp_path / "v4")  # a shared-store version directory
    assert engine.versions == {"a": 1, "b": 4, "c": 0} and (view_a.version, view_b.version, view_c.version) == (1, 4, 0)
    assert view_a.records_versions is False and view_a.tokenizer is not None and view_a.model_dir == engine.model_dir
    got = mixed(engine, hf, ("a", "b", "c", None))
    assert got["a"] == alone["first"] and got["b"] == alone["second"]
    assert got["c"] == got[None] == alone["base"]  # attached, no version yet: the base model; no adapter: the same
    assert engine.current["a"].lora_int_id != engine.current["b"].lora_int_id and "c" not in engine.current


def test_new_version_changes_only_its_adapter(engine: Any, hf: HFEngine, alone: dict[str, Any],
                                              adapters: dict[str, Any]) -> None:
    """A version loaded between admissions (as the instance loop does) applies to requests admitted after it; the
    rows admitted before finish on theirs, whose directory stays until they do."""
    view_a, view_b = engine.attach("a", SPEC), engine.attach("b", SPEC)
    view_a.load_tensors(1, adapters["first"])
    view_b.load_tensors(1, adapters["second"])
    first_id = engine.current["a"].lora_int_id
    first_dir = Path(engine.current["a"].lora_path)
    prompt = hf.encode(PROMPTS[0])

    def feed() -> Iterator[GenerationRequest]:
        yield GenerationRequest("a/old", prompt, GREEDY, adapter="a")
        view_a.load_tensors(2, adapters["third"])
        view_a.load_tensors(3, adapters["third"])  # v1 is no longer among a's newest two, but a row still uses it
        assert first_dir.exists()
        yield GenerationRequest("a/new", prompt, GREEDY, adapter="a")
        yield GenerationRequest("b/0", prompt, GREEDY, adapter="b")

    got = {r.request_id: r.response_ids for r in engine.generate_stream(feed())}
    assert got == {"a/old": alone["first"][0], "a/new": alone["third"][0], "b/0": alone["second"][0]}
    assert not first_dir.exists() and first_id not in engine._held  # gone once its row finished
    assert engine.versions == {"a": 3, "b": 1} and view_a.version == 3
    assert mixed(engine, hf, ("b", "a")) == {"a": alone["third"], "b": alone["second"]}

    a_dirs = [Path(held.name) for owner, held in engine._held.values() if owner == "a"]
    assert len(a_dirs) == 2 and all(path.exists() for path in a_dirs)
    ids_so_far = max(engine._held)
    engine.detach("a")
    assert engine.versions == {"b": 1} and not any(path.exists() for path in a_dirs)
    view_a = engine.attach("a", SPEC)  # the same name again: a new adapter, at version 0
    assert view_a.version == 0 and greedy(engine, hf, "a") == alone["base"]
    view_a.load_tensors(1, adapters["first"])
    assert engine.current["a"].lora_int_id > ids_so_far  # LoRA ids are never reused
    assert mixed(engine, hf, ("a", "b")) == {"a": alone["first"], "b": alone["second"]}


def test_refusals_name_the_problem(engine: Any, hf: HFEngine, model_dir: Path, alone: dict[str, Any],
                                   adapters: dict[str, Any]) -> None:
    view = engine.attach("a", SPEC)
    with pytest.raises(ValueError, match="'a' is already attached"):
        engine.attach("a", SPEC)
    with pytest.raises(ValueError, match="rank 16, above this engine's max_lora_rank 8"):
        engine.attach("big", LoraSpec(rank=16, alpha=32.0))
    with pytest.raises(ValueError, match="not a LoRA adapter"):
        view.load_tensors(1, load_policy(model_dir, torch.device("cpu")).state_dict())
    with pytest.raises(ValueError, match=r"rank \[4\], but adapter 'a' was attached with rank 8"):
        view.load_tensors(1, random_adapter(model_dir, 4, LoraSpec(rank=4, alpha=8.0)))
    with pytest.raises(ValueError, match="loads weights per adapter"):
        engine.load_tensors(1, adapters["first"])
    assert engine.versions == {"a": 0} and not engine._held  # nothing of the refused loads stayed
    engine.attach("b", SPEC), engine.attach("c", SPEC)
    with pytest.raises(ValueError, match="3 adapters are attached, this engine's max_loras is 3"):
        engine.attach("d", SPEC)
    view.load_tensors(1, adapters["first"])
    requests = [GenerationRequest("ok", hf.encode(PROMPTS[0]), GREEDY, adapter="a"),
                GenerationRequest("bad", hf.encode(PROMPTS[0]), GREEDY, adapter="nobody")]
    with pytest.raises(ValueError, match="'nobody', which is not attached"):
        list(engine.generate_stream(requests))
    assert not engine._rows  # the admitted row was aborted with the stream
    assert greedy(engine, hf, "a") == alone["first"]  # and the engine goes on serving
