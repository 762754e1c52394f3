"""`chat-*` presets: real BPE tokenizers with chat templates on Llama and Qwen2 configs; chat prompts rendered with
the model's template (workers/core/chat.py); generation stops on every EOS id of the generation config and records
max_tokens truncation."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoConfig, AutoTokenizer, GenerationConfig

from contract.spec import JobSpec
from models.chat_support import CHAT, zero_head
from streamrl.cli.make_cmds import PRESET_NAMES
from workers.core import make_requests, rollout, sampling_params
from workers.core.chat import ChatEncoder
from workers.generation.engine import GenerationRequest, SamplingParams
from workers.generation.engines.hf import HFEngine
from workers.models import PRESETS, build_tiny_model
from workers.rewards import build_reward
from workers.training.trainer import Trainer

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def chat_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("chat")
    return {family: build_tiny_model(f"chat-{family}-1m", root / family, seed=0) for family in ("llama", "qwen2")}


def test_make_model_offers_only_real_presets() -> None:
    assert set(PRESET_NAMES) <= set(PRESETS)


@pytest.mark.parametrize("family, architecture, markup", [("llama", "LlamaForCausalLM", "<|start_header_id|>"),
                                                          ("qwen2", "Qwen2ForCausalLM", "<|im_start|>")])
def test_chat_presets_are_real_hf_checkpoints(chat_models: dict[str, Path], family: str, architecture: str,
                                              markup: str) -> None:
    path = chat_models[family]
    config = AutoConfig.from_pretrained(path, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    generation = GenerationConfig.from_pretrained(path)
    assert config.architectures == [architecture] and config.vocab_size == len(tokenizer) == 1024
    assert isinstance(generation.eos_token_id, list) and len(generation.eos_token_id) == 2
    assert generation.eos_token_id[0] == tokenizer.eos_token_id
    text = "rep 3 ab: ababab, 12+35=47 and héllo wörld ✓"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert len(ids) < len(text.encode()) and tokenizer.decode(ids) == text  # merges, byte-level round trip
    rendered = tokenizer.apply_chat_template(CHAT, tokenize=False, add_generation_prompt=True)
    assert markup in rendered and "Be brief." in rendered and rendered.rstrip().endswith("assistant" if
                                                                                            family == "qwen2" else
                                                                                            "<|end_header_id|>")


def test_chat_encoder_renders_with_the_template_and_the_spec_system_prompt(chat_models: dict[str, Path]) -> None:
    tokenizer = AutoTokenizer.from_pretrained(chat_models["llama"])
    encode = ChatEncoder(tokenizer, system_prompt="You add numbers.")
    text, ids = encode.chat([CHAT[1]])
    assert text.startswith("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou add numbers.")
    templated = tokenizer.apply_chat_template([{"role": "system", "content": "You add numbers."}, CHAT[1]],
                                              tokenize=True, add_generation_prompt=True)
    assert ids == list(templated["input_ids"] if hasattr(templated, "keys") else templated)
    assert ids.count(tokenizer.bos_token_id) == 1  # the template's BOS, not a second one
    assert encode.chat(CHAT)[0].count("system") == 1  # the row's own system turn wins
    assert encode("1+1=")[0] == tokenizer.bos_token_id  # plain text as before
    rows = [{"prompt": CHAT, "prompt_id": "a", "answer": "47"}, {"prompt": "7*8=", "prompt_id": "b", "answer": "56"}]
    groups = make_requests(rows, 0, group_size=2, encode=encode, job_seed=0, min_version=0)
    assert groups[0][0].prompt_text.endswith("<|start_header_id|>assistant<|end_header_id|>\n\n")
    assert groups[0][0].prompt_ids == encode.chat(CHAT)[1] and groups[1][0].prompt_text == "7*8="
    assert groups[0][0].meta == {"prompt_id": "a", "answer": "47"}
    with pytest.raises(ValueError, match="needs the model's chat template"):
        make_requests(rows, 0, group_size=1, encode=lambda t: [1], job_seed=0, min_version=0)


def test_hf_engine_stops_on_every_generation_config_eos(chat_models: dict[str, Path], tmp_path: Path) -> None:
    path = zero_head(chat_models["qwen2"], tmp_path / "zero")
    tokenizer = AutoTokenizer.from_pretrained(path)
    assert tokenizer.eos_token_id != 0 == tokenizer.convert_tokens_to_ids("<|endoftext|>")
    engine = HFEngine(path, max_batch_size=2)
    prompt = ChatEncoder(tokenizer).chat(CHAT)[1]
    [result] = engine.generate_stream([GenerationRequest("a", prompt, SamplingParams(temperature=0, max_tokens=8))])
    assert (result.response_ids, result.finish_reason) == ([0], "stop")


def test_chat_rollout_records_truncation_and_trains(chat_models: dict[str, Path]) -> None:
    """A random chat model rarely stops within 3 tokens: its samples are truncated, and the trainer takes them."""
    path = chat_models["qwen2"]
    spec = JobSpec.model_validate({"model": str(path), "dataset": {"builtin": "arithmetic"},
                                   "reward": {"type": "regex", "params": {"pattern": "[0-9]"}},
                                   "generation": {"max_tokens": 3}, "algorithm": {"group_size": 2}})
    trainer = Trainer(path, spec)
    encode = ChatEncoder(trainer.tokenizer, system_prompt="Add.")
    rows = [{"prompt": [CHAT[1]], "prompt_id": "p", "answer": "47"}]
    requests = [r for g in make_requests(rows, 0, group_size=2, encode=encode, job_seed=0, min_version=0) for r in g]
    samples = rollout(HFEngine(path, max_batch_size=2), build_reward(spec.reward), requests,
                      sampling_params(spec.generation), job_id=0, instance_id="local")
    assert all(s.truncated == (s.finish_reason == "length") for s in samples)
    assert any(s.truncated for s in samples) and samples[0].prompt_text.startswith("<|im_start|>system\nAdd.")
    assert trainer.micro_step(samples)["ratio"] == pytest.approx(1.0, abs=1e-4)


def test_recorder_keeps_truncation_beside_the_lengths() -> None:
    from contract.reporter import MemoryReporter
    from contract.sample import Sample
    from contract.spec_operations import TelemetrySpec
    from workers.runtime.recorder import IterationRecorder

    def sample(i: int, reason: str) -> Sample:
        return Sample(job_id=1, prompt_id="p", group_id="0:0", sample_id=f"0:0:{i}", policy_version=0,
                      prompt_ids=[1], response_ids=[5] * (i + 1), behaviour_logprobs=[-1.0] * (i + 1),
                      finish_reason=reason, truncated=reason == "length")

    reporter = MemoryReporter()
    row = IterationRecorder(1, "trainer", reporter, TelemetrySpec()).finish(
        0, [sample(0, "stop"), sample(1, "length"), sample(2, "length"), sample(3, "stop")], {}, {})
    assert row["lengths"] == [1, 2, 3, 4] and row["lengths_truncated"] == [0, 1, 1, 0]
    assert row["truncated_fraction"] == 0.5
    assert [s["truncated"] for s in reporter.samples[1]] == [False, True, True, False]
