"""A Tinker training script, unchanged but for `base_url` and `api_key`, on the real platform: the `tinker` SDK
(0.38) creates a LoRA training client on the team's tiny BPE chat model through a live API server; the controller
admits it as a job and a real training worker (tests/integration/runtime_platform.py) serves it (docs/tinker.md).
Sampling clients sample on on-demand inference instances of a real generation worker; a GRPO loop written only
against the SDK raises its reward."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
import tinker
from sqlalchemy import select
from tinker import types
from tinker_client import QUESTION, api_key, distillation_teacher, sft_batch, sharpened
from waiting import api_in_thread, wait_until

from backend.db.models import Checkpoint, Iteration, Job, Model
from backend.services.tinker_checkpoints import sweep_expired

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def sharp_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return sharpened(tmp_path_factory.mktemp("tinker-sharp") / "qwen")


@pytest.fixture(scope="module")
def base_url(platform: Any, sharp_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from workers.models import build_tiny_model

    model_dir: Path = build_tiny_model("chat-qwen2-1m", tmp_path_factory.mktemp("tinker-chat") / "qwen", seed=0)
    with platform.backend.session() as session:
        session.add(Model(team_id=platform.team.id, name="chat-tiny", path=str(model_dir),
                          created_by_id=platform.user.id))
        session.add(Model(team_id=platform.team.id, name="chat-sharp", path=str(sharp_dir),
                          created_by_id=platform.user.id))
    with api_in_thread(platform.backend.settings) as url:
        yield f"{url}/tinker"


def test_a_tinker_script_trains_saves_and_resumes(platform: Any, base_url: str) -> None:
    key = api_key(platform.backend, platform.team.id, platform.user.id)
    service = tinker.ServiceClient(base_url=base_url, api_key=key)  # the two lines a user changes
    assert "chat-tiny" in [m.model_name for m in service.create_rest_client().get_server_capabilities().result()
                           .supported_models]
    trainer = service.create_lora_training_client(base_model="chat-tiny", rank=4, seed=0).result(timeout=120)
    info = trainer.get_info()
    assert info.model_data.model_name == "chat-tiny" and info.lora_rank == 4
    assert trainer.get_tokenizer().encode("hi")  # tokenizer_id: the model's directory, loaded offline

    batch, losses = sft_batch(), []
    for _ in range(4):
        fwd = trainer.forward_backward(batch, "cross_entropy")
        step = trainer.optim_step(types.AdamParams(learning_rate=5e-2))
        result = fwd.result(timeout=60)
        step.result(timeout=60)
        losses.append(result.metrics["loss:sum"])
        assert [len(out["logprobs"].tolist()) for out in result.loss_fn_outputs] == [5, 5, 5]
    assert losses[-1] < losses[0], losses

    logprobs = [out["logprobs"].tolist() for out in trainer.forward(batch, "cross_entropy").result(timeout=60)
                .loss_fn_outputs]
    rl = [types.Datum(model_input=d.model_input, loss_fn_inputs={
        "target_tokens": d.loss_fn_inputs["target_tokens"], "logprobs": lp, "advantages": [1.0] * len(lp)})
        for d, lp in zip(batch, logprobs, strict=True)]
    is_out = trainer.forward_backward(rl, "importance_sampling").result(timeout=60)
    assert is_out.metrics["loss:sum"] == pytest.approx(-15.0, rel=1e-3)  # ratio 1 on the same weights: -sum(A)

    def neg_ll(logprobs: Any, weights: Any) -> Any:  # a custom loss: the SDK runs it client-side (docs/tinker.md)
        loss = -(logprobs * weights).sum()
        return loss, {"custom/neg_ll:sum": loss}

    handle = service.create_custom_loss(neg_ll, input_ranks={"logprobs": 1, "weights": 1}).result(timeout=60)
    custom = trainer.forward_backward_custom(batch, handle).result(timeout=60)  # same weights: the forward's CE
    assert custom.metrics["loss:sum"] == pytest.approx(-sum(map(sum, logprobs)), rel=1e-4), custom.metrics
    trainer.optim_step(types.AdamParams(learning_rate=1e-2)).result(timeout=60)

    saved = trainer.save_state("after-5").result(timeout=60)
    sampler = trainer.save_weights_for_sampler("sampler-5").result(timeout=60)
    assert saved.path.endswith("/weights/after-5") and sampler.path.endswith("/sampler_weights/sampler-5")
    expected = trainer.forward(batch, "cross_entropy").result(timeout=60).metrics["loss:sum"]

    resumed = service.create_training_client_from_state_with_optimizer(saved.path).result(timeout=120)
    again = resumed.forward(batch, "cross_entropy").result(timeout=60).metrics["loss:sum"]
    assert again == pytest.approx(expected, rel=1e-5)

    rest = service.create_rest_client()
    assert {c.checkpoint_type for c in rest.list_checkpoints(trainer.model_id).result().checkpoints} == \
        {"training", "sampler"}
    assert trainer.model_id in [r.training_run_id for r in rest.list_training_runs().result().training_runs]

    with platform.backend.session() as session:  # a platform job: its steps are iterations, its saves checkpoints
        job = session.scalar(select(Job).where(Job.name == trainer.model_id))
        assert job is not None and "tinker" in job.tags and job.status == "running"
        steps = session.scalars(select(Iteration).where(Iteration.job_id == job.id)).all()
        assert len(steps) == 5 and all(row.metrics["loss"] is not None for row in steps)
        assert session.scalars(select(Checkpoint).where(Checkpoint.job_id == job.id)).all()  # step 5's save
        job_id = job.id
    other = platform.backend.make_team(max_concurrent_jobs=1, max_generation_instances=1)
    other_user = platform.backend.make_user(other)

    stranger = tinker.ServiceClient(base_url=base_url, api_key=api_key(platform.backend, other.id, other_user.id))
    with pytest.raises(tinker.NotFoundError):
        stranger.create_rest_client().get_training_run(trainer.model_id).result()
    with pytest.raises(tinker.NotFoundError):
        stranger.create_rest_client().list_checkpoints(trainer.model_id).result()
    _check_checkpoint_settings(platform, base_url, trainer, service, stranger, saved.path, sampler.path)
    _check_policy_losses(trainer, batch)
    with pytest.raises(Exception, match="not supported by this server: loss_fn 'stable_reinforce'"):
        trainer.forward_backward(batch, "stable_reinforce").result(timeout=60)

    stranger.close("success").result()
    service.close("success").result()  # the sessions end and free their training slots
    platform.wait_status(job_id, {"succeeded"}, timeout_s=30)


def _check_checkpoint_settings(platform: Any, base_url: str, trainer: Any, service: Any, stranger: Any,
                               saved: str, sampler: str) -> None:
    """user_metadata kept and listed; ttl_seconds enforced (gone from lists, 404, deleted by the controller's
    sweep); publish: loadable by the team's other keys only; delete."""
    rest = service.create_rest_client()

    def listed() -> dict[str, Any]:
        return {c.tinker_path: c for c in rest.list_checkpoints(trainer.model_id).result().checkpoints}

    short = trainer.save_state("short", ttl_seconds=3, user_metadata={"note": "brief"}).result(timeout=60).path
    entry = listed()[short]
    assert entry.user_metadata == {"note": "brief"} and entry.expires_at is not None
    assert listed()[saved].expires_at is None and listed()[saved].public is False
    assert rest.get_weights_info_by_tinker_path(short).result().base_model == "chat-tiny"
    wait_until(lambda: short not in listed(), timeout_s=30, what="the expired checkpoint to leave the list")
    with pytest.raises(tinker.NotFoundError):
        rest.get_weights_info_by_tinker_path(short).result()
    directory = Path(platform.backend.settings.artifacts) / "tinker" / str(platform.team.id)
    assert [p for p in directory.glob("*/weights/short") if p.is_dir()]  # expired, not yet swept
    assert any(p.name == "short" for p in sweep_expired(platform.backend.settings.artifacts))  # the controller's
    assert not [p for p in directory.glob("*/weights/short*")]

    mate = tinker.ServiceClient(base_url=base_url, api_key=api_key(platform.backend, platform.team.id,
                                                                platform.backend.make_user(platform.team).id))
    mate_rest = mate.create_rest_client()
    with pytest.raises(tinker.NotFoundError):  # unpublished: the run's own key only
        mate_rest.get_weights_info_by_tinker_path(sampler).result()
    rest.publish_checkpoint_from_tinker_path(sampler).result()
    assert listed()[sampler].public is True
    assert mate_rest.get_weights_info_by_tinker_path(sampler).result().lora_rank == 4
    mate.create_sampling_client(model_path=sampler).result(timeout=60)  # a sampler of the published weights
    with pytest.raises(tinker.NotFoundError):  # another team: still a 404
        stranger.create_rest_client().get_weights_info_by_tinker_path(sampler).result()
    with pytest.raises(tinker.PermissionDeniedError):  # only the run's key changes its checkpoints
        mate_rest.delete_checkpoint_from_tinker_path(sampler).result()
    rest.unpublish_checkpoint_from_tinker_path(sampler).result()
    with pytest.raises(tinker.NotFoundError):
        mate_rest.get_weights_info_by_tinker_path(sampler).result()
    rest.delete_checkpoint_from_tinker_path(sampler).result()
    assert sampler not in listed()
    with pytest.raises(tinker.NotFoundError):
        rest.get_weights_info_by_tinker_path(sampler).result()
    mate.close("success").result()


