"""The continuous-batching decode loop behind `HFEngine` (transformers models, KV cache, backfill).

Layout invariant: the batch shares one KV cache of shape (B, H, W, D) per layer. Every row's valid tokens occupy a
contiguous, RIGHT-ALIGNED column range [start[b], W): rows are left-padded, so a decode step appends one column for
all rows. A row's next position id is W - start[b] (the number of tokens it has in the cache). Finished rows are
removed (index_select) and leading columns no row uses are cropped; new requests are prefilled together
(left-padded) and spliced in as new rows, padding the narrower of the two caches on the left with zeros. The cache's
layers keep spare columns, so a decode step writes its column in place (kv_columns.py).

Grouped speculative decoding (hf_speculative.py) may leave holes: columns inside a row's range that are not its
tokens (drafts it rejected while another row accepted more). `holes` (B, W) marks them (None: no holes); they are
masked out, position ids count only a row's own tokens, and compaction (at a retirement, or when holes waste a
quarter of the width) gathers each row's tokens back into a hole-free right-aligned block.
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
from workers.generation.engines import hf_speculative
from workers.generation.engines.feed import RequestFeed
from workers.generation.engines.hf_speculative import Speculation, StepCost
from workers.generation.engines.kv_columns import MIN_SPARE, SPARE_DIVISOR, SpareColumnsCache, spare_layers
from workers.generation.engines.sampling import logprob_temperature, request_rng, sample_tokens
from workers.generation.engines.suffix_draft import DraftSequence, SuffixDrafter


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
    draft: DraftSequence | None = None  # this row's sequence in its group's suffix index (speculation on)
    forwards: int = 0  # forward passes that emitted this row's tokens (prefill included)
    speculative_forwards: int = 0  # ... of which verified drafts (the row's or others': hf_speculative.verify_step)
    proposed: int = 0  # draft tokens verified
    accepted: int = 0  # ... and accepted
    rejected: int = 0  # verified drafts with a rejected token (accepted + rejected: verified positions)


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
                 kv_spare: tuple[int, int | None] = (MIN_SPARE, SPARE_DIVISOR),
                 speculation: Speculation = Speculation(), drafter: SuffixDrafter | None = None,
                 step_cost: StepCost | None = None) -> None:
        """`version_of(adapter)`: the weights version the model holds now for that adapter (None: its own weights),
        read at every token: weights may change between the steps of `run`, in place, and rows keep their KV cache.
        `adapters(names)`: a context in which one forward pass applies each row's adapter (mixed-adapter batches,
        engines/hf_multi_lora.py); None: every row runs on the model as it is. `kv_spare`: the cache layers' spare
        columns (min_spare, spare_divisor) (kv_columns.py; (0, None) copies the cache at every step).
        `speculation`: grouped speculative decoding (hf_speculative.py; disabled by default) with drafts from
        `drafter` (the engine's, so groups outlive one call; a new one when None), paced by `step_cost` (the engine's
        timings of its decode steps)."""
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
        self.speculation = speculation
        self.drafter = drafter if drafter is not None else SuffixDrafter()
        self.step_cost = step_cost if step_cost is not None else StepCost()
        self.rows: list[_Row] = []
        self.cache = self._new_cache()
        self.starts = torch.zeros(0, dtype=torch.long, device=self.device)  # (B,)
        self.last_tokens = torch.zeros(0, dtype=torch.long, device=self.device)  # (B,)
        self.holes: torch.Tensor | None = None  # (B, W) bool: columns in a row's range that are not its tokens
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
        with self.adapter_context([r.adapter for r in requests]):
            out = self.model(input_ids=ids, attention_mask=mask.long(), position_ids=positions, past_key_values=cache,
                             use_cache=True, logits_to_keep=1)
        now = time.time()
        new_rows = [_Row(request=r, rng=request_rng(r.sampling, self.seed_rng), started_at=now,
                         draft=self._open_draft(r)) for r in requests]
        if bool(starts.any()):  # padded columns hold garbage from fully-masked queries: zero them
            for layer in spare_layers(cache):
                layer.zero_columns(~mask)
        self._splice(cache, starts)
        first = len(self.rows)
        self.rows.extend(new_rows)
        return self._append_tokens(out.logits[:, -1, :], rows=range(first, len(self.rows)))

    @torch.no_grad()
    def _decode_step(self) -> list[int]:
        clock = time.process_time if self.device.type == "cpu" else time.perf_counter
        started = clock()
        drafts = hf_speculative.drafts_for(self)
        self.decode_steps += 1
        if drafts is not None:
            positions = len(self.rows) * (max(len(d) for d in drafts) + 1)
            finished = hf_speculative.verify_step(self, drafts)
        else:
            positions = len(self.rows)
            finished = self._plain_step()
        if self.speculation.enabled:  # the step's tokens are on the host (emit): its time is the device's too
            self.step_cost.observe(positions, clock() - started)  # CPU: this process's time (others' load aside)
        return finished

    def _plain_step(self) -> list[int]:
        width = self.cache.get_seq_length()
        mask = torch.cat([self.valid_columns(width), self.starts.new_ones((len(self.rows), 1), dtype=torch.bool)],
                         dim=1)  # (B, W+1)
        positions = self.lengths()[:, None]  # (B, 1)
        with self.adapter_context([row.request.adapter for row in self.rows]):
            out = self.model(input_ids=self.last_tokens[:, None], attention_mask=mask.long(), position_ids=positions,
                             past_key_values=self.cache, use_cache=True)
        if self.holes is not None:
            self.add_columns(self.starts.new_ones((len(self.rows), 1), dtype=torch.bool))
        return self._append_tokens(out.logits[:, -1, :], rows=range(len(self.rows)))

    def adapter_context(self, names: list[str | None]) -> AbstractContextManager[Any]:
        return self.adapters(names) if self.adapters is not None else nullcontext()

    def _append_tokens(self, logits: torch.Tensor, rows: range) -> list[int]:
        """Sample one token for each of `rows` (logits (len(rows), V)); return the indices that finished."""
        picked = [self.rows[i] for i in rows]
        tokens, logprobs = sample_tokens(logits, [r.request.sampling for r in picked], [r.rng for r in picked])
        return self.emit([[t] for t in tokens.tolist()], [[lp] for lp in logprobs.tolist()], first=rows.start)

    def emit(self, tokens: list[list[int]], logprobs: list[list[float]], first: int = 0) -> list[int]:
        """Append each row's new tokens (rows first, first + 1, ...; the last one of each is not in the cache yet),
        stopping a row at its finish; return the indices that finished."""
        last = torch.tensor([row_tokens[-1] for row_tokens in tokens], dtype=torch.long, device=self.device)
        self.last_tokens = torch.cat([self.last_tokens[:first], last, self.last_tokens[first + len(tokens):]])
        finished = []
        lengths = self.lengths()[first:first + len(tokens)].tolist()
        versions: dict[str | None, int] = {}
        for i, row_tokens, row_logprobs, length in zip(range(first, first + len(tokens)), tokens, logprobs, lengths,
                                                       strict=True):
            row = self.rows[i]
            adapter = row.request.adapter
            if adapter not in versions:
                versions[adapter] = self.version_of(adapter)
            version = versions[adapter]
            if not row.version_marks or row.version_marks[-1][1] != version:
                row.version_marks.append([len(row.response_ids), version])
            row.forwards += 1
            for at, (token, logprob) in enumerate(zip(row_tokens, row_logprobs, strict=True)):
                row.response_ids.append(token)
                row.logprobs.append(logprob)
                # positions this token needs: the row's cached tokens up to it, and itself
                used = length - (len(row_tokens) - 1 - at) + 1
                row.finish_reason = self._finish_reason(row, positions_used=used)
                if row.finish_reason is not None:
                    finished.append(i)
                    row_tokens = row_tokens[:at + 1]  # the rest of an accepted draft is past the end
                    break
            if row.draft is not None:
                self.drafter.extend(row.draft, row_tokens)
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

    def _open_draft(self, request: GenerationRequest) -> DraftSequence | None:
        if not self.speculation.enabled:
            return None
        return self.drafter.open((request.adapter, tuple(request.prompt_ids)), request.prompt_ids)

    # ---- cache bookkeeping ----
    def _new_cache(self) -> SpareColumnsCache:
        return SpareColumnsCache(self.model.config, *self.kv_spare)

    def valid_columns(self, width: int) -> torch.Tensor:
        """(B, W) bool: the columns holding each row's own tokens."""
        valid = torch.arange(width, device=self.device)[None, :] >= self.starts[:, None]
        return valid if self.holes is None else valid & ~self.holes

    def lengths(self) -> torch.Tensor:
        """(B,) tokens each row has in the cache (its next position id)."""
        width = self.cache.get_seq_length()
        used = width - self.starts
        return used if self.holes is None else used - self.holes.sum(dim=1)

    def truncate_cache(self, width: int) -> None:
        """Drop the columns right of `width` (drafts no row accepted); the layers keep them as spare."""
        for layer in spare_layers(self.cache):
            layer.truncate(width)

    def add_columns(self, kept: torch.Tensor) -> None:
        """Record the newest `kept.shape[1]` columns: True where the row keeps it, False a hole."""
        holes = ~kept
        if self.holes is None and not bool(holes.any()):
            return
        width = self.cache.get_seq_length()
        old = self.holes if self.holes is not None else torch.zeros(
            (len(self.rows), width - kept.shape[1]), dtype=torch.bool, device=self.device)
        self.holes = torch.cat([old, holes], dim=1)

    def compact_if_wasteful(self) -> None:
        if self.holes is None:
            return
        width = self.cache.get_seq_length()
        longest = int(self.lengths().max())
        if width - longest > max(16, longest // 4):
            self._select(torch.arange(len(self.rows), device=self.device))

    def _splice(self, new_cache: SpareColumnsCache, new_starts: torch.Tensor) -> None:
        """Append the rows of `new_cache` (left-padded, right-aligned) to the batch cache."""
        old_width, new_width = self.cache.get_seq_length(), new_cache.get_seq_length()
        if not self.rows:
            self.cache, self.starts, self.holes = new_cache, new_starts, None
            return
        width = max(old_width, new_width)
        for old, new in zip(spare_layers(self.cache), spare_layers(new_cache), strict=True):
            old.stack_right_aligned(new)
        self.starts = torch.cat([self.starts + (width - old_width), new_starts + (width - new_width)])
        if self.holes is not None:
            self.holes = torch.cat([
                torch.nn.functional.pad(self.holes, (width - old_width, 0)),
                torch.zeros((len(new_starts), width), dtype=torch.bool, device=self.device)])

    def _retire(self, finished: list[int]) -> Iterator[GenerationResult]:
        if not finished:
            return
        done = set(finished)
        keep = [i for i in range(len(self.rows)) if i not in done]
        results = [self._result(self.rows[i]) for i in finished]
        self.rows = [self.rows[i] for i in keep]
        index = torch.tensor(keep, dtype=torch.long, device=self.device)
        if keep:
            self._select(index)
        else:
            self.cache, self.holes = self._new_cache(), None
            self.starts, self.last_tokens = self.starts[index], self.last_tokens[index]
        yield from results

    def _select(self, index: torch.Tensor) -> None:
        """Keep the rows `index` of the cache (in that order), cropping leading columns no kept row uses; with holes,
        gather each row's tokens into a hole-free right-aligned block (compaction)."""
        if self.holes is None:
            self.starts, self.last_tokens = self.starts[index], self.last_tokens[index]
            crop = int(self.starts.min())  # leading columns that no remaining row uses
            for layer in spare_layers(self.cache):
                layer.select_rows(index, crop)
            self.starts -= crop
            return
        valid = self.valid_columns(self.cache.get_seq_length())[index]  # (B', W)
        counts = valid.sum(dim=1)  # (B',)
        width = int(counts.max())
        # stable sort puts each row's other columns first, then its own in order: the last `width` are right-aligned
        order = torch.sort(valid.to(torch.int8), dim=1, stable=True).indices[:, valid.shape[1] - width:]  # (B', w)
        for layer in spare_layers(self.cache):
            layer.gather_columns(index, order)
        self.starts, self.last_tokens, self.holes = width - counts, self.last_tokens[index], None

    def _result(self, row: _Row) -> GenerationResult:
        assert row.finish_reason is not None
        text = row.text if row.text is not None else self.tokenizer.decode(row.response_ids, skip_special_tokens=True)
        request = row.request
        return GenerationResult(
            request_id=request.request_id, prompt_ids=list(request.prompt_ids), response_ids=row.response_ids,
            logprobs=row.logprobs, finish_reason=row.finish_reason, text=text, started_at=row.started_at,
            finished_at=time.time(), meta=dict(request.meta), logprob_temperature=logprob_temperature(request.sampling),
            version_marks=row.version_marks, forward_passes=row.forwards, draft_tokens=row.proposed,
            accepted_tokens=row.accepted, speculative_passes=row.speculative_forwards,
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
