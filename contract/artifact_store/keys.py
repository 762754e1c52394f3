"""Object keys: every artifact of a job is under its team's prefix, `teams/<team>/jobs/<job>/...`."""

from __future__ import annotations


def team_prefix(team_id: int) -> str:
    return f"teams/{team_id}"


def job_prefix(team_id: int, job_id: int) -> str:
    return f"{team_prefix(team_id)}/jobs/{job_id}"


def checkpoints_prefix(team_id: int, job_id: int) -> str:
    return f"{job_prefix(team_id, job_id)}/checkpoints"


def checkpoint_key(team_id: int, job_id: int, name: str) -> str:
    """`name`: the checkpoint directory's name (`iter_000010`)."""
    return f"{checkpoints_prefix(team_id, job_id)}/{name}"


def weights_prefix(team_id: int, job_id: int) -> str:
    return f"{job_prefix(team_id, job_id)}/weights"


def weights_key(team_id: int, job_id: int, version: int) -> str:
    return f"{weights_prefix(team_id, job_id)}/v{version:06d}"


def dataset_key(team_id: int, dataset_id: int) -> str:
    """An uploaded dataset: one version holding `<id>.jsonl`."""
    return f"{team_prefix(team_id)}/datasets/{dataset_id}"


def model_key(team_id: int, model_id: int) -> str:
    """An uploaded model: one version holding its directory (config.json, weights, tokenizer)."""
    return f"{team_prefix(team_id)}/models/{model_id}"
