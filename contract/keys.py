"""Redis key names of one job's runtime state. Every key is prefixed by the job id so jobs never collide."""

from __future__ import annotations


def prefix(job_id: int) -> str:
    return f"streamrl:job:{job_id}"


def prompt_stream(job_id: int, instance_id: str) -> str:
    """Requests dispatched to one generation instance (one entry = one sample to generate)."""
    return f"{prefix(job_id)}:prompts:{instance_id}"


def sample_stream(job_id: int) -> str:
    """Finished samples of every instance, consumed by the job driver."""
    return f"{prefix(job_id)}:samples"


def consumed_set(job_id: int) -> str:
    """Sample ids the trainer has used: consumption is idempotent on this set."""
    return f"{prefix(job_id)}:consumed"


def produced_set(job_id: int) -> str:
    """Sample ids some instance has already streamed: a duplicate request is acked without regenerating."""
    return f"{prefix(job_id)}:produced"


def weights_latest(job_id: int) -> str:
    return f"{prefix(job_id)}:weights:latest"


def weights_channel(job_id: int) -> str:
    return f"{prefix(job_id)}:weights:announce"


def weights_p2p(job_id: int) -> str:
    """Hash: the p2p weight-sync rendezvous (trainer address, join requests and answers, joined instances); see
    workers/weightsync/p2p/."""
    return f"{prefix(job_id)}:weights:p2p"


def instance_stop(job_id: int, instance_id: str) -> str:
    """Set by the controller (or the driver at the end of a job): the instance finishes its current work and exits."""
    return f"{prefix(job_id)}:stop:{instance_id}"


def instance_heartbeat(job_id: int, instance_id: str) -> str:
    return f"{prefix(job_id)}:heartbeat:{instance_id}"


def job_done(job_id: int) -> str:
    """Set by the driver when the job ended (any terminal status): every instance exits."""
    return f"{prefix(job_id)}:done"


def colocated_turn(job_id: int) -> str:
    """Colocated mode: 'generate' or 'train', whose turn it is on the shared pool."""
    return f"{prefix(job_id)}:colocated:turn"


def tinker_requests(job_id: int) -> str:
    """Stream of a Tinker training session's requests (one entry = one SDK call, with its seq id), read in seq order
    by the session's worker (workers/runtime/tinker_serve.py); a park trims it to the calls not yet served."""
    return f"{prefix(job_id)}:tinker:requests"


def tinker_result(request_id: str) -> str:
    """The outcome of one Tinker request (JSON: {"ok": ...} or {"error", "category"}), read by retrieve_future."""
    return f"streamrl:tinker:result:{request_id}"


def tinker_woken(job_id: int) -> str:
    """When (epoch seconds) a call woke the parked Tinker session: its restore latency is measured from then."""
    return f"{prefix(job_id)}:tinker:woken"


def tinker_session(session_id: str) -> str:
    """JSON {team_id, user_id, ...} of a Tinker SDK session; expires unless its heartbeats refresh it."""
    return f"streamrl:tinker:session:{session_id}"


def all_keys_pattern(job_id: int) -> str:
    return f"{prefix(job_id)}:*"


def live_channel(job_id: int) -> str:
    """Pub/sub channel of the job's live events (`{"type": ..., "data": ...}`), read by the API's SSE route."""
    return f"{prefix(job_id)}:live"


def driver_heartbeat(job_id: int) -> str:
    """Refreshed by the running driver; its absence (TTL ran out) is how the controller learns the driver died."""
    return f"{prefix(job_id)}:driver:heartbeat"


def trainer_rendezvous(job_id: int) -> str:
    """JSON {host, port, world, epoch, trainer}: where the ranks of a `training.devices > 1` job join rank 0 (the
    driver's TCPStore), and for which driver epoch."""
    return f"{prefix(job_id)}:trainer:rendezvous"


def trainer_handback(job_id: int) -> str:
    """`<epoch>:<rank>`: the worker of that trainer rank is shutting down; the driver of that epoch hands the job back
    (checkpoint, stop its ranks) as it does when its own worker shuts down."""
    return f"{prefix(job_id)}:trainer:handback"


def trainer_rank(job_id: int, rank: int) -> str:
    """JSON {pid, host, node, epoch} of a joined trainer rank >= 1 (operators and tests find its process here)."""
    return f"{prefix(job_id)}:trainer:rank:{rank}"


def driver_sent(job_id: int) -> str:
    """When the controller sent `training.run_job` (set once: a driver task is never sent twice)."""
    return f"{prefix(job_id)}:driver:sent_at"


