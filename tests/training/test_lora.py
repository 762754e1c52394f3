"""LoRA training (peft): only the adapter trains and is shipped; the reference is the base model with the adapter
disabled; checkpoints hold the adapter, its AdamW state and the merged model; 2 FSDP2 ranks equal 1 rank."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from peft import PeftModel
from test_distributed import assert_same, make_spec_kl, run_iterations, run_ranks
from transformers import AutoModelForCausalLM

from workers.models import lora
from workers.training.trainer import Trainer, load_policy

torch.set_num_threads(1)
LORA = {"rank": 4, "alpha": 8.0, "target_modules": None}


def test_only_the_adapter_trains_and_is_shipped(tiny_model_dir: Path) -> None:
    trainer = Trainer(tiny_model_dir, make_spec_kl(lora=LORA))
    base = load_policy(tiny_model_dir, torch.device("cpu")).state_dict()
    held = {id(p) for group in trainer.optimizer.param_groups for p in group["params"]}
    trainable = [name for name, p in trainer.model.named_parameters() if id(p) in held]
    assert trainable and all(".lora_" in name for name in trainable)
    # every linear layer of each block is adapted (all-linear), never the output head or the embeddings
    assert {name.split(".")[-4] for name in trainable} == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                                           "up_proj", "down_proj"}
    assert trainer.reference is None  # no second copy of the weights
    steps = run_iterations(trainer, 3)
    assert steps[-1]["kl"] > 0  # the adapter moved the policy away from the base model
    shipped = trainer.state_dict_for_sync()
    assert lora.is_adapter(shipped)
    full_bytes = sum(t.numel() * t.element_size() for t in base.values())
    assert sum(t.numel() * t.element_size() for t in shipped.values()) < 0.1 * full_bytes
    assert any(float(t.abs().max()) > 0 for name, t in shipped.items() if ".lora_B." in name)  # B left zero
    # the base weights did not move
    merged_base = lora.merge_state({k: v for k, v in trainer.model.state_dict().items()}, trainer.lora)
    frozen = trainer.model.get_base_model().model.embed_tokens.weight
    assert torch.equal(frozen, base["model.embed_tokens.weight"]) and merged_base.keys() == base.keys()


def test_checkpoint_holds_adapter_and_merged_model_and_resumes(tiny_model_dir: Path, tmp_path: Path) -> None:
    straight = Trainer(tiny_model_dir, make_spec_kl(lora=LORA))
    straight_steps = run_iterations(straight, 3)
    first = Trainer(tiny_model_dir, make_spec_kl(lora=LORA))
    run_iterations(first, 2)
    path = first.save_checkpoint(tmp_path / "iter_000002")
    assert (path / lora.ADAPTER_DIR / lora.ADAPTER_WEIGHTS).is_file()
    # the merged model (transformers) and base + adapter (peft) compute the same logits as the trainer's policy
    ids = torch.tensor([[1, 5, 9, 12, 30, 7]])
    with torch.no_grad():
        ours = first.model(input_ids=ids).logits
        merged = AutoModelForCausalLM.from_pretrained(path)(input_ids=ids).logits
        peft = PeftModel.from_pretrained(load_policy(tiny_model_dir, torch.device("cpu")), path / lora.ADAPTER_DIR)
        adapted = peft(input_ids=ids).logits
    assert float((merged - ours).abs().max()) < 1e-4 and float((adapted - ours).abs().max()) < 1e-5
    resumed = Trainer(tiny_model_dir, make_spec_kl(lora=LORA))
    assert resumed.load_checkpoint(path) == 2
    assert_same(run_iterations(resumed, 1), straight_steps[2:])  # AdamW state of the adapter came back too
    ours_sd, want = resumed.state_dict_for_sync(), straight.state_dict_for_sync()
    assert max(float((ours_sd[k] - want[k]).abs().max()) for k in want) < 1e-6


def test_unknown_target_module_is_named(tiny_model_dir: Path) -> None:
    with pytest.raises(ValueError, match="target_modules"):
        Trainer(tiny_model_dir, make_spec_kl(lora={"rank": 2, "target_modules": ["no_such_proj"]}))


def test_two_ranks_train_the_adapter_like_one(tiny_model_dir: Path, tmp_path: Path) -> None:
    single = Trainer(tiny_model_dir, make_spec_kl(lora=LORA))
    single_steps = run_iterations(single, 2)
    exported = tmp_path / "exported"
    ranks = run_ranks(2, tiny_model_dir, {"iterations": 2, "lora": LORA, "export": str(exported),
                                           "save": str(tmp_path / "iter_000002")}, tmp_path)
    assert_same(ranks["steps"], single_steps)
    want = single.state_dict_for_sync()
    assert ranks["weights"].keys() == want.keys() and lora.is_adapter(want)
    assert max(float((ranks["weights"][k] - want[k]).abs().max()) for k in want) < 1e-5
    assert (exported / lora.ADAPTER_DIR / lora.ADAPTER_WEIGHTS).is_file()
    # a 2-rank LoRA checkpoint resumes on one rank
    resumed = Trainer(tiny_model_dir, make_spec_kl(lora=LORA))
    assert resumed.load_checkpoint(tmp_path / "iter_000002") == 2
    got = resumed.state_dict_for_sync()
    assert max(float((got[k] - want[k]).abs().max()) for k in want) < 1e-5


def test_lora_on_a_bpe_chat_model(tmp_path: Path) -> None:
    """A Qwen2 model (biased q/k/v, grouped-query attention) with a BPE tokenizer: the checkpoint's merged model and
    adapter compute the trainer's logits, and the hf engine with the adapter generates what the merged model does."""
    from contract.spec import LoraSpec
    from workers.generation.engine import GenerationRequest, SamplingParams
    from workers.generation.engines.hf import HFEngine
    from workers.models import build_tiny_model

    model_dir = build_tiny_model("chat-qwen2-1m", tmp_path / "chat", seed=0)
    trainer = Trainer(model_dir, make_spec_kl(lora=LORA))
    run_iterations(trainer, 2)
    path = trainer.save_checkpoint(tmp_path / "iter_000002")
    ids = trainer.tokenizer("What is 12 + 35?", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        ours = trainer.model(input_ids=ids).logits
        merged = AutoModelForCausalLM.from_pretrained(path)(input_ids=ids).logits
        peft = PeftModel.from_pretrained(load_policy(model_dir, torch.device("cpu")), path / lora.ADAPTER_DIR)
        adapted = peft(input_ids=ids).logits
    assert float((merged - ours).abs().max()) < 1e-4 and float((adapted - ours).abs().max()) < 1e-5
    engine = HFEngine(model_dir, max_batch_size=2, lora=LoraSpec(**LORA))
    engine.update_weights(2, path / lora.ADAPTER_DIR)
    greedy = SamplingParams(temperature=0, max_tokens=10)
    requests = [GenerationRequest(str(i), engine.encode(text), greedy) for i, text in enumerate(["hi", "12 + 35 ="])]
    served = {r.request_id: r.response_ids for r in engine.generate_stream(requests)}
    assert served == {r.request_id: r.response_ids for r in HFEngine(path, max_batch_size=2).generate_stream(requests)}


def test_an_adapter_on_the_output_head_ships_and_checkpoints_as_an_adapter(tiny_model_dir: Path,
                                                                             tmp_path: Path) -> None:
    """The form's LoRA default adapts lm_head too (contract/form_defaults.py); peft would then add the whole head to
    the adapter's state ("auto" embedding saving), which the engines' adapter loading refuses."""
    head = {"rank": 4, "alpha": 8.0, "target_modules": ["q_proj", "v_proj", "lm_head"]}
    trainer = Trainer(tiny_model_dir, make_spec_kl(lora=head))
    run_iterations(trainer, 2)
    shipped = trainer.state_dict_for_sync()
    assert lora.is_adapter(shipped) and any(name.startswith("base_model.model.lm_head.lora_") for name in shipped)
    path = trainer.save_checkpoint(tmp_path / "iter_000002")
    ids = torch.tensor([[1, 5, 9, 12, 30, 7]])
    with torch.no_grad():
        ours = trainer.model(input_ids=ids).logits
        peft = PeftModel.from_pretrained(load_policy(tiny_model_dir, torch.device("cpu")), path / lora.ADAPTER_DIR)
        assert float((peft(input_ids=ids).logits - ours).abs().max()) < 1e-5
