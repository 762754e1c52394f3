"""A shared generation instance (`generation.run_shared`): one process, one base model, the instances of several LoRA
jobs (docs/operator.md#shared-generation-instances).

The controller places each instance of a sharing job (`JobSpec.shares_generation`) on the shared instance of its base
model (backend/controller/sharing.py: it appends {job_id, instance_id} to `keys.share_joins(key)` and sends this task
when no process serves the key). Here every placed instance becomes a member: the job's own `InstanceRunner` (its
prompt stream, sample stream, weights transport, reward jail, heartbeat, spans, instance row) whose engine is an
`AdapterView` of one `MultiLoraEngine`. So everything per job stays per job (samples, metrics, versions, isolation:
a member loads only its own job's adapter and streams only to its own job), and only the batched forward is shared.

    one continuous batch  <-  the members' feeds in turns weighted by their teams' max_generation_instances quota
                              (fair share: workers/runtime/fair_share.py); a member never has more than its own
                              generation.batch_size in flight
    each result           ->  its member (request ids are tagged `<member>|<sample id>`), which scores and streams it

A member leaves when its feed ends (job done, instance stopped, worker shutting down): it admits nothing more, its rows
finish, then it flushes, releases its reward and adapter and marks its instance stopped; the others go on. A member
that fails is marked dead with its error (the controller replaces it) and never takes the process down. With no
member for `idle_s` the process exits, atomically with an empty joins list (a late placement starts a new one).
When the worker shuts down (`ShutdownWatch`, checked at least once a second, busy or idle) every member hands its
instance back at once, the process admits no placement, removes its state and exits (placements still waiting then
find no process, and the controller starts one on another worker).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import redis

from contract import keys
from contract.reporter import Reporter
from contract.states import InstanceStatus
from workers.generation.engine import GenerationRequest, GenerationResult
from workers.generation.engines.hf_multi_lora import MultiLoraEngine
from workers.runtime.context import JobContext, JobSetupError, load_context
from workers.runtime.fair_share import FairShare
from workers.runtime.instance import InstanceRunner, report_setup_error
from workers.runtime.share_state import ShareState
from workers.runtime.shutdown import ShutdownWatch
from workers.runtime.telemetry import Heartbeat

if TYPE_CHECKING:
    from workers.generation.engines.vllm_multi_lora import VLLMMultiLoraEngine

    SharedEngine = MultiLoraEngine | VLLMMultiLoraEngine
log = logging.getLogger(__name__)
JOIN_POLL_S = 0.2  # placements are looked for this often while members are busy
MEMBER_IDLE_BLOCK_MS = 50  # a member with nothing in flight blocks this long on its prompt stream (no rows decoding)
MAX_BATCH = 256  # rows in the shared batch at most (each member is also held to its own batch_size)
VLLM_MAX_ADAPTERS = 8  # jobs on one shared vLLM process at most (vLLM sizes its LoRA slots at start)
# the process exits when it held no member this long
IDLE_S = float(os.environ.get("STREAMRL_SHARED_IDLE_S", "30"))
_END: Any = object()  # a member's feed has ended


@dataclass
class _Member:
    tag: str  # adapter name and request-id tag: j<job id>_<instance id>
    runner: InstanceRunner
    heartbeat: Heartbeat
    feed: Iterator[GenerationRequest | None]
    rows: int = 0  # requests of this member in the engine
    ended: bool = False  # its feed ended: it admits nothing more


class SharedInstance:
    def __init__(self, client: redis.Redis, key: str, reporter: Reporter, artifacts: Path, *, node: str | None,
                 device: str, idle_s: float = IDLE_S) -> None:
        self.client, self.key, self.reporter, self.artifacts = client, key, reporter, artifacts
        self.node, self.device, self.idle_s = node, device, idle_s
        self.engine: SharedEngine | None = None
        self.settings = ""  # contract.sharing.share_settings of the jobs it serves (all members agree)
        self.members: dict[str, _Member] = {}
        self.share = FairShare()  # whose request the batch admits next
        self.served = 0  # members served since the start
        self._joins_checked = 0.0
        self.state = ShareState(client, key, node, lambda: [
            [m.runner.ctx.job_id, m.runner.instance_id] for m in list(self.members.values())])
        self.shutdown = ShutdownWatch(client, node)

    # -- lifecycle ----------------------------------------------------------------------------------------------------
    def serve(self) -> str:
        state = self.state.start()
        try:
            while not self.shutdown.check():
                if self._join_first():
                    assert self.engine is not None
                    for result in self.engine.generate_stream(self._feed()):
                        self._route(result)
                elif state.exit_if_no_joins():
                    break
            else:  # the worker is shutting down: the members handed their instances back; placements go elsewhere
                state.stop()
                self.client.delete(keys.share_state(self.key))
        finally:
            state.stop()
            for tag in list(self.members):
                self._leave(tag)
        return f"shared instance {self.key} stopped after serving {self.served} instances"

    def _join_first(self) -> bool:
        """Wait (at most idle_s) until a placement becomes a member; False: none came, or the worker shuts down."""
        deadline = time.monotonic() + self.idle_s
        while time.monotonic() < deadline and not self.shutdown.check():
            if self._admit_joins(block_s=1.0):
                return True
        return False

    # -- members ------------------------------------------------------------------------------------------------------
    def _admit_joins(self, block_s: float = 0.0) -> int:
        admitted = 0
        while True:
            raw: Any
            if block_s and not self.members:
                popped = self.client.blpop([keys.share_joins(self.key)], timeout=block_s)
                raw = popped[1] if popped else None
            else:
                raw = self.client.lpop(keys.share_joins(self.key))
            if raw is None:
                return admitted
            placed = json.loads(raw)
            admitted += self._join(int(placed["job_id"]), str(placed["instance_id"]), int(placed.get("weight", 1)))

    def _join(self, job_id: int, instance_id: str, weight: int) -> int:
        """Start a member for one placed instance; 0 when it is no longer wanted or cannot run here (then its
        instance is dead with the reason: the controller replaces it, or fails a job whose instances keep failing)."""
        if not self.reporter.claim_instance(job_id, instance_id):
            return 0
        try:
            return self._start_member(job_id, instance_id, max(1, weight))
        except JobSetupError as err:
            report_setup_error(self.reporter, self.client, job_id, instance_id, err)
        except Exception as err:
            log.exception("shared instance %s: instance %s of job %s failed to start", self.key, instance_id, job_id)
            self.reporter.set_instance_status(job_id, instance_id, InstanceStatus.dead,
                                              error=f"{type(err).__name__}: {err}")
        return 0

    def _start_member(self, job_id: int, instance_id: str, weight: int) -> int:
        ctx = load_context(job_id, self.reporter, self.client, self.artifacts, self.node)
        if ctx.job_done():
            return 0
        lora = ctx.spec.training.lora
        if lora is None or not ctx.spec.shares_generation:
            raise JobSetupError(f"job {job_id} does not share generation instances (generation.share)")
        settings = ctx.spec.share_settings
        if self.engine is None:
            self.engine, self.settings = self._make_engine(ctx), settings
        elif Path(ctx.model_dir).resolve() != Path(str(self.engine.model_dir)).resolve():
            raise JobSetupError(f"job {job_id}'s base model {ctx.model_dir} is not this shared instance's "
                                f"({self.engine.model_dir})")
        elif settings != self.settings:
            raise JobSetupError(f"job {job_id}'s engine settings ({settings}) are not this shared instance's "
                                f"({self.settings})")
        tag = f"j{job_id}_{instance_id.replace('-', '_')}"
        runner = InstanceRunner(ctx, instance_id)
        runner.shared, runner.idle_block_ms = self.key, MEMBER_IDLE_BLOCK_MS
        runner.may_block = lambda: all(m.rows == 0 for m in self.members.values())
        heartbeat = runner.start_heartbeat()
        engine = self.engine
        try:
            runner.open(lambda: engine.attach(tag, lora))
        except BaseException:
            runner.close(heartbeat, say=False)  # the caller says why
            engine.detach(tag)
            raise
        self.reporter.set_instance_status(job_id, instance_id, InstanceStatus.running)
        self.members[tag] = _Member(tag, runner, heartbeat, runner._feed())
        self.share.add(tag, weight)
        self.served += 1
        weights = sum(self.share.weights.values())
        self.reporter.record_event(job_id, "scale", f"instance {instance_id} runs on a shared generation instance "
                                   f"(one base model, {len(self.members)} job instances on it now; this job's share "
                                   f"of its turns is {weight}/{weights}, by its team's generation-instance quota)",
                                   data={"instance_id": instance_id, "shared": True, "share_weight": weight})
        return 1

    def _make_engine(self, ctx: JobContext) -> SharedEngine:
        """The first member's engine: hf (peft's adapters in one batch; its base mapped from the host's shared copy
        when the context names one) or vLLM (one LoRARequest per adapter)."""
        spec, model_dir = ctx.spec, ctx.model_dir
        if spec.generation.engine == "vllm":
            from workers.generation.engines.vllm_multi_lora import VLLMMultiLoraEngine

            vllm, lora = spec.generation.vllm, spec.training.lora
            assert lora is not None
            return VLLMMultiLoraEngine(model_dir, max_batch_size=MAX_BATCH, max_loras=VLLM_MAX_ADAPTERS,
                                       max_lora_rank=lora.rank, device=self.device, seed=spec.seed, dtype=vllm.dtype,
                                       max_model_len=vllm.max_model_len,
                                       tensor_parallel_size=vllm.tensor_parallel_size,
                                       gpu_memory_utilization=vllm.gpu_memory_utilization)
        engine = MultiLoraEngine(model_dir, max_batch_size=MAX_BATCH, device=self.device, seed=spec.seed,
                                 base_cache=ctx.base_cache, speculative=spec.generation.speculative)  # shared: key
        if engine.mapped_base is not None:
            self.reporter.record_event(ctx.job_id, "scale",
                                       f"shared generation instance: {engine.mapped_base.describe()}")
        return engine

    def _leave(self, tag: str, error: str | None = None) -> None:
        member = self.members.pop(tag)
        self.share.remove(tag)
        runner = member.runner
        try:
            if error is None:
                runner._flush(final=True)
        finally:
            runner.close(member.heartbeat, error=error)
            if self.engine is not None:
                self.engine.detach(tag)

    def _fail(self, tag: str, err: Exception) -> None:
        log.exception("shared instance %s: member %s failed", self.key, tag)
        self._leave(tag, error=f"{type(err).__name__}: {err}")

    # -- the shared feed ----------------------------------------------------------------------------------------------
    def _feed(self) -> Iterator[GenerationRequest | None]:
        """The members' requests in weighted turns (`FairShare`); None when none has one now. A round lasts until
        every member has passed (nothing to offer, or its batch_size in flight); joins and leaves between rounds."""
        while True:
            now = time.monotonic()
            if now - self._joins_checked >= JOIN_POLL_S:
                self._joins_checked = now
                if not self.shutdown.check():
                    self._admit_joins()
                else:  # every member hands its instance back now, not at its next heartbeat
                    for member in self.members.values():
                        member.runner.stop.set()
            for ended in [t for t, m in self.members.items() if m.ended and m.rows == 0]:
                self._leave(ended)
            if not self.members:
                return  # the engine finishes; `serve` waits for placements or exits
            offered = False
            self.share.new_round()
            while (tag := self.share.next()) is not None:
                member = self.members[tag]
                if member.ended:
                    self.share.pass_over(tag)
                    continue
                if member.rows >= member.runner.spec.generation.batch_size:
                    member.runner.flush_if_due()
                    self.share.pass_over(tag)
                    continue
                try:
                    item = next(member.feed, _END)
                except Exception as err:
                    self._fail(tag, err)
                    continue
                if item is _END:
                    member.ended = True
                if item is _END or item is None:
                    self.share.pass_over(tag)
                    continue
                assert isinstance(item, GenerationRequest)
                member.rows += 1
                offered = True
                yield replace(item, request_id=f"{tag}|{item.request_id}", adapter=tag)
            if not offered:
                yield None

    def _route(self, result: GenerationResult) -> None:
        tag, _, request_id = result.request_id.partition("|")
        member = self.members.get(tag)
        if member is None:  # its member failed while this row decoded: the prompt is reclaimed and generated again
            return
        member.rows -= 1
        try:
            member.runner._emit(replace(result, request_id=request_id))
        except Exception as err:
            self._fail(tag, err)



def run_shared(key: str, reporter: Reporter, client: redis.Redis, artifacts: Path, *, node: str | None,
               device: str) -> str:
    """The `generation.run_shared` task body."""
    return SharedInstance(client, key, reporter, artifacts, node=node, device=device).serve()
