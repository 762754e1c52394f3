"""A full checkpoint disk, on real workers: the checkpoint directory is a small tmpfs that holds one complete
checkpoint and the weights of the next, so the next save fails in `torch.save` the way a full disk makes it fail
(`RuntimeError: [enforce fail at inline_container.cc] ... unexpected pos`, not an OSError)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from runtime_platform import Platform, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]
P = 4  # prompts per iteration


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A mount point for a tmpfs; unmounted afterwards."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    yield mount_point
    subprocess.run(["umount", "-l", str(mount_point)], capture_output=True, check=False)


def mount_tmpfs(directory: Path, size_bytes: int, *, remount: bool = False) -> None:
    options = f"{'remount,' if remount else ''}size={size_bytes}"
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(directory)], capture_output=True,
                          text=True, check=False)
    if done.returncode != 0:
        if remount:
            raise AssertionError(f"remounting {directory} failed: {done.stderr}")
        pytest.skip(f"mounting a tmpfs needs root (CAP_SYS_ADMIN): {done.stderr.strip()}")


def test_full_checkpoint_disk_is_an_event_and_training_goes_on(platform: Platform, tiny_model_dir: Path,
                                                                small_disk: Path) -> None:
    weights = (tiny_model_dir / "model.safetensors").stat().st_size
    # a checkpoint is the weights (W) plus AdamW's two moments (2 W): 4.5 W holds one and the next one's weights
    mount_tmpfs(small_disk, int(4.5 * weights))
    job_id = platform.submit(mode="sync", checkpoint={"interval": 2},
                             training={"iterations": 10, "prompts_per_iteration": P})
    checkpoints = Path(platform.env["STREAMRL_DATA_DIR"]) / "artifacts" / "jobs" / str(job_id) / "checkpoints"
    checkpoints.parent.mkdir(parents=True, exist_ok=True)
    checkpoints.symlink_to(small_disk, target_is_directory=True)  # before the first checkpoint (iteration 2)

    failed = wait_until(lambda: [e for e in platform.events(job_id) if "checkpoint save failed" in e], 300,
                        "the checkpoint-failed event", platform.logs_tail)
    assert failed[0].startswith(f"checkpoint save failed: no space left on {checkpoints}"), failed
    assert "iteration 4" in failed[0] and "training goes on" in failed[0], failed
    assert not (small_disk / "iter_000004.tmp").exists(), "the partial checkpoint was left behind"
    assert (small_disk / "iter_000002" / "trainer_state.pt").is_file(), "the newest complete checkpoint is gone"

    # the operator frees space: a later checkpoint is written (two more may fail before the job would)
    mount_tmpfs(small_disk, 64 << 20, remount=True)
    job = platform.wait_done(job_id, timeout_s=300)
    assert job.error is None
    assert len(platform.iterations(job_id)) == 10
    assert (small_disk / "iter_000010" / "trainer_state.pt").is_file()
    assert not [p for p in small_disk.iterdir() if p.name.endswith(".tmp")]
