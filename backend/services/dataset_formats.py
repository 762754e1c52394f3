"""Dataset uploads in JSONL, Parquet or CSV, validated row by row into the one stored form: JSONL.

Every row must be a prompt row of contract/prompt_rows.py (`prompt` text or chat messages, or OpenAI `messages`);
other columns are kept (they reach the reward as `meta`). Errors name the row (`line N` for JSONL, `row N` for
Parquet/CSV, 1-based) and the column; the first bad row refuses the whole file, so a dataset never half-imports.
Parquet and CSV are read with pyarrow; a CSV `messages` (or `prompt`) cell holding a JSON list is parsed as one.
"""

from __future__ import annotations

import io
import json
from typing import Any

from backend.services.errors import InvalidInput
from backend.services.strict_json import BadJson, check_text, strict_json_loads
from contract.prompt_rows import RowError, normalize_row

FORMATS = ("jsonl", "parquet", "csv")
CHAT_COLUMNS = ("messages", "prompt")


def format_of(filename: str | None, content: bytes) -> str:
    name = (filename or "").lower()
    if name.endswith(".parquet") or content[:4] == b"PAR1":
        return "parquet"
    if name.endswith(".csv"):
        return "csv"
    return "jsonl"


def _row_error(where: str, reason: str) -> InvalidInput:
    return InvalidInput(f"{where}: {reason}", loc=("body", "file", where))


def _check_row(row: Any, where: str) -> None:
    try:
        normalize_row(row)
    except RowError as exc:
        raise _row_error(where, str(exc)) from None


def _jsonl_rows(content: bytes) -> list[tuple[str, Any]]:
    """(where, row) per non-blank line, split on `\n` only, each line strict JSON."""
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad_line = content.count(b"\n", 0, exc.start) + 1
        raise _row_error(f"line {bad_line}", "not valid UTF-8") from None
    rows = []
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        where = f"line {number}"
        if "\r" in line[:-1]:  # readers with universal newlines would split the line there
            raise _row_error(where, "a carriage return inside a line (lines end with \\n or \\r\\n)")
        try:
            row = strict_json_loads(line)
        except BadJson as exc:
            place = "".join(f"[{part!r}]" for part in exc.loc)
            raise _row_error(where, f"{place} {exc}" if place else str(exc)) from None
        if not isinstance(row, dict):
            raise _row_error(where, "each line must be a JSON object")
        rows.append((where, row))
    return rows


def _table_rows(content: bytes, fmt: str) -> list[tuple[str, Any]]:
    import pyarrow as pa
    import pyarrow.csv as pa_csv
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(io.BytesIO(content)) if fmt == "parquet" else pa_csv.read_csv(io.BytesIO(content))
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise InvalidInput(f"not a readable {fmt} file ({exc})", loc=("body", "file")) from None
    rows = []
    for index, row in enumerate(table.to_pylist(), start=1):
        where = f"row {index}"
        for column in CHAT_COLUMNS:  # CSV cells are text: a JSON list there is a conversation
            value = row.get(column)
            if isinstance(value, str) and value.lstrip().startswith("["):
                try:
                    row[column] = json.loads(value)
                except json.JSONDecodeError as exc:
                    raise _row_error(where, f"column `{column}`: not a JSON list of messages ({exc.msg})") from None
        try:
            text = json.dumps(row, allow_nan=False, ensure_ascii=False)
            check_text(text)
        except (TypeError, ValueError, BadJson) as exc:
            raise _row_error(where, f"a value that is not plain JSON ({exc})") from None
        rows.append((where, row))
    return rows


def parse_upload(content: bytes, filename: str | None) -> tuple[bytes, int]:
    """(the JSONL to store, row count); `InvalidInput` naming the first bad row and column."""
    fmt = format_of(filename, content)
    rows = _jsonl_rows(content) if fmt == "jsonl" else _table_rows(content, fmt)
    for where, row in rows:
        _check_row(row, where)
    if not rows:
        raise InvalidInput("the dataset has no rows", loc=("body", "file"))
    if fmt == "jsonl":
        return content, len(rows)
    stored = "".join(json.dumps(row, ensure_ascii=False) + "\n" for _, row in rows).encode()
    return stored, len(rows)
