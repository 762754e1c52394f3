"""The continuous-batching decode loop behind `HFEngine` (transformers models, KV cache, backfill).

Layout invariant: the batch shares one KV cache of shape (B, H, W, D) per layer. Every row's valid tokens occupy a
contiguous, RIGHT-ALIGNED column range [start[b], W): rows are left-padded, so a decode step appends one column for
all rows. A row's next position id is W - start[b] (the number of tokens it has in the cache). Finished rows are
removed (index_select) and leading columns no row uses are cropped; new requests are prefilled together
(left-padded) and spliced in as new rows, padding the narrower of the two caches on the left with zeros. The cache's
layers keep spare columns, so a decode step writes its column in place (kv_columns.py).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch

from workers.generation.engine import GenerationRequest, GenerationResult
from workers.generation.engines.feed import RequestFeed
from workers.generation.engines.kv_columns import MIN_SPARE, SPARE_DIVISOR, SpareColumnsCache, spare_layers
from workers.generation.engines.sampling import logprob_temperature, request_rng, sample_tokens


@dataclass
class _Row:
    request: GenerationRequest
    rng: random.Random
    started_at: float
    response_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish_reason: str | None = None
    text: str | None = None  # set when a stop string cut the text
    version_marks: list[list[int]] = field(default_factory=list)  # [token_index, version] where the version changed


class ContinuousBatcher:
    """One `generate_stream` call: consumes requests lazily, yields results in finish order.

    A `None` item from the request iterator means "nothing to admit right now": the loop keeps decoding the rows it
    has (or sleeps briefly if it has none) and asks again at the next free slot.

    Admission is batched: while rows are decoding, new requests are pulled only once `min_free_slots` slots are free,
    so that one prefill forward (and one cache splice) serves several finished rows instead of one each. A prefill
    costs about as much as a decode step on small models, so per-row admission nearly doubles the step count when
    short requests churn through a batch behind a long one.
    """

    def __init__(self, model: Any, tokenizer: Any, *, max_batch_size: int, eos_ids: set[int], seed_rng: random.Random,
                 ignore_eos: bool = False, min_free_slots: int = 1,
                 version_of: Callable[[str | None], int] = lambda adapter: 0,
                 adapters: Callable[[list[str | None]], AbstractContextManager[Any]] | None = None,
                 kv_spare: tuple[int, int | None] = (MIN_SPARE, SPARE_DIVISOR)) -> None:
        """`version_of(adapter)`: the weights version the model holds now for that adapter (None: its own weights),
        read at every token: weights may change between the steps of `run`, in place, and rows keep their KV cache.
        `adapters(names)`: a context in which one forward pass applies each row's adapter (mixed-adapter batches,
        engines/hf_multi_lora.py); None: every row runs on the model as it is. `kv_spare`: the cache layers' spare
        columns (min_spare, spare_divisor) (kv_columns.py; (0, None) copies the cache at every step)."""
        self.model, self.tokenizer = model, tokenizer
        self.version_of = version_of
        self.adapters = adapters
        self.max_batch_size = max_batch_size
        self.min_free_slots = max(1, min(min_free_slots, max_batch_size))
        self.eos_ids = set() if ignore_eos else eos_ids
        self.seed_rng = seed_rng
        self.max_positions = int(getattr(model.config, "max_position_embeddings", 1 << 30))
        self.device = model.device
        self.kv_spare = kv_spare
        self.rows: list[_Row] = []
        self.cache = self._new_cache()
        self.starts = torch.zeros(0, dtype=torch.long, device=self.device)  # (B,)
        self.last_tokens = torch.zeros(0, dtype=torch.long, device=self.device)  # (B,)
        self.decode_steps = 0
        self.prefill_sizes: list[int] = []  # requests admitted by each prefill forward

    # ---- main loop ----
    def run(self, requests: Iterable[GenerationRequest | None]) -> Iterator[GenerationResult]:
        feed = RequestFeed(requests)
        while True:
            admitted: list[GenerationRequest] = []
            idle = False
            free = self.max_batch_size - len(self.rows)
            if not self.rows or free >= self.min_free_slots:
                pulled, idle = feed.pull(free)
                admitted = [self._validated(r) for r in pulled]
            if admitted:
                yield from self._retire(self._prefill(admitted))
            if not self.rows:
                if feed.exhausted:
                    return
                if idle and not admitted:
                    time.sleep(0.005)
                continue
            yield from self._retire(self._decode_step())

    # ---- steps ----
    @torch.no_grad()
    def _prefill(self, requests: list[GenerationRequest]) -> list[int]:
        """Prefill new requests together, sample their first token, splice them in; return finished row indices."""
        self.prefill_sizes.append(len(requests))
        lengths = [len(r.prompt_ids) for r in requests]
        width = max(lengths)
        pad = int(self.tokenizer.pad_token_id or 0)
        ids = torch.tensor([[pad] * (width - n) + r.prompt_ids for r, n in zip(requests, lengths, strict=True)],
                           device=self.device)  # (n, P)
        starts = torch.tensor([width - n for n in lengths], device=self.device)  # (n,)
        mask = torch.arange(width, device=self.device)[None, :] >= starts[:, None]  # (n, P)
        positions = (torch.arange(width, device=self.device)[None, :] - starts[:, None]).clamp(min=0)  # (n, P)
        cache = self._new_cache()
        with self._adapters([r.adapter for r in requests]):
            out = self.model(input_ids=ids, attention_mask=mask.long(), position_ids=positions, past_key_values=cache,
                             use_cache=True, logits_to_keep=1)
        now = time.time()
        new_rows = [_Row(request=r, rng=request_rng(r.sampling, self.seed_rng), started_at=now) for r in requests]
        if bool(starts.any()):  # padded columns hold garbage from fully-masked queries: zero them
            for layer in spare_layers(cache):
                layer.zero_columns(~mask)
        self._splice(cache, starts)
        first = len(self.rows)
        self.rows.extend(new_rows)
        return self._append_tokens(out.logits[:, -1, :], rows=range(first, len(self.rows)))

    @torch.no_grad()
    def _decode_step(self) -> list[int]:
        width = self.cache.get_seq_length()
        mask = torch.arange(width + 1, device=self.device)[None, :] >= self.starts[:, None]  # (B, W+1)
        positions = (width - self.starts)[:, None]  # (B, 1)
        with self._adapters([row.request.adapter for row in self.rows]):
            out = self.model(input_ids=self.last_tokens[:, None], attention_mask=mask.long(), position_ids=positions,
                             past_key_values=self.cache, use_cache=True)
        self.decode_steps += 1
        return self._append_tokens(out.logits[:, -1, :], rows=range(len(self.rows)))

    def _adapters(self, names: list[str | None]) -> AbstractContextManager[Any]:
        return self.adapters(names) if self.adapters is not None else nullcontext()

    def _append_tokens(self, logits: torch.Tensor, rows: range) -> list[int]:
        """Sample one token for each of `rows` (logits (len(rows), V)); return the indices that finished."""
        picked = [self.rows[i] for i in rows]
        tokens, logprobs = sample_tokens(logits, [r.request.sampling for r in picked], [r.rng for r in picked])
        if rows.start == 0 and len(rows) == len(self.rows):
            self.last_tokens = tokens
        else:
            self.last_tokens = torch.cat([self.last_tokens[: rows.start], tokens])
        finished = []
        width = self.cache.get_seq_length()
        versions: dict[str | None, int] = {}
        for i, row, token, logprob in zip(rows, picked, tokens.tolist(), logprobs.tolist(), strict=True):
            adapter = row.request.adapter
            if adapter not in versions:
                versions[adapter] = self.version_of(adapter)
            version = versions[adapter]
            if not row.version_marks or row.version_marks[-1][1] != version:
                row.version_marks.append([len(row.response_ids), version])
            row.response_ids.append(token)
            row.logprobs.append(logprob)
            row.finish_reason = self._finish_reason(row, positions_used=width - int(self.starts[i]) + 1)
            if row.finish_reason is not None:
                finished.append(i)
        return finished

    def _finish_reason(self, row: _Row, positions_used: int) -> str | None:
        sampling = row.request.sampling
        if row.response_ids[-1] in self.eos_ids:
            return "stop"
        if sampling.stop:
            text = self.tokenizer.decode(row.response_ids, skip_special_tokens=True)
            hits = [text.find(s) for s in sampling.stop if s and s in text]
            if hits:
                row.text = text[: min(hits)]
                return "stop"
        if len(row.response_ids) >= sampling.max_tokens or positions_used >= self.max_positions:
            return "length"
        return None

    # ---- cache bookkeeping ----
    def _new_cache(self) -> SpareColumnsCache:
        return SpareColumnsCache(self.model.config, *self.kv_spare)

    def _splice(self, new_cache: SpareColumnsCache, new_starts: torch.Tensor) -> None:
        """Append the rows of `new_cache` (left-padded, right-aligned) to the batch cache."""
        old_width, new_width = self.cache.get_seq_length(), new_cache.get_seq_length()
        if not self.rows:
            self.cache, self.starts = new_cache, new_starts
            return
        width = max(old_width, new_width)
        for old, new in zip(spare_layers(self.cache), spare_layers(new_cache), strict=True):
            old.stack_right_aligned(new)
        self.starts = torch.cat([self.starts + (width - old_width), new_starts + (width - new_width)])

    def _retire(self, finished: list[int]) -> Iterator[GenerationResult]:
        if not finished:
            return
        done = set(finished)
        keep = [i for i in range(len(self.rows)) if i not in done]
        results = [self._result(self.rows[i]) for i in finished]
        self.rows = [self.rows[i] for i in keep]
        index = torch.tensor(keep, dtype=torch.long, device=self.device)
        self.starts, self.last_tokens = self.starts[index], self.last_tokens[index]
        if keep:
            crop = int(self.starts.min())  # leading columns that no remaining row uses
            for layer in spare_layers(self.cache):
                layer.select_rows(index, crop)
            self.starts -= crop
        else:
            self.cache = self._new_cache()
        yield from results

    def _result(self, row: _Row) -> GenerationResult:
        assert row.finish_reason is not None
        text = row.text if row.text is not None else self.tokenizer.decode(row.response_ids, skip_special_tokens=True)
        request = row.request
        return GenerationResult(
            request_id=request.request_id, prompt_ids=list(request.prompt_ids), response_ids=row.response_ids,
            logprobs=row.logprobs, finish_reason=row.finish_reason, text=text, started_at=row.started_at,
            finished_at=time.time(), meta=dict(request.meta), logprob_temperature=logprob_temperature(request.sampling),
            version_marks=row.version_marks,
        )

    def _validated(self, request: GenerationRequest) -> GenerationRequest:
        n, sampling = len(request.prompt_ids), request.sampling
        if n == 0:
            raise ValueError(f"request {request.request_id!r}: prompt_ids is empty")
        if sampling.max_tokens < 1:
            raise ValueError(f"request {request.request_id!r}: max_tokens must be >= 1 (got {sampling.max_tokens})")
        if n >= self.max_positions:
            raise ValueError(f"request {request.request_id!r}: prompt of {n} tokens does not fit the model's "
                             f"{self.max_positions} positions")
        if not 0 < sampling.top_p <= 1 or sampling.temperature < 0:
            raise ValueError(f"request {request.request_id!r}: need temperature >= 0 and 0 < top_p <= 1")
        return request