def _check_policy_losses(trainer: Any, batch: list[types.Datum]) -> None:
    """cispo, dro and gspo through the SDK against the hand computation on the session's own logprobs (the unit
    tests in tests/training/test_tinker_losses.py check them, and their gradients, in detail)."""
    logprobs = [out["logprobs"].tolist() for out in trainer.forward(batch, "cross_entropy").result(timeout=60)
                .loss_fn_outputs]
    advantages = [[0.5, -1.0, 2.0, 0.25, -0.5]] * len(batch)
    shifted = [[v - 0.1 for v in lp] for lp in logprobs]  # sampling logprobs 0.1 below: every ratio is e^0.1
    data = [types.Datum(model_input=d.model_input, loss_fn_inputs={
        "target_tokens": d.loss_fn_inputs["target_tokens"], "logprobs": q, "advantages": a})
        for d, q, a in zip(batch, shifted, advantages, strict=True)]
    pairs = [(v, a) for lp, adv in zip(logprobs, advantages, strict=True) for v, a in zip(lp, adv, strict=True)]
    ratio = math.exp(0.1)  # 1.105: inside gspo's default 0.8..1.2; cispo below clips it at 1.05
    got = trainer.forward(data, "cispo", {"clip_low_threshold": 0.9, "clip_high_threshold": 1.05}).result(timeout=60)
    assert got.metrics["loss:sum"] == pytest.approx(-sum(1.05 * v * a for v, a in pairs), abs=1e-3)
    got = trainer.forward(data, "dro", {"beta": 0.3}).result(timeout=60)
    assert got.metrics["loss:sum"] == pytest.approx(-sum(v * a - 0.15 * 0.01 for v, a in pairs), abs=1e-3)
    got = trainer.forward(data, "gspo").result(timeout=60)
    assert got.metrics["loss:sum"] == pytest.approx(-ratio * sum(a for _, a in pairs), abs=1e-3)