def generator_stats(job_id: int) -> str:
    """Hash of the instances' cumulative idle / weight-loading seconds (the driver reports per-iteration deltas)."""
    return f"{prefix(job_id)}:gen_stats"


def ptl_lock(job_id: int) -> str:
    """Taken by the one instance that profiles PTL(BS) for the job."""
    return f"{prefix(job_id)}:ptl_lock"


def driver_handback(job_id: int) -> str:
    """Set by a driver that stopped cleanly because its worker is shutting down (checkpointed, job not finished):
    the controller restarts it at once and does not count a failure."""
    return f"{prefix(job_id)}:driver:handback"


def driver_share(job_id: int) -> str:
    """The shared training process (its key: backend/controller/sharing.py) the job's driver was placed on; a
    restarted driver goes back to it. Cleared when the job is admitted again."""
    return f"{prefix(job_id)}:driver:share"


def driver_lost_at(job_id: int) -> str:
    """When the controller first saw the driver gone (restart backoff runs from here)."""
    return f"{prefix(job_id)}:driver:lost_at"


def worker_shutdown(node: str) -> str:
    """Set by a Celery worker's main process when it begins a warm shutdown; its task processes hand work back."""
    return f"streamrl:worker:{node}:shutdown"


def worker_registry(node: str) -> str:
    """A live Celery worker's slots: JSON {node, queues, slots, host, pid, device_kind?, devices?, tasks, beat_at};
    expires unless refreshed."""
    return f"streamrl:workers:{node}"


WORKER_REGISTRY_PATTERN = "streamrl:workers:*"


def worker_samples(node: str) -> str:
    """A worker's resource samples, newest first (a capped list: streamrl/worker_stats.py). Deliberately outside
    WORKER_REGISTRY_PATTERN, which must match registry entries only."""
    return f"streamrl:worker-samples:{node}"


def controller_wake() -> str:
    """A list the API pushes to after every job change (submit, cancel, pause, resume, scale): the controller blocks
    on it between reconcile passes instead of polling, so an idle platform reacts at once and burns no CPU."""
    return "streamrl:controller:wake"


def driver_seen(job_id: int) -> str:
    """Set by the controller once the driver it sent has beaten: from then on a missing heartbeat means it died
    (before that, the task may still be waiting for a free training worker)."""
    return f"{prefix(job_id)}:driver:seen"


def driver_marker(job_id: int) -> str:
    """Set by the running driver; if it vanishes while the driver runs, Redis lost the job's runtime state (a
    restart without persistence) and the driver re-sends what was in flight."""
    return f"{prefix(job_id)}:driver:marker"


def driver_unknown_since(job_id: int) -> str:
    """The controller found a running job with no trace of its driver in Redis (Redis lost its data)."""
    return f"{prefix(job_id)}:driver:unknown_since"


def noted(job_id: int, what: str) -> str:
    """Set once when something was said in the job's events (`what`: e.g. `pending:gen-3`, `capacity:4`,
    `sandbox`), so the controller and the runtime say it once, not every pass."""
    return f"{prefix(job_id)}:noted:{what}"


def team_noted(team_id: int, what: str) -> str:
    """`noted` for something said about a team (e.g. its monthly budget at 80%: `budget:<month>:<limit>`)."""
    return f"streamrl:team:{team_id}:noted:{what}"


def reward_tally(job_id: int, bucket: int) -> str:
    """Hash {calls, errors, last_error} of the rewards the job's instances finished in one time bucket
    (contract/reward_window.py)."""
    return f"{prefix(job_id)}:reward_tally:{bucket}"


# -- on-demand inference (backend/services/inference.py, workers/runtime/inference.py) -------------------------------
# One instance serves one (model_dir, adapter_dir) key (`inference_key`, a hash); keys are not job keys.
def inference_requests(key: str) -> str:
    """List of the instance key's pending sample requests (JSON): the API LPUSHes, the instance pops the oldest."""
    return f"streamrl:inference:{key}:requests"


def inference_state(key: str) -> str:
    """JSON {state: starting|ready|failed, error?, pid, host, node, at}: the instance's heartbeat (expires unless
    refreshed; a failed load stays a few seconds so waiting callers can read why)."""
    return f"streamrl:inference:{key}:state"


def inference_starting(key: str) -> str:
    """Set (NX, with a TTL) by the caller that sent the instance's task, until the instance writes its state: other
    callers do not send a second task meanwhile."""
    return f"streamrl:inference:{key}:starting"


