"""Frozen base weights shared by the training processes of a host (workers/models/shared_base.py): the same
training numbers as private copies, one file per base model (a LoRA job's base and a full fine-tune's reference
alike), pages the kernel shares between processes, and a file no process can corrupt or half-write."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from test_distributed import make_spec_kl, run_iterations

from workers.models import shared_base
from workers.training.trainer import Trainer

torch.set_num_threads(1)
LORA = {"rank": 4, "alpha": 8.0, "target_modules": None}
ROOT = Path(__file__).resolve().parents[2]


def mapped_files() -> set[str]:
    return {line.split()[-1] for line in Path("/proc/self/maps").read_text().splitlines() if line.endswith(".bin")}


def test_mapped_base_trains_exactly_as_a_private_copy(tiny_model_dir: Path, tmp_path: Path) -> None:
    private = Trainer(tiny_model_dir, make_spec_kl(lora=LORA))
    shared = Trainer(tiny_model_dir, make_spec_kl(lora=LORA), base_cache=tmp_path)
    mapped = shared.mapped_base
    assert mapped is not None and mapped.written and str(mapped.path) in mapped_files()
    assert mapped.path.stat().st_mode & 0o077 == 0  # the platform's user only
    frozen = {id(p) for _, p in shared_base.frozen_parameters([shared.model])}
    assert frozen and all(".lora_" in name for name, p in shared.model.named_parameters() if id(p) not in frozen)
    steps_private, steps_shared = run_iterations(private, 3), run_iterations(shared, 3)
    assert [s["loss"] for s in steps_shared] == [s["loss"] for s in steps_private]
    assert steps_shared[-1]["kl"] > 0  # the adapter moved; the mapped base is the KL reference
    # a second LoRA job and a full fine-tune's reference map the same file: one copy per base model
    again = Trainer(tiny_model_dir, make_spec_kl(lora={**LORA, "rank": 8}), base_cache=tmp_path)
    full = Trainer(tiny_model_dir, make_spec_kl(), base_cache=tmp_path)
    assert again.mapped_base is not None and not again.mapped_base.written and again.mapped_base.path == mapped.path
    assert full.mapped_base is not None and full.mapped_base.path == mapped.path
    assert not any(id(p) in {id(q) for _, q in shared_base.frozen_parameters([full.model])}
                   for p in full.model.parameters())  # the full fine-tune's policy trains: private
    assert list(tmp_path.iterdir()) == [mapped.path]  # no temporary file left behind


def test_a_write_stays_in_its_process_and_a_bad_file_is_rewritten(tiny_model_dir: Path, tmp_path: Path) -> None:
    trainer = Trainer(tiny_model_dir, make_spec_kl(lora=LORA), base_cache=tmp_path)
    assert trainer.mapped_base is not None
    path, before = trainer.mapped_base.path, trainer.mapped_base.path.read_bytes()
    weight = trainer.model.get_base_model().model.embed_tokens.weight
    with torch.no_grad():
        weight.add_(1.0)  # copy-on-write: this process's page, never the file other processes map
    assert path.read_bytes() == before
    path.write_bytes(before[: len(before) // 2])  # a file cut short (a full disk, an operator)
    rebuilt = Trainer(tiny_model_dir, make_spec_kl(lora=LORA), base_cache=tmp_path)
    assert rebuilt.mapped_base is not None and rebuilt.mapped_base.written and path.read_bytes() == before


def test_files_unused_for_weeks_are_pruned_when_another_is_written(tiny_model_dir: Path, tmp_path: Path) -> None:
    stale, fresh = tmp_path / ("0" * 32 + ".bin"), tmp_path / ("1" * 32 + ".bin")
    for path in (stale, fresh):
        path.write_bytes(b"x")
    weeks_ago = time.time() - (shared_base.UNUSED_DAYS + 1) * 86400
    os.utime(stale, (weeks_ago, weeks_ago))
    trainer = Trainer(tiny_model_dir, make_spec_kl(lora=LORA), base_cache=tmp_path)
    assert trainer.mapped_base is not None
    assert not stale.exists() and fresh.exists() and trainer.mapped_base.path.exists()


CHILD = """
import sys, torch
sys.path.insert(0, {tests!r})
from test_distributed import make_spec_kl, run_iterations
from workers.training.trainer import Trainer
torch.set_num_threads(1)
trainer = Trainer({model!r}, make_spec_kl(lora={lora!r}), base_cache={cache!r})
run_iterations(trainer, 1)  # touches every base weight
print(trainer.mapped_base.path, flush=True)
sys.stdin.readline()  # stay alive while the parent reads our memory map
"""


def mapping_memory(pid: int, path: str) -> dict[str, int]:
    """Rss / Shared_Clean / Private_* (kB) summed over `pid`'s mappings of `path`."""
    totals: dict[str, int] = {}
    inside = False
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        if "-" in line.split(" ")[0] and len(line.split()) >= 5:  # a mapping's header line
            inside = line.endswith(path)
        elif inside and line.split(":")[0] in ("Rss", "Shared_Clean", "Private_Clean", "Private_Dirty"):
            key, value = line.split(":")
            totals[key] = totals.get(key, 0) + int(value.split()[0])
    return totals


@pytest.mark.slow
def test_two_training_processes_share_the_base_pages(tiny_model_dir: Path, tmp_path: Path) -> None:
    code = CHILD.format(tests=str(Path(__file__).parent), model=str(tiny_model_dir), lora=LORA, cache=str(tmp_path))
    children = [subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True) for _ in range(2)]
    try:
        paths = [child.stdout.readline().strip() for child in children if child.stdout is not None]
        assert len(set(paths)) == 1 and paths[0].endswith(".bin"), paths
        size_kb = Path(paths[0]).stat().st_size // 1024
        for child in children:
            memory = mapping_memory(child.pid, paths[0])
            # every page of the base is resident and shared with the other process; none is this process's own
            assert memory["Shared_Clean"] >= 0.9 * size_kb, memory
            assert memory["Private_Dirty"] == 0, memory
    finally:
        for child in children:
            child.communicate("\n", timeout=60)
    assert all(child.returncode == 0 for child in children)


def test_trainers_of_one_process_hold_one_resident_copy_and_train_apart(tiny_model_dir: Path) -> None:
    """Without a host file (a GPU trainer, or no cache) the drivers of one shared training process still hold one
    copy: a later trainer's frozen tensors are an earlier one's, and training one adapter leaves the other's
    numbers exactly as alone."""
    first = Trainer(tiny_model_dir, make_spec_kl(lora=LORA))
    second = Trainer(tiny_model_dir, make_spec_kl(lora=LORA))
    assert first.mapped_base is None and second.resident_shared_bytes > 0
    held = {name: p.data_ptr() for name, p in shared_base.frozen_parameters([first.model])}
    theirs = {name: p.data_ptr() for name, p in shared_base.frozen_parameters([second.model])}
    assert held and theirs == held
    alone = [s["loss"] for s in run_iterations(first, 3)]
    assert [s["loss"] for s in run_iterations(second, 3)] == alone  # same seed and spec: the first's steps left
    # the shared base untouched
