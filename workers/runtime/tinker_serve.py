"""The `training.tinker_session` task body: serve one Tinker training client's calls in the SDK's seq order, park the
session when it is idle or its worker shuts down, and restore it when a call comes (docs/tinker.md#parking).

    queued -> starting -> running --(no call for tinker_idle_s, a warm shutdown, or the scheduler's preemption flag
                                     `keys.job_preempt`)--> parked (no process, no slot)
    parked --(a call: the API, or this task finding one that came while it parked)--> queued -> ... restored

Invariants:
- the request stream (`keys.tinker_requests`) holds every call since the last park: a park trims it to the calls not
  yet served, so a restored session serves exactly what is left. Every `tinker_park_every` steps the session also
  saves its park state while it runs; after a kill -9 it restores that and runs the calls served since (still in the
  stream) again, writing their results again; steps whose calls the stream no longer holds are reported lost (an
  event, and `steps_lost:max` in the next call's metrics), and a restored session whose next seq id never comes while
  later ones wait (their calls lost with the stream) skips to those after GAP_S;
- the park state is saved (atomically, workers/runtime/tinker_park.py) before the stream is trimmed and before the job
  says `parked`; the heartbeat stops before it says so and its key goes right after (the controller never takes a
  parked session's last beat for the beat of the session that restores it, nor a parked session for a lost one);
- no job stays parked with a call waiting: after saying `parked` the task reads the stream once more and queues the
  job again itself if a call came meanwhile (the API queues it for every later call).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import redis

from contract import keys, liveness
from contract.reporter import Reporter
from contract.states import TERMINAL_JOB_STATUSES, JobStatus
from workers.runtime import tinker_park
from workers.runtime.shutdown import ShutdownWatch
from workers.runtime.telemetry import Heartbeat
from workers.runtime.tinker_session import TinkerSession, answer, run_request

STATUS_CHECK_S = 2.0
GAP_S = 10.0  # a restored session waiting this long for a seq id while later ones wait skips to them (lost calls)
READ_BLOCK_MS = 500  # how long one read of the stream waits: the shutdown flag is checked at least this often


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class SessionServer:
    def __init__(self, job_id: int, reporter: Reporter, client: redis.Redis, device: str, *, artifacts: Path,
                 idle_s: float, park_every: int, node: str | None) -> None:
        self.job_id, self.reporter, self.client, self.device = job_id, reporter, client, device
        self.artifacts, self.idle_s, self.park_every = Path(artifacts), idle_s, park_every
        self.shutdown = ShutdownWatch(client, node)
        self.stream = keys.tinker_requests(job_id)
        self.pending: dict[int, tuple[str, str, str, dict[str, Any]]] = {}  # seq -> (entry id, request, kind, payload)
        self.last_id, self.next_seq, self.created = "0-0", 1, False
        self.replay_to: int | None = None  # the newest call a restore runs again (its result was written before)
        self.lost_checked, self.lost_steps = False, 0
        # the job's newest step row (now, and as the park knew it): steps recorded after the park and not run again
        # are lost; a load_state that took the step back never counts as a loss
        self.recorded, self.park_recorded = 0, 0
        self.gap_since: float | None = None  # a restored session waiting for a seq id with later ones pending
        self.may_skip = False  # a restored session until its first call: calls lost with the stream are skipped
        self.park_file = Path()

    def serve(self) -> str:
        record = self.reporter.load_job(self.job_id)
        if record is None or record.status in TERMINAL_JOB_STATUSES:
            return f"tinker session {self.job_id} already ended"
        if record.status not in (JobStatus.starting, JobStatus.running):
            return f"tinker session {self.job_id} is {record.status}: nothing to serve"
        self.park_file = tinker_park.park_path(self.artifacts, record.team_id, self.job_id)
        beat = Heartbeat(lambda: self.reporter.beat_driver(self.job_id), name=f"tinker-{self.job_id}").start()
        try:
            started = time.perf_counter()
            try:
                session = TinkerSession(record, self.device)
                state = tinker_park.load(self.park_file)
                if state is not None:
                    session.restore(state)
            except Exception as err:
                self.reporter.set_job_status(self.job_id, JobStatus.failed, error=f"cannot load the model: {err}")
                raise
            self.reporter.set_job_status(self.job_id, JobStatus.running)
            self._announce(session, state, time.perf_counter() - started, record.recorded_through or 0)
            return self._loop(session, beat)
        finally:
            beat.stop()

    # -- start ----------------------------------------------------------------------------------------------------
    def _announce(self, session: TinkerSession, state: dict[str, Any] | None, load_s: float, recorded: int) -> None:
        if state is None:
            self.reporter.record_event(self.job_id, "tinker", (
                f"training session ready on {self.device} (LoRA rank {session.lora.rank}); parks after "
                f"{self.idle_s:g}s without a call"))
        else:
            self.next_seq, self.created, self.may_skip = int(state["next_seq"]), bool(state["created"]), True
            self.park_recorded = int(state["recorded"])
            pipe = self.client.pipeline()
            pipe.get(keys.tinker_woken(self.job_id))
            pipe.delete(keys.tinker_woken(self.job_id))
            woken = pipe.execute()[0]
            restore_s = time.time() - float(woken) if woken is not None else load_s
            self.reporter.record_event(self.job_id, "tinker", (
                f"resumed from its park at step {session.step} in {restore_s:.2f}s (from the call that woke it to "
                f"serving it; loading the model and state took {load_s:.2f}s)"),
                {"tinker": "resumed", "restore_s": round(restore_s, 3), "load_s": round(load_s, 3),
                 "step": session.step})
        served_again = [seq for seq, request_id in self._entries() if seq >= self.next_seq
                        and self.client.exists(keys.tinker_result(request_id))]
        self.replay_to, self.recorded = max(served_again, default=None), recorded

    def _entries(self) -> list[tuple[int, str]]:
        """(seq, request id) of every call the stream holds now."""
        found = []
        entries: Any = self.client.xrange(self.stream)
        for _, fields in entries:
            get = {_text(k): _text(v) for k, v in fields.items()}
            found.append((int(get["seq"]) if get["seq"] else -1, get["request_id"]))
        return found

    def _check_lost(self, session: TinkerSession) -> None:
        """Once the calls served before a restore ran again: steps recorded then and not redone now are lost."""
        self.lost_checked = True
        self.lost_steps = max(0, self.recorded - max(self.park_recorded, session.step))
        if self.lost_steps:
            self.reporter.record_event(self.job_id, "tinker", (
                f"{self.lost_steps} steps lost: the session's worker died and the calls since its last park are "
                f"gone; it continues from step {session.step} (parks every {self.park_every} steps)"),
                {"tinker": "steps_lost", "steps_lost": self.lost_steps, "step": session.step})

    # -- serving --------------------------------------------------------------------------------------------------
    def _read(self) -> bool:
        """New stream entries into `pending`; True when a call came."""
        entries: Any = self.client.xread({self.stream: self.last_id}, count=32, block=READ_BLOCK_MS) or []
        came = False
        for _, items in entries:
            for entry_id, fields in items:
                self.last_id = _text(entry_id)
                get = {_text(k): _text(v) for k, v in fields.items()}
                seq = int(get["seq"]) if get["seq"] else -1
                if 0 <= seq < self.next_seq and not (seq == 0 and not self.created):
                    continue  # served before the park this session restored
                self.pending[seq] = (self.last_id, get["request_id"], get["kind"], json.loads(get["payload"]))
                came = True
        return came

    def _loop(self, session: TinkerSession, beat: Heartbeat) -> str:
        last_call = last_check = time.monotonic()
        while True:
            if self._read():
                last_call = time.monotonic()
            if -1 in self.pending and self.pending[-1][2] == "end":
                return self._end(session, "closed by the client")
            if 0 in self.pending:  # the creation (with a load for create_training_client_from_state)
                self._create(session, *self.pending.pop(0)[1:])
            self._skip_lost_calls()
            while self.next_seq in self.pending:
                self.may_skip = False
                self._serve_next(session)
                last_call = time.monotonic()
            if not self.lost_checked and (self.replay_to is None or self.next_seq > self.replay_to):
                self._check_lost(session)
            if self.shutdown.check():
                return self._park(session, beat, "its worker is shutting down")
            preempted = self.client.getdel(keys.job_preempt(self.job_id))  # the scheduler wants its slot
            if preempted is not None:
                why = json.loads(preempted).get("reason", "by the scheduler")
                return self._park(session, beat, f"preempted: {why}")
            now = time.monotonic()
            if now - last_call > self.idle_s and self.gap_since is None:  # not idle: calls wait behind a gap
                return self._park(session, beat, f"no call for {self.idle_s:g}s")
            if now - last_check > STATUS_CHECK_S:
                last_check = now
                status = self.reporter.job_status(self.job_id)
                if status is None or status in TERMINAL_JOB_STATUSES:
                    self._close()
                    return f"tinker session {self.job_id} ended: job {status}"

    def _skip_lost_calls(self) -> None:
        later = [seq for seq in self.pending if seq > self.next_seq]
        if not self.may_skip or not later or self.next_seq in self.pending:
            self.gap_since = None
            return
        self.gap_since = self.gap_since or time.monotonic()
        if time.monotonic() - self.gap_since < GAP_S:
            return
        self.reporter.record_event(self.job_id, "tinker", (
            f"calls {self.next_seq}..{min(later) - 1} never reached the restored session (lost with its request "
            f"stream); it goes on with call {min(later)}"), {"tinker": "calls_lost", "from": self.next_seq,
                                                           "to": min(later) - 1})
        self.next_seq, self.gap_since = min(later), None

    def _create(self, session: TinkerSession, request_id: str, kind: str, payload: dict[str, Any]) -> None:
        self.created = True
        load = payload.get("load")
        if load:  # create_training_client_from_state: the SDK waits for a LoadWeightsResponse
            session.load_state(Path(load["dir"]), bool(load["optimizer"]))
            answer(self.client, request_id, {"type": "load_weights", "path": load["path"],
                                             "model_id": payload["model_id"]})
        else:
            answer(self.client, request_id, {"type": "create_model", "model_id": payload["model_id"]})

    def _serve_next(self, session: TinkerSession) -> None:
        _, request_id, kind, payload = self.pending.pop(self.next_seq)
        started = time.perf_counter()
        try:
            result = run_request(session, kind, payload, self.job_id, self.reporter)
            # what the request cost here (the API drops it; bench/tinker_api.py reads it from Redis)
            result["timing"] = {"seq": self.next_seq, "kind": kind, "compute_s": time.perf_counter() - started}
            if self.lost_steps and isinstance(result.get("metrics"), dict):
                result["metrics"]["steps_lost:max"] = float(self.lost_steps)  # the client hears it once
                self.lost_steps = 0
        except (ValueError, FileNotFoundError) as err:
            result = {"error": str(err), "category": "user"}
        answer(self.client, request_id, result)
        self.next_seq += 1
        if kind == "optim_step" and session.step % self.park_every == 0:
            self._save(session)

    # -- parking --------------------------------------------------------------------------------------------------
    def _save(self, session: TinkerSession) -> float:
        """The park state to disk, then the stream trimmed to the calls not served yet."""
        self.recorded = max(self.recorded, session.step)
        seconds = tinker_park.save(self.park_file, {**session.snapshot(), "next_seq": self.next_seq,
                                                    "created": self.created, "recorded": self.recorded})
        unserved = [entry_id for entry_id, *_ in self.pending.values()]
        if unserved:
            keep_from = min(unserved, key=lambda i: tuple(int(p) for p in i.split("-")))
        else:
            ms, counter = self.last_id.split("-")
            keep_from = f"{ms}-{int(counter) + 1}"
        self.client.xtrim(self.stream, minid=keep_from)
        return seconds

    def _park(self, session: TinkerSession, beat: Heartbeat, reason: str) -> str:
        save_s = self._save(session)
        beat.stop()
        self.reporter.set_job_status(self.job_id, JobStatus.parked)
        self.client.delete(liveness.driver_key(self.job_id))  # no later session of the job is mistaken for this one
        self.reporter.record_event(self.job_id, "tinker", (
            f"parked ({reason}) at step {session.step}: adapter and optimizer state saved in {save_s:.2f}s, its "
            "training slot is free; its next call restores it"),
            {"tinker": "parked", "reason": reason, "step": session.step, "save_s": round(save_s, 3)})
        if self._call_waiting():
            self.client.set(keys.tinker_woken(self.job_id), time.time(), nx=True, ex=86400)
            self.reporter.set_job_status(self.job_id, JobStatus.queued)
            self.reporter.record_event(self.job_id, "tinker", "queued again: a call is waiting for it",
                                       {"tinker": "woken"})
            self._wake_controller()
        return f"tinker session {self.job_id} parked: {reason}"

    def _call_waiting(self) -> bool:
        """A call the session can serve next (or a close) is in the stream."""
        return any(seq in (-1, 0, self.next_seq) for seq, _ in self._entries())

    def _wake_controller(self) -> None:
        pipe = self.client.pipeline(transaction=False)
        pipe.lpush(keys.controller_wake(), 1)
        pipe.ltrim(keys.controller_wake(), 0, 0)
        pipe.expire(keys.controller_wake(), 3600)
        pipe.execute()

    # -- end ------------------------------------------------------------------------------------------------------
    def _end(self, session: TinkerSession, reason: str) -> str:
        self.reporter.record_event(self.job_id, "tinker", f"training session ended ({reason}) after "
                                                          f"{session.step} steps; its training slot is free")
        if self.reporter.job_status(self.job_id) not in TERMINAL_JOB_STATUSES:
            self.reporter.set_job_status(self.job_id, JobStatus.succeeded)
        self._close()
        return f"tinker session {self.job_id} ended: {reason}"

    def _close(self) -> None:
        tinker_park.discard(self.park_file)
        self.client.set(keys.job_done(self.job_id), "ended", ex=86400)


def run_session(job_id: int, reporter: Reporter, client: redis.Redis, device: str, *, artifacts: Path,
                idle_s: float, park_every: int, node: str | None) -> str:
    """The task body: serve the job's calls until it is parked, closed or cancelled."""
    return SessionServer(job_id, reporter, client, device, artifacts=artifacts, idle_s=idle_s,
                         park_every=park_every, node=node).serve()