def _check_openai(platform: Any, base_url: str, key: str, path: str, greedy_text: str, prompt_text: str,
                  prompt_ids: list[int]) -> None:
    """A `tinker://` sampler path as the model of /openai/v1 chat and text completions with the team's key, through
    the official openai client: the adapter's greedy answer (top-3 alternatives per token on /completions); another
    team's key (and an unpublished path for another key of the team) a 404."""
    def client(api_key: str) -> openai.OpenAI:
        return openai.OpenAI(base_url=base_url.removesuffix("/tinker") + "/openai/v1", api_key=api_key, max_retries=0)

    messages: Any = [{"role": "user", "content": "What is 12+35?"}]
    out = client(key).chat.completions.create(model=path, messages=messages, max_tokens=6, temperature=0.0,
                                              logprobs=True, top_logprobs=2)
    choice = out.choices[0]
    assert out.model == path and choice.finish_reason in ("stop", "length")
    assert choice.logprobs is not None and choice.logprobs.content
    for token in choice.logprobs.content:  # greedy: the chosen token is the likeliest of its alternatives
        assert len(token.top_logprobs) == 2 and token.top_logprobs[0].logprob == pytest.approx(token.logprob, abs=1e-4)
    assert choice.message.content == greedy_text  # the same adapter, greedy: the Tinker sampler's tokens
    assert client(key).models.retrieve(path).id == path
    for prompt in (prompt_text, prompt_ids):  # the rendered conversation as text, then as token ids
        text = client(key).completions.create(model=path, prompt=prompt, max_tokens=6, temperature=0.0, logprobs=3)
        first = text.choices[0]
        assert first.text == greedy_text and first.logprobs is not None and first.logprobs.top_logprobs is not None
        values, tops = first.logprobs.token_logprobs or [], first.logprobs.top_logprobs
        assert len(values) == len(tops) == len(first.logprobs.tokens or []) > 0
        for value, top in zip(values, tops, strict=True):  # greedy: the chosen token is the most likely one
            assert len(top) == 3 and max(top.values()) == pytest.approx(value, abs=1e-4)
    other = platform.backend.make_team(max_concurrent_jobs=1, max_generation_instances=1)
    for stranger in (api_key(platform.backend, other.id, platform.backend.make_user(other).id),
                     api_key(platform.backend, platform.team.id, platform.backend.make_user(platform.team).id)):
        with pytest.raises(openai.NotFoundError):
            client(stranger).chat.completions.create(model=path, messages=messages, max_tokens=2)


