"""Built-in tasks: correct answers, stable ids, heavy tail in the right range, JSONL round trip, load_dataset."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
from typer.testing import CliRunner

from contract.spec import DatasetSpec
from workers.datasets import generate_rows, load_dataset, read_jsonl, write_jsonl


def test_arithmetic_answers_are_correct() -> None:
    rows = generate_rows("arithmetic", 300, seed=1, digits=3, ops="+-*")
    for row in rows:
        lhs = row["prompt"].removesuffix("=")
        assert row["prompt"].endswith("=")
        assert int(row["answer"]) == eval(lhs)  # noqa: S307 - the prompts are our own digit-op-digit strings
        assert int(row["answer"]) >= 0
    assert {r["prompt"][3] for r in rows} == set("+-*")


def test_rows_are_deterministic_with_stable_unique_ids() -> None:
    a = generate_rows("long_tail", 50, seed=4)
    assert a == generate_rows("long_tail", 50, seed=4)
    assert len({r["prompt_id"] for r in a}) == 50
    assert generate_rows("long_tail", 50, seed=5) != a
    train = generate_rows("arithmetic", 20, seed=0)
    held_out = generate_rows("arithmetic", 20, seed=0, split="eval")
    assert not {r["prompt_id"] for r in train} & {r["prompt_id"] for r in held_out}


def test_long_tail_is_heavy_tailed_within_bounds() -> None:
    rows = generate_rows("long_tail", 2000, seed=0)
    for row in rows[:100]:
        k, pattern = row["prompt"].removeprefix("rep ").removesuffix(":").split(" ")
        assert row["answer"] == pattern * int(k)
    lengths = [len(r["answer"]) for r in rows]
    ratio = max(lengths) / statistics.median(lengths)
    assert 10 <= ratio <= 20, ratio
    assert statistics.quantiles(lengths, n=10)[-1] >= 3 * statistics.median(lengths)  # p90 far above the median


def test_bad_parameters_name_the_problem() -> None:
    with pytest.raises(ValueError, match="digits"):
        generate_rows("arithmetic", 3, digits=0)
    with pytest.raises(ValueError, match="ops"):
        generate_rows("arithmetic", 3, ops="/")
    with pytest.raises(ValueError, match="unknown built-in task"):
        generate_rows("poetry", 3)


def test_jsonl_round_trip_and_errors_name_the_line(tmp_path: Path) -> None:
    rows = generate_rows("arithmetic", 5)
    assert write_jsonl(rows, tmp_path / "a.jsonl") == 5
    assert read_jsonl(tmp_path / "a.jsonl") == rows
    (tmp_path / "bad.jsonl").write_text('{"prompt": "ok"}\n{"prompt": \n')
    with pytest.raises(ValueError, match="bad.jsonl:2"):
        read_jsonl(tmp_path / "bad.jsonl")
    (tmp_path / "noprompt.jsonl").write_text('{"question": "x"}\n')
    with pytest.raises(ValueError, match="noprompt.jsonl:1: .*prompt"):
        read_jsonl(tmp_path / "noprompt.jsonl")


def test_load_dataset_for_builtin_and_path_specs(tmp_path: Path) -> None:
    spec = DatasetSpec(builtin="long_tail", num_prompts=30, eval_prompts=7)
    assert len(load_dataset(spec, split="train")) == 30
    assert len(load_dataset(spec, split="eval")) == 7
    write_jsonl([{"prompt": f"p{i}", "answer": str(i)} for i in range(10)], tmp_path / "d.jsonl")
    path_spec = DatasetSpec(path=str(tmp_path / "d.jsonl"), eval_prompts=3)
    train, held_out = load_dataset(path_spec, split="train"), load_dataset(path_spec, split="eval")
    assert [r["prompt"] for r in train] == [f"p{i}" for i in range(7)]
    assert [r["prompt_id"] for r in held_out] == ["d-8", "d-9", "d-10"]
    with pytest.raises(ValueError, match="split"):
        load_dataset(spec, split="test")


def test_cli_make_dataset_and_make_model(tmp_path: Path) -> None:
    from streamrl.cli.main import app

    runner = CliRunner()
    result = runner.invoke(app, ["make-dataset", "--task", "arithmetic", "--n", "4", "--out",
                                 str(tmp_path / "a.jsonl"), "--param", "digits=1", "--param", "ops=*"])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in (tmp_path / "a.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and all("*" in r["prompt"] for r in rows)
    result = runner.invoke(app, ["make-model", "--preset", "tiny-1m", "--out", str(tmp_path / "m")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "m" / "model.safetensors").exists()
    again = runner.invoke(app, ["make-model", "--preset", "tiny-1m", "--out", str(tmp_path / "m")])
    assert again.exit_code == 1 and "already holds a model" in again.output
