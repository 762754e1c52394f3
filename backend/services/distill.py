"""Submit-time checks of an on-policy distillation job's teacher (`algorithm.teacher`, algorithm distill).

The teacher scores the student's token ids as its own (workers/runtime/teacher.py), so both must share a tokenizer:
the same token -> id map. `tokenizer_fingerprint` hashes that map (tokenizer.json's vocabulary and added tokens,
else vocab.json + merges.txt, else tokenizer.model's bytes); config `vocab_size` may differ (padded embeddings, as
across one family's sizes) and is not compared. A teacher the team has not registered is a 404, as any other
team's object is: the answer does not tell whether another team has a model of that name.
"""

from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from pathlib import Path

from sqlalchemy.orm import Session

from backend.db.models import Model
from backend.services.errors import InvalidInput, NotFound
from backend.services.graders import is_reward_model
from backend.services.models import find_model
from contract.spec import JobSpec

LOC = ("body", "algorithm", "teacher")


@lru_cache(maxsize=64)
def _fingerprint(directory: str, stamp: float) -> str | None:
    model_dir = Path(directory)
    digest = hashlib.sha256()
    if (model_dir / "tokenizer.json").is_file():
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        digest.update(json.dumps(sorted(tokenizer.get_vocab(with_added_tokens=True).items())).encode())
    elif (model_dir / "vocab.json").is_file():
        digest.update((model_dir / "vocab.json").read_bytes())
        if (model_dir / "merges.txt").is_file():
            digest.update((model_dir / "merges.txt").read_bytes())
    elif (model_dir / "tokenizer.model").is_file():
        digest.update((model_dir / "tokenizer.model").read_bytes())
    else:
        return None
    return digest.hexdigest()


def tokenizer_fingerprint(model_dir: Path) -> str | None:
    """A hash of the directory's token -> id map (None: no tokenizer file there); cached until its files change."""
    stamps = [p.stat().st_mtime for p in (model_dir / n for n in ("tokenizer.json", "vocab.json", "tokenizer.model"))
              if p.is_file()]
    return _fingerprint(str(model_dir), max(stamps, default=0.0))


def check_teacher(session: Session, team_id: int, spec: JobSpec, student: Model) -> Model | None:
    """The teacher model of a distill job (None for other algorithms); NotFound when the team has no model of that
    name, InvalidInput when it is not ready, not a causal LM, or its tokenizer is not the student's."""
    name = spec.algorithm.teacher
    if name is None:
        return None
    teacher = find_model(session=session, team_id=team_id, name=name)
    if teacher is None:
        raise NotFound(f"algorithm.teacher: model {name!r} is not registered for this team (POST /models)")
    if teacher.state != "ready":
        why = f": {teacher.error}" if teacher.state == "failed" and teacher.error else " (wait until it is ready)"
        raise InvalidInput(f"teacher {name!r} is {teacher.state}, not ready{why}", loc=LOC)
    if is_reward_model(teacher.card):
        raise InvalidInput(f"teacher {name!r} is a sequence-classification reward model, not a causal language "
                           "model that can score tokens", loc=LOC)
    ours, theirs = tokenizer_fingerprint(Path(student.path)), tokenizer_fingerprint(Path(teacher.path))
    if ours is None or ours != theirs:
        raise InvalidInput(f"teacher {name!r} and student {spec.model!r} do not share a tokenizer (their token -> id "
                           "maps differ): distillation scores the student's token ids with the teacher, so both "
                           "must use the same tokenizer", loc=LOC)
    return teacher