def _check_topk(named: Any, prompt: types.ModelInput, prompt_ids: list[int], scored: list[float | None],
                sampled: Any) -> None:
    """topk_prompt_logprobs and topk_sample_logprobs: per position the k most likely ids, in order, agreeing with
    the logprobs of the tokens actually there (the prompt's, and the same seeded sample's)."""
    out = named.sample(prompt, 1, types.SamplingParams(max_tokens=4, temperature=1.0, seed=3),
                       topk_prompt_logprobs=5, topk_sample_logprobs=3).result(timeout=180)
    top_prompt, seq = out.topk_prompt_logprobs, out.sequences[0]
    assert top_prompt is not None and len(top_prompt) == len(prompt_ids) and top_prompt[0] is None
    assert seq.tokens == sampled.tokens and seq.topk_logprobs is not None and len(seq.topk_logprobs) == len(seq.tokens)
    positions = [(top_prompt[i], prompt_ids[i], scored[i], 5) for i in range(1, len(prompt_ids))]
    positions += [(top, token, logprob, 3) for top, token, logprob in zip(seq.topk_logprobs, seq.tokens, seq.logprobs,
                                                                          strict=True)]
    inside = 0
    for top, token, logprob, k in positions:
        assert top is not None and len(top) == k
        values = [value for _, value in top]
        assert values == sorted(values, reverse=True) and sum(math.exp(v) for v in values) <= 1 + 1e-4
        assert values[0] >= logprob - 1e-4  # nothing is likelier than the most likely
        if logprob >= values[-1] + 1e-4:  # a token likelier than the k-th is in the list, with its own logprob
            assert dict(top)[token] == pytest.approx(logprob, abs=1e-4)
            inside += 1
    assert inside > 0
    last = named.sample(prompt, 1, types.SamplingParams(max_tokens=1), True, topk_prompt_logprobs=2,
                        prompt_logprobs_last_n=3).result(timeout=180).topk_prompt_logprobs
    assert last is not None and last[:-3] == [None] * (len(prompt_ids) - 3) and all(len(t) == 2 for t in last[-3:])


def _reward_rate(sampler: Any, prompt: types.ModelInput, target: int, seed: int) -> float:
    draw = sampler.sample(prompt, 32, types.SamplingParams(max_tokens=4, temperature=1.0, seed=seed)).result(
        timeout=180)
    return sum(target in seq.tokens for seq in draw.sequences) / len(draw.sequences)


