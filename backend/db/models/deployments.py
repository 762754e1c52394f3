"""Deployments: a base model pinned with some of the team's adapters, served by replicas of one multi-LoRA instance
(backend/services/deployments.py, workers/runtime/deployment.py)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import ForeignKey, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from backend.db.base import Base, created_at_column


class Deployment(Base):
    __tablename__ = "deployments"
    __table_args__ = (UniqueConstraint("team_id", "name"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    team_id: Mapped[int] = mapped_column(ForeignKey("teams.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(64))  # the model id on /openai/v1
    base_model: Mapped[str] = mapped_column(String(400))  # a registered model of the team (its name)
    adapters: Mapped[list[str]]  # model ids (ft:..., job:<id>@best|@last|@N), served as LoRA adapters
    min_replicas: Mapped[int] = mapped_column(default=0)  # 0: scale to zero when idle
    max_replicas: Mapped[int] = mapped_column(default=1)
    idle_s: Mapped[float] = mapped_column(default=300.0)  # a replica above min_replicas stops after this long idle
    version: Mapped[int] = mapped_column(default=1)  # bumped when what is served changes: replicas restart
    created_at: Mapped[datetime] = created_at_column()
    updated_at: Mapped[datetime] = created_at_column()
