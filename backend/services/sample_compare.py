"""The same prompt's samples side by side: which prompts several runs (or iterations of one run) answered, and one
prompt's samples grouped by run and iteration, with the iterations a checkpoint was saved at marked.

Samples are matched by their prompt text (the dashboard stores a few samples per iteration, `job_samples`); only the
team's jobs are read, any other id is 404.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import groupby

from sqlalchemy import BigInteger, cast, distinct, func, literal, select
from sqlalchemy.orm import Session

from backend.db.models import Checkpoint, Job, JobSample, Team
from backend.schemas.jobs import SamplePublic
from backend.schemas.samples import IterationSamples, PromptSamplesPublic, PromptsPublic, PromptSummary, RunSamples
from backend.services.errors import not_found

MAX_SIDE_BY_SIDE_SAMPLES = 2000


def team_jobs(session: Session, team: Team, job_ids: Sequence[int]) -> list[Job]:
    """The jobs in the order asked (duplicates dropped); 404 naming the first id that is not the team's."""
    wanted = list(dict.fromkeys(job_ids))
    found = {job.id: job for job in session.scalars(select(Job).where(Job.id.in_(wanted), Job.team_id == team.id))}
    for job_id in wanted:
        if job_id not in found:
            raise not_found("job", job_id)
    return [found[job_id] for job_id in wanted]


def shared_prompts(*, session: Session, team: Team, job_ids: Sequence[int], query: str | None,
                   limit: int) -> PromptsPublic:
    """Prompts with samples in these jobs, most runs first, then most iterations (those worth comparing)."""
    jobs = team_jobs(session, team, job_ids)
    runs = func.count(distinct(JobSample.job_id))
    # (job, iteration) pairs as one number: SQLite has no row values in count(distinct ...)
    pair = cast(JobSample.job_id, BigInteger) * literal(2**31, BigInteger) + JobSample.iteration
    iterations = func.count(distinct(pair))
    listing = (
        select(JobSample.prompt, runs, iterations, func.count())
        .where(JobSample.job_id.in_([job.id for job in jobs]))
        .group_by(JobSample.prompt)
    )
    if query:
        listing = listing.where(JobSample.prompt.icontains(query, autoescape=True))
    total = session.scalar(select(func.count()).select_from(listing.subquery())) or 0
    rows = session.execute(listing.order_by(runs.desc(), iterations.desc(), JobSample.prompt).limit(limit)).all()
    data = [PromptSummary(prompt=p, runs=r, iterations=i, samples=n) for p, r, i, n in rows]
    return PromptsPublic(data=data, count=total)


def prompt_samples(*, session: Session, team: Team, job_ids: Sequence[int], prompt: str) -> PromptSamplesPublic:
    """Every stored sample of `prompt` in these jobs, grouped by job (in the order asked) and iteration."""
    jobs = team_jobs(session, team, job_ids)
    ids = [job.id for job in jobs]
    samples = session.scalars(
        select(JobSample)
        .where(JobSample.job_id.in_(ids), JobSample.prompt == prompt)
        .order_by(JobSample.job_id, JobSample.iteration, JobSample.id)
        .limit(MAX_SIDE_BY_SIDE_SAMPLES)
    ).all()
    saved = set(session.execute(select(Checkpoint.job_id, Checkpoint.iteration).where(Checkpoint.job_id.in_(ids))))
    by_job = {job_id: list(rows) for job_id, rows in groupby(samples, key=lambda s: s.job_id)}
    runs = []
    for job in jobs:
        iterations = []
        for iteration, group in groupby(by_job.get(job.id, []), key=lambda s: s.iteration):
            rows = [SamplePublic.model_validate(s) for s in group]
            rewards = [s.reward for s in rows if s.reward_error is None]
            iterations.append(IterationSamples(
                iteration=iteration, checkpoint=(job.id, iteration) in saved,
                reward_mean=sum(rewards) / len(rewards) if rewards else None, samples=rows,
            ))
        runs.append(RunSamples(job_id=job.id, name=job.name, iterations=iterations))
    return PromptSamplesPublic(prompt=prompt, runs=runs, count=len(samples))