def inference_reply(request_id: str) -> str:
    """List of one request's result events (JSON: accepted, tokens, done, error), pushed by the instance."""
    return f"streamrl:inference:reply:{request_id}"


def inference_retire(key: str) -> str:
    """Set (with a TTL) when the instance key is superseded (a Tinker training run saved newer sampler weights): its
    instance stops as soon as it has no request in flight or waiting, instead of after its idle timeout."""
    return f"streamrl:inference:{key}:retire"


# -- deployments and generation leases (backend/services/deployments.py, generation_leases.py) -----------------------
def deployment_key(deployment_id: int) -> str:
    """The inference key all replicas of a deployment share: one request list (`inference_requests`), replica k's
    state at `inference_state(replica_key(...))`."""
    return f"deploy-{deployment_id}"


def replica_key(deployment_id: int, replica: int) -> str:
    return f"deploy-{deployment_id}.r{replica}"


def deployment_config(deployment_id: int) -> str:
    """JSON {version, team_id, model_dir, adapters: {name: dir}, idle_s, min_replicas, max_replicas}: what the
    deployment's replicas serve (written by the API on create/update, deleted on delete: the replicas then stop)."""
    return f"streamrl:deployment:{deployment_id}:config"


def deployment_calls(deployment_id: int) -> str:
    """List of the deployment's newest calls (JSON {at, latency_s, tokens, ok}), newest first, trimmed: its metrics."""
    return f"streamrl:deployment:{deployment_id}:calls"


def deployment_batches(deployment_id: int) -> str:
    """Hash of the deployment's batch record, written by its replicas: steps, mixed_steps (steps whose rows used more
    than one adapter), max_adapters (most adapters in one step), replica (the replica that took it)."""
    return f"streamrl:deployment:{deployment_id}:batches"


def generation_leases() -> str:
    """Hash lease id -> JSON {team_id, kind, until}: generation slots held outside the jobs' instances (deployment
    replicas, evaluations), granted by backend/services/generation_leases.py and counted by the scheduler."""
    return "streamrl:generation:leases"


def evaluation_sent(evaluation_id: int) -> str:
    """Set when the evaluation's runner task was sent (its generation lease granted): not sent twice."""
    return f"streamrl:evaluation:{evaluation_id}:sent"


def generation_lease_lock() -> str:
    return "streamrl:generation:leases:lock"


def grader_reply(request_id: str) -> str:
    """List holding the result (JSON: reward, sub_rewards, error) of one POST /graders/run that ran on the generation
    pool, pushed by the worker (workers/rewards/grader_run.py) and read only by the request that made it."""
    return f"streamrl:grader-run:reply:{request_id}"


# -- shared generation instances and training processes (backend/controller/sharing.py, workers/runtime/shared.py,
# workers/runtime/shared_training.py) ----------------------------------------------------------------------------------
# One process serves the instances (or drivers) of several LoRA jobs on one base model; `key` names that process's
# place (a hash of the base model plus a slot number; training keys start with `train-`), not a job.
def share_joins(key: str) -> str:
    """List of JSON {job_id, instance_id}: instances (for a training key: {job_id}, drivers) the controller placed on
    the shared process `key`, in order."""
    return f"streamrl:shared:{key}:joins"


def share_state(key: str) -> str:
    """JSON {pid, host, node, at, members}: the shared instance's heartbeat (expires unless refreshed). It is deleted
    only together with an empty joins list (one atomic step), so a placed instance is never left without a process."""
    return f"streamrl:shared:{key}:state"


def share_starting(key: str) -> str:
    """Set (NX, with a TTL) by the controller when it sends the shared instance's task, until its first heartbeat."""
    return f"streamrl:shared:{key}:starting"


def job_preempt(job_id: int) -> str:
    """Set by the scheduler (backend/services/admission.py): JSON {reason, deadline}. The driver hands the job back
    at its next checkpoint, or at `deadline` (epoch seconds) with a checkpoint of its last step, whichever is first."""
    return f"{prefix(job_id)}:preempt"


def job_admitted(job_id: int) -> str:
    """JSON {at, iteration}: when the scheduler last admitted the job and its iteration then (a job is not preempted
    before its first checkpoint after that)."""
    return f"{prefix(job_id)}:admitted"


def scheduler_queue() -> str:
    """JSON {job_id: {position, reason, waiting_for, eta_s, needs}} of every waiting item, written by each pass."""
    return "streamrl:scheduler:queue"


def scheduler_recent() -> str:
    """Hash team id -> JSON {share, at}: each team's decayed recent standing (backend/scheduler/history.py)."""
    return "streamrl:scheduler:recent"
