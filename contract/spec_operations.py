"""The JobSpec sections about how a job runs and is watched, besides what it trains: dispatch, autoscaling,
failover, telemetry (with experiment trackers) and checkpoints. `JobSpec` (contract/spec.py) holds one of each."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from contract.catalog import DISPATCH_POLICIES, DispatchPolicy
from contract.spec_base import StrictModel, choice_list

TrackerType = Literal["mlflow", "wandb", "tensorboard"]


class DispatchSpec(StrictModel):
    policy: DispatchPolicy = Field("random", json_schema_extra=choice_list(DISPATCH_POLICIES))
    alpha: float = Field(0.2, gt=0, lt=1, description="share of prompts treated as long-tail")


class AutoscaleSpec(StrictModel):
    policy: Literal["manual", "auto"] = "manual"
    min_instances: int = Field(1, ge=1, le=1024)
    max_instances: int = Field(4, ge=1, le=1024)
    cooldown_s: float = Field(30.0, ge=0, le=86_400)
    hysteresis: int = Field(3, ge=1, le=100, description="consecutive iterations, measured at the current instance "
                            "count, that must agree before the autoscaler changes it")
    threshold_s: float = Field(0.0, ge=0, le=86_400, description="extra margin in seconds: scale only when the "
                               "imbalance exceeds what one instance more (or fewer) changes by at least this much")

    @model_validator(mode="after")
    def _bounds(self) -> AutoscaleSpec:
        if self.min_instances > self.max_instances:
            raise ValueError("min_instances must be <= max_instances")
        return self


class FailoverSpec(StrictModel):
    """What happens when a job's processes die: the controller restarts the driver from the newest checkpoint."""

    max_restarts: int = Field(3, ge=0, le=100, description="driver restarts after unplanned deaths before the job "
                              "fails (clean hand-backs on worker shutdown do not count)")
    backoff_s: float = Field(5.0, ge=0, le=3600, description="wait before restart k: backoff_s * 2**(k-1)")
    instance_crash_loop: int = Field(5, ge=1, le=1000, description="consecutive instance failures with the same "
                                     "error after which instances are no longer replaced and the job fails")
    reward_error_rate: float = Field(0.5, gt=0, le=1, description="the job fails when at least this share of the "
                                     "rewards finished within reward_error_window_s failed (8 rewards at least)")
    reward_error_window_s: float = Field(30.0, ge=5, le=3600, description="the window of reward_error_rate")


class TrackerSpec(StrictModel):
    """An experiment tracker the control plane mirrors the job to: each iteration's metrics, the spec as params and
    (MLflow) the final checkpoint. Credentials are the team's (PUT /trackers/{type}), never in the spec."""

    type: TrackerType
    experiment: str | None = Field(None, min_length=1, max_length=250, description="mlflow: experiment name "
                                   "(default: streamrl)")
    project: str | None = Field(None, min_length=1, max_length=128, description="wandb: project (default: streamrl)")
    mode: Literal["online", "offline"] | None = Field(None, description="wandb: online (default; needs the team's "
                                                      "API key) or offline (a run directory under the job's artifacts)")
    run_name: str | None = Field(None, min_length=1, max_length=250, description="default: the job's name")

    @model_validator(mode="after")
    def _fields_of_its_type(self) -> TrackerSpec:
        owners = {"experiment": "mlflow", "project": "wandb", "mode": "wandb"}
        for name, owner in owners.items():
            if getattr(self, name) is not None and self.type != owner:
                raise ValueError(f"`{name}` is a {owner} setting; this tracker is {self.type}")
        return self


class TelemetrySpec(StrictModel):
    """What each iteration keeps for the dashboard besides its metrics row, and where else it is sent."""

    samples_per_iteration: int = Field(8, ge=0, le=1024, description="full samples (prompt, response, reward)")
    lengths_per_iteration: int = Field(65_536, ge=0, le=65_536, description="response lengths (and truncation flags) "
                                       "recorded per iteration for the long-tail view; default: every sample's")
    trackers: list[TrackerSpec] = Field(default_factory=list, max_length=3, description="experiment trackers: "
                                        "mlflow, wandb, tensorboard (each at most once)")

    @field_validator("trackers")
    @classmethod
    def _each_type_once(cls, trackers: list[TrackerSpec]) -> list[TrackerSpec]:
        types = [tracker.type for tracker in trackers]
        if len(set(types)) != len(types):
            raise ValueError("each tracker type at most once")
        return trackers


class CheckpointSpec(StrictModel):
    interval: int = Field(10, ge=1, le=1_000_000, description="checkpoint every N iterations")
    keep: int = Field(3, ge=1, le=1000, description="select latest: the newest `keep`; select best: the top `keep` "
                      "by `metric` plus the newest (for resume) and any not scored yet")
    select: Literal["latest", "best"] = Field("latest", description="which checkpoints retention keeps")
    metric: str = Field("", max_length=200, description="select best: '<suite>/mean', '<suite>/pass@1' or "
                        "'<suite>/pass@k' of an `evaluation` suite (higher is better)")

    @model_validator(mode="after")
    def _metric_named(self) -> CheckpointSpec:
        if self.select == "best":
            suite, _, stat = self.metric.partition("/")
            if not suite or stat not in ("mean", "pass@1", "pass@k"):
                raise ValueError(f"metric: select best needs '<suite>/mean', '<suite>/pass@1' or '<suite>/pass@k' "
                                 f"(got {self.metric!r})")
        return self


class LimitsSpec(StrictModel):
    """What the job may use (docs/user-guide.md#usage-and-budgets): at 80% of a limit an alert (`budget`), at 100%
    the controller pauses the job at a checkpoint; raising the limit (PATCH /jobs/{id}) resumes it. None: no limit."""

    max_device_seconds: float | None = Field(None, gt=0, le=1e12, description="device-seconds of both pools (each "
                                             "iteration's time on its training devices and generation instances)")
    max_tokens: int | None = Field(None, gt=0, le=10**15, description="tokens generated plus tokens trained")