def test_sampling_clients_and_a_grpo_loop(platform: Any, base_url: str) -> None:
    key = api_key(platform.backend, platform.team.id, platform.user.id)
    service = tinker.ServiceClient(base_url=base_url, api_key=key)
    trainer = service.create_lora_training_client(base_model="chat-sharp", rank=8, seed=0).result(timeout=120)
    tokenizer = trainer.get_tokenizer()
    text = tokenizer.apply_chat_template([{"role": "user", "content": "What is 12+35?"}], add_generation_prompt=True,
                                         tokenize=False)
    prompt_ids = tokenizer.encode(text)
    prompt = types.ModelInput.from_ints(prompt_ids)

    # the target: the base policy's third most frequent first token (a reward it gets now and then)
    first = trainer.save_weights_and_get_sampling_client().result(timeout=120)
    draw = first.sample(prompt, 64, types.SamplingParams(max_tokens=1, temperature=1.0, seed=1)).result(timeout=180)
    assert len(draw.sequences) == 64 and all(len(s.tokens) == 1 and len(s.logprobs) == 1 for s in draw.sequences)
    counts: dict[int, int] = {}
    for seq in draw.sequences:
        counts[seq.tokens[0]] = counts.get(seq.tokens[0], 0) + 1
    target = sorted(counts, key=lambda token: (-counts[token], token))[2]
    before = _reward_rate(first, prompt, target, seed=7)

    # GRPO, only the SDK: sample a group with the current weights, centre the rewards, importance_sampling + AdamW
    rewards = []
    for step in range(6):
        sampler = trainer.save_weights_and_get_sampling_client().result(timeout=120)
        group = sampler.sample(prompt, 16, types.SamplingParams(max_tokens=4, temperature=1.0, seed=100 + step)) \
            .result(timeout=180)
        scores = [float(target in seq.tokens) for seq in group.sequences]
        rewards.append(sum(scores) / len(scores))
        data = []
        for seq, score in zip(group.sequences, scores, strict=True):
            advantage, pad = score - rewards[-1], [0.0] * (len(prompt_ids) - 1)
            if advantage == 0.0:
                continue
            data.append(types.Datum(model_input=types.ModelInput.from_ints(prompt_ids + seq.tokens[:-1]),
                                    loss_fn_inputs={"target_tokens": prompt_ids[1:] + seq.tokens,
                                                    "logprobs": pad + list(seq.logprobs),
                                                    "advantages": pad + [advantage] * len(seq.tokens)}))
        if data:
            trainer.forward_backward(data, "importance_sampling").result(timeout=60)
            trainer.optim_step(types.AdamParams(learning_rate=2e-2)).result(timeout=60)
    final = trainer.save_weights_and_get_sampling_client().result(timeout=120)
    after = _reward_rate(final, prompt, target, seed=7)
    assert after >= before + 0.3 and after >= 0.6, (before, after, rewards)

    # a sampler of named sampler weights: the trainer's weights, per-token logprobs, prompt logprobs, stops
    saved = trainer.save_weights_for_sampler("grpo").result(timeout=60)
    named = service.create_sampling_client(model_path=saved.path).result(timeout=60)
    greedy = named.sample(prompt, 2, types.SamplingParams(max_tokens=6, temperature=0.0), include_prompt_logprobs=True
                            ).result(timeout=180)
    seq = greedy.sequences[0]
    assert greedy.sequences[1].tokens == seq.tokens and seq.stop_reason in ("length", "stop")
    assert greedy.prompt_logprobs is not None and greedy.prompt_logprobs[0] is None
    assert len(greedy.prompt_logprobs) == len(prompt_ids)
    scored = named.compute_logprobs(prompt).result(timeout=180)
    assert scored[0] is None and scored[1:] == pytest.approx(greedy.prompt_logprobs[1:], abs=1e-5)
    forward = trainer.forward([types.Datum(model_input=types.ModelInput.from_ints(prompt_ids[:-1]),
                                           loss_fn_inputs={"target_tokens": prompt_ids[1:]})], "cross_entropy")
    assert forward.result(timeout=60).loss_fn_outputs[0]["logprobs"].tolist() == pytest.approx(scored[1:], abs=1e-4)
    sampled = named.sample(prompt, 1, types.SamplingParams(max_tokens=4, temperature=1.0, seed=3)).result(
        timeout=180).sequences[0]
    rescored = named.compute_logprobs(types.ModelInput.from_ints(prompt_ids + sampled.tokens)).result(timeout=180)
    assert sampled.logprobs == pytest.approx(rescored[len(prompt_ids):], abs=1e-4)  # temperature 1: the same model
    _check_topk(named, prompt, prompt_ids, scored, sampled)
    _check_openai(platform, base_url, key, saved.path, tokenizer.decode(seq.tokens, skip_special_tokens=True),
                  text, prompt_ids)
    stop_at = seq.tokens[2]
    stopped = named.sample(prompt, 1, types.SamplingParams(max_tokens=6, temperature=0.0, stop=[stop_at])).result(
        timeout=180).sequences[0]
    assert stopped.tokens == seq.tokens[:seq.tokens.index(stop_at) + 1] and stopped.stop_reason == "stop"
    text_stop = tokenizer.decode([seq.tokens[1]])
    by_text = named.sample(prompt, 1, types.SamplingParams(max_tokens=6, temperature=0.0, stop=text_stop)).result(
        timeout=180).sequences[0]
    assert by_text.stop_reason == "stop" and len(by_text.tokens) <= 2

    with pytest.raises(tinker.BadRequestError, match="not supported by this server: sampling_params.top_k"):
        named.sample(prompt, 1, types.SamplingParams(max_tokens=2, top_k=5)).result(timeout=60)
    other = platform.backend.make_team(max_concurrent_jobs=1, max_generation_instances=1)
    stranger = tinker.ServiceClient(base_url=base_url,
                                    api_key=api_key(platform.backend, other.id, platform.backend.make_user(other).id))
    with pytest.raises(tinker.NotFoundError):
        stranger.create_sampling_client(model_path=saved.path).result(timeout=60).sample(
            prompt, 1, types.SamplingParams(max_tokens=2)).result(timeout=60)
    stranger.close("success").result()
    service.close("success").result()


