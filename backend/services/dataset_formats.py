"""Dataset uploads in JSONL, Parquet or CSV, validated row by row into the one stored form: JSONL.

Every row must be a prompt row of contract/prompt_rows.py (`prompt` text or chat messages, or OpenAI `messages`);
other columns are kept (they reach the reward as `meta`). Errors name the row (`line N` for JSONL, `row N` for
Parquet/CSV, 1-based) and the column; the first bad row refuses the whole file, so a dataset never half-imports.
Parquet and CSV are read with pyarrow; a CSV `messages` (or `prompt`) cell holding a JSON list is parsed as one
(strict JSON: nesting bounded).

Bounds before anything is materialised (a small compressed file can declare millions of rows): at most `MAX_ROWS`
rows (JSONL and CSV: lines counted first; Parquet: the row count in its footer), and a Parquet file's decoded size
(the footer's uncompressed sizes, then each row group as read) at most `MAX_DECODED_BYTES`. Past either: a 413
naming the limit, before the rows become Python objects.
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
MAX_ROWS = 200_000
MAX_DECODED_BYTES = 256 << 20


class UploadTooLarge(InvalidInput):
    """413 in the 422 shape (loc body.file): the file is within the upload cap but holds more than a dataset may."""

    status_code = 413

    def __init__(self, msg: str) -> None:
        super().__init__(msg, loc=("body", "file"))


def _check_lines(content: bytes) -> None:
    lines = content.count(b"\n") + (0 if content.endswith(b"\n") else 1)
    if lines > MAX_ROWS + 1:  # + a CSV header
        raise UploadTooLarge(f"the file has {lines} lines; a dataset holds at most {MAX_ROWS} rows")


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


def _parquet_table(content: bytes) -> Any:
    """The table, its footer's row count and decoded sizes checked first, then each row group's as it is read."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    parquet = pq.ParquetFile(io.BytesIO(content))
    meta = parquet.metadata
    if meta.num_rows > MAX_ROWS:
        raise UploadTooLarge(f"the Parquet file declares {meta.num_rows} rows; a dataset holds at most {MAX_ROWS}")
    declared = sum(max(meta.row_group(i).total_byte_size,
                       sum(meta.row_group(i).column(c).total_uncompressed_size for c in range(meta.num_columns)))
                   for i in range(meta.num_row_groups))
    if declared > MAX_DECODED_BYTES:
        raise UploadTooLarge(f"the Parquet file decodes to {declared} bytes; at most {MAX_DECODED_BYTES}")
    groups, rows, decoded = [], 0, 0
    for i in range(meta.num_row_groups):
        group = parquet.read_row_group(i)
        rows, decoded = rows + group.num_rows, decoded + group.nbytes
        if rows > MAX_ROWS or decoded > MAX_DECODED_BYTES:
            raise UploadTooLarge(f"the Parquet file holds more than {MAX_ROWS} rows or {MAX_DECODED_BYTES} bytes "
                                 "decoded")
        groups.append(group)
    return pa.concat_tables(groups) if groups else parquet.schema_arrow.empty_table()


def _table_rows(content: bytes, fmt: str) -> list[tuple[str, Any]]:
    import pyarrow as pa
    import pyarrow.csv as pa_csv

    try:
        if fmt == "parquet":
            table = _parquet_table(content)
        else:
            _check_lines(content)  # a CSV's table is about its text's size: rows are what multiply
            table = pa_csv.read_csv(io.BytesIO(content))
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise InvalidInput(f"not a readable {fmt} file ({exc})", loc=("body", "file")) from None
    if table.num_rows > MAX_ROWS:
        raise UploadTooLarge(f"the file holds {table.num_rows} rows; a dataset holds at most {MAX_ROWS}")
    try:
        pylist = table.to_pylist()
    except (pa.ArrowException, ValueError) as exc:  # e.g. a string column that is not UTF-8
        raise InvalidInput(f"not a readable {fmt} file ({type(exc).__name__}: {str(exc)[:200]})",
                           loc=("body", "file")) from None
    rows = []
    for index, row in enumerate(pylist, start=1):
        where = f"row {index}"
        for column in CHAT_COLUMNS:  # CSV cells are text: a JSON list there is a conversation
            value = row.get(column)
            if isinstance(value, str) and value.lstrip().startswith("["):
                try:
                    row[column] = strict_json_loads(value)
                except BadJson as exc:
                    raise _row_error(where, f"column `{column}`: not a JSON list of messages ({exc})") from None
        try:
            text = json.dumps(row, allow_nan=False, ensure_ascii=False)
            check_text(text)
        except (TypeError, ValueError, RecursionError, BadJson) as exc:
            raise _row_error(where, f"a value that is not plain JSON ({type(exc).__name__}: {exc})") from None
        rows.append((where, row))
    return rows


def parse_upload(content: bytes, filename: str | None) -> tuple[bytes, int]:
    """(the JSONL to store, row count); `InvalidInput` naming the first bad row and column."""
    fmt = format_of(filename, content)
    if fmt == "jsonl":
        _check_lines(content)
    rows = _jsonl_rows(content) if fmt == "jsonl" else _table_rows(content, fmt)
    for where, row in rows:
        _check_row(row, where)
    if not rows:
        raise InvalidInput("the dataset has no rows", loc=("body", "file"))
    if fmt == "jsonl":
        return content, len(rows)
    stored = "".join(json.dumps(row, ensure_ascii=False) + "\n" for _, row in rows).encode()
    return stored, len(rows)