@pytest.fixture(scope="module")
def teacher_token(platform: Any, sharp_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> int:
    """The team's registered `chat-teacher` (chat-sharp fine-tuned to answer QUESTION with one token) and that
    token, the student's third most likely first answer."""
    teacher_dir, token = distillation_teacher(sharp_dir, tmp_path_factory.mktemp("tinker-teacher") / "qwen")
    with platform.backend.session() as session:
        session.add(Model(team_id=platform.team.id, name="chat-teacher", path=str(teacher_dir),
                          created_by_id=platform.user.id))
    return token


def test_on_policy_distillation_as_a_tinker_loop(platform: Any, base_url: str, teacher_token: int) -> None:
    """On-policy distillation written only against the SDK, as the cookbook does: the student (a LoRA of
    chat-sharp) samples, the teacher (the team's model `chat-teacher`, a sampling client of the base model) scores
    every sampled token with compute_logprobs, and importance_sampling trains on the per-token advantage
    teacher logprob - student logprob (the negative reverse KL). The reverse KL falls and the student answers as
    the teacher does; topk_prompt_logprobs gives the teacher's top answer token."""
    service = tinker.ServiceClient(base_url=base_url, api_key=api_key(platform.backend, platform.team.id,
                                                                      platform.user.id))
    student = service.create_lora_training_client(base_model="chat-sharp", rank=8, seed=0).result(timeout=120)
    teacher = service.create_sampling_client(base_model="chat-teacher").result(timeout=60)
    tokenizer = student.get_tokenizer()
    prompt_ids = tokenizer.encode(tokenizer.apply_chat_template(QUESTION, add_generation_prompt=True,
                                                                tokenize=False))
    top = teacher.sample(types.ModelInput.from_ints(prompt_ids + [teacher_token]), 1, types.SamplingParams(
        max_tokens=1), topk_prompt_logprobs=2).result(timeout=180).topk_prompt_logprobs
    assert top is not None and top[-1] is not None and top[-1][0][0] == teacher_token  # its likeliest answer

    reverse_kl, agreement = [], []
    for step in range(6):
        sampler = student.save_weights_and_get_sampling_client().result(timeout=120)
        group = sampler.sample(types.ModelInput.from_ints(prompt_ids), 16, types.SamplingParams(
            max_tokens=2, temperature=1.0, seed=200 + step)).result(timeout=180).sequences
        # the teacher scores each distinct sequence once (a peaked student repeats itself): one request apiece
        scored = {tuple(seq.tokens): teacher.compute_logprobs(types.ModelInput.from_ints(prompt_ids + seq.tokens),
                                                              prompt_logprobs_last_n=len(seq.tokens))
                  for seq in group}
        data, gaps = [], []
        for seq in group:
            teacher_lp = scored[tuple(seq.tokens)].result(timeout=180)[len(prompt_ids):]
            assert seq.logprobs is not None
            advantages = [float(t or 0.0) - s for t, s in zip(teacher_lp, seq.logprobs, strict=True)]
            gaps += [-a for a in advantages]
            pad = [0.0] * (len(prompt_ids) - 1)
            inputs: Any = {"target_tokens": prompt_ids[1:] + seq.tokens, "logprobs": pad + seq.logprobs,
                           "advantages": pad + advantages}
            data.append(types.Datum(model_input=types.ModelInput.from_ints(prompt_ids + seq.tokens[:-1]),
                                    loss_fn_inputs=inputs))
        reverse_kl.append(sum(gaps) / len(gaps))
        agreement.append(sum(seq.tokens[0] == teacher_token for seq in group) / len(group))
        student.forward_backward(data, "importance_sampling").result(timeout=60)
        # Adam's momentum keeps pushing once the student agrees with the teacher; at lr 1e-2 with beta1 0.9 it
        # carried the LoRA past the teacher's token into another one, where the gradient p(1-p) vanishes
        student.optim_step(types.AdamParams(learning_rate=5e-3, beta1=0.5)).result(timeout=60)
    assert sum(reverse_kl[-2:]) / 2 < 0.5 * reverse_kl[0], (reverse_kl, agreement)
    assert agreement[-1] >= 0.6 and agreement[-1] >= agreement[0] + 0.3, (reverse_kl, agreement)
    service.close("success").result()
