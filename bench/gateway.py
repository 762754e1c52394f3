"""Rollout gateway overhead (docs/architecture.md#rollout-gateway): an agent's chat call through the gateway (the
official `openai` client -> the API on uvicorn -> Redis -> the instance's gateway loop -> the engine -> back) against
the same request made directly to the engine, at 1, 16 and 64 concurrent episodes.

Both paths share one `HFEngine` (a BPE chat model, `--preset`: chat-qwen2-1m by default, where a call is cheapest and
the gateway's fixed per-call work weighs most; greedy, `--max-tokens` tokens per call) and the same feed discipline as a
generation instance (a `None` when nothing is waiting, the engine's continuous batch otherwise): the direct path's
clients put their requests on an in-process queue the feed drains; the gateway path's clients call
`/api/v1/rollouts/{episode}/v1/chat/completions`, and the feed polls `GatewayEpisodes` as the instance does
(workers/runtime/gateway.py). Rounds interleave the paths; each figure is the median over rounds of the round's p50 call
latency and calls/s.

Needs Redis (`--redis`, default the local one); the API runs on a temporary SQLite database in its own uvicorn
process, as deployed (`--api-in-process` puts it in this process's thread instead, sharing the GIL with the engine).
The agents run in a process of their own (`--agents`), as real agents do, their clients on one shared HTTP connection
pool: 64 openai clients' Python work in the engine's process took the GIL from the engine thread (the direct path's
callers only wait on an event), which slowed the gateway rounds' engine, not the gateway. The chat route is async
(an asyncio Redis client waits for the instance's answer) and takes no admission work slot.
The engine runs on `--threads` torch threads (default 1), as a CPU generation instance runs on its device set's
cores (workers/devices.py `pin_process`): with torch's default of one OpenMP thread per core, the engine's threads
share the host's cores with the API, the agents and Redis (and on a shared 2-core host with whatever else runs),
and every descheduled thread stalls the others at each operator; the direct rounds' own p50 then swung 5-20x
between rounds (103-683 ms for an 8-token call that takes 20 ms on one thread), which measured the host, not the
gateway.
Run: `python bench/gateway.py [--rounds 3] [--calls 64] [--max-tokens 8] [--threads 1] [--preset chat-qwen2-1m]`.
Final line: `RESULT gateway_overhead_p50_ms=... throughput_ratio=...` (the worst of the concurrency levels), after one
`RESULT concurrency=... direct_p50_ms=... gateway_p50_ms=... overhead_p50_ms=... direct_calls_s=... gateway_calls_s=...
throughput_ratio=...` line per level.

Measured (2 CPU cores, load 1.4-2.8, 2026-12-06): `--preset chat-qwen2-100m --max-tokens 16 --calls 32 --rounds 3`
(a 16-token call takes 0.43 s alone): overhead p50 10.2 / 60.6 / 32.4 ms at 1 / 16 / 64 episodes (2.4%, 4.1%, 0.7% of
the call), throughput ratio 1.02 / 0.96 / 0.99: `RESULT gateway_overhead_p50_ms=60.6 throughput_ratio=0.96`. The
overhead past one episode is mostly a decode step: a direct caller's next request is in the queue at the step boundary
where its last one finished, a gateway caller's arrives after the HTTP round trip, mid-step (~90 ms a step at 16
rows), and waits for the next boundary. With the default chat-qwen2-1m (a call costs ~20 ms, about what the HTTP
path's own CPU costs on these 2 cores) an earlier session measured 91.7 ms / 0.35 at 64 episodes (load 6-8).
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

LEVELS = (1, 16, 64)
MESSAGES = [{"role": "user", "content": "What is 12 + 35?"}]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Loop:
    """The engine's continuous batch fed by direct requests and gateway calls, as an instance's feed is."""

    def __init__(self, engine: Any, gateway: Any) -> None:
        self.engine, self.gateway = engine, gateway
        self.direct: queue.Queue[tuple[Any, threading.Event, list[Any]]] = queue.Queue()
        self.waiting: dict[str, tuple[threading.Event, list[Any]]] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _feed(self) -> Iterator[Any]:
        while not self.stop.is_set():
            calls, _ = self.gateway.poll(self.engine.version)
            yield from calls
            got = False
            while True:
                try:
                    request, done, out = self.direct.get_nowait()
                except queue.Empty:
                    break
                self.waiting[request.request_id] = (done, out)
                got = True
                yield request
            if not calls and not got:
                yield None

    def _run(self) -> None:
        for result in self.engine.generate_stream(self._feed()):
            if self.gateway.complete(result):
                continue
            done, out = self.waiting.pop(result.request_id)
            out.append(result)
            done.set()

    def call(self, request: Any) -> Any:
        done, out = threading.Event(), list[Any]()
        self.direct.put((request, done, out))
        done.wait()
        return out[0]


def _timed(fn: Any, clients: int, calls: int) -> tuple[float, float]:
    """(p50 call latency in ms, calls/s) with `clients` concurrent callers making `calls` calls in all."""
    latencies: list[float] = []

    def worker(index: int) -> None:
        for _ in range(calls // clients):
            start = time.perf_counter()
            fn(index)
            latencies.append(time.perf_counter() - start)

    start = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(worker, range(clients)))
    wall = time.perf_counter() - start
    return statistics.median(latencies) * 1000, len(latencies) / wall


def _chat(agents: list[Any], max_tokens: int, index: int) -> Any:
    return agents[index].chat.completions.create(model="policy", messages=MESSAGES, max_tokens=max_tokens,
                                                 temperature=0.0)


def agents_process() -> None:
    """`--agents`: the agents of the gateway rounds, in their own process as real agents are (their openai clients'
    Python work would otherwise contend with the engine thread for this process's GIL, which the direct path's
    waiting callers never do). Reads one JSON round per line ({url, episodes: [[id, token]], calls, max_tokens}),
    answers with [p50 ms, calls/s]."""
    import httpx
    import openai

    pool = httpx.Client(limits=httpx.Limits(max_connections=256, max_keepalive_connections=256), timeout=600)
    for line in sys.stdin:
        job = json.loads(line)
        agents = [openai.OpenAI(base_url=f"{job['url']}/rollouts/{episode}/v1", api_key=token, max_retries=0,
                                http_client=pool) for episode, token in job["episodes"]]
        print(json.dumps(_timed(partial(_chat, agents, job["max_tokens"]), len(agents), job["calls"])), flush=True)


def main() -> None:
    if sys.argv[1:] == ["--agents"]:
        agents_process()
        return
    from workers.models.tiny import PRESETS

    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=64, help="calls per level per round (at least 2 per client)")
    parser.add_argument("--max-tokens", type=int, default=8)
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--api-in-process", action="store_true", help="uvicorn in a thread of this process")
    parser.add_argument("--levels", default=",".join(map(str, LEVELS)), help="concurrency levels, comma-separated")
    parser.add_argument("--threads", type=int, default=1, help="the engine's torch threads (its device set's cores)")
    parser.add_argument("--preset", default="chat-qwen2-1m", choices=[p for p in PRESETS if p.startswith("chat-")],
                        help="the engine's chat model: its size sets what a call costs next to the gateway's fixed "
                        "per-call work (chat-qwen2-100m: about a small real model's)")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-gateway-"))
    os.environ.update({"STREAMRL_DATA_DIR": str(tmp), "STREAMRL_REDIS_URL": args.redis,
                       "STREAMRL_SECRET_KEY": "bench-gateway-secret-key-0123456789abcdef"})

    import httpx
    import redis
    import torch
    import uvicorn
    from transformers import AutoTokenizer

    from backend.main import create_app
    from contract import gateway as keys
    from contract.sample import PromptRequest
    from contract.settings import get_settings
    from contract.spec import EnvironmentSpec
    from workers.core.rollout import generation_request
    from workers.generation.engine import SamplingParams
    from workers.generation.engines.hf import HFEngine
    from workers.models import build_tiny_model
    from workers.runtime.gateway import GatewayEpisodes

    torch.set_num_threads(args.threads)
    model = build_tiny_model(args.preset, tmp / "model", seed=0)
    tokenizer = AutoTokenizer.from_pretrained(model)
    engine = HFEngine(str(model), max_batch_size=max(LEVELS), device="cpu")
    client = redis.Redis.from_url(args.redis)
    job_id = 900_000_000 + os.getpid()
    spec = EnvironmentSpec(type="gateway", max_turns=64, max_episode_tokens=131_072)
    sampling = SamplingParams(temperature=0.0, max_tokens=args.max_tokens)
    gateway = GatewayEpisodes(client, job_id, "bench", tokenizer, spec, sampling)
    loop = Loop(engine, gateway)
    port = _free_port()
    server: Any = None
    api_process: subprocess.Popen[bytes] | None = None
    if args.api_in_process:
        server = uvicorn.Server(uvicorn.Config(create_app(get_settings()), port=port, log_level="warning"))
        threading.Thread(target=server.run, daemon=True).start()
        while not server.started:
            time.sleep(0.05)
    else:
        api_process = subprocess.Popen([sys.executable, "-m", "uvicorn", "backend.main:app", "--port", str(port),
                                        "--log-level", "warning"], cwd=REPO)
        deadline = time.time() + 180
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/api/v1/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.time() > deadline or api_process.poll() is not None:
                raise SystemExit("the API process did not start")
            time.sleep(0.2)
    url = f"http://127.0.0.1:{port}/api/v1"
    text = tokenizer.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    prompt_ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
    counter = iter(range(10**9))

    def direct(_: int) -> None:
        request = PromptRequest(sample_id=f"d{next(counter)}", group_id="g", prompt_id="p", iteration=0,
                                prompt_ids=prompt_ids, prompt_text="", meta={}, seed=0)
        loop.call(generation_request(request, sampling))

    agents = subprocess.Popen([sys.executable, __file__, "--agents"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, cwd=REPO)
    assert agents.stdin is not None and agents.stdout is not None

    def gateway_timed(clients: int, calls: int) -> tuple[float, float]:
        """A round of `clients` fresh episodes making `calls` calls in all, each agent in the agents' process."""
        episodes = []
        for index in range(clients):
            request = PromptRequest(sample_id=f"r{next(counter)}-{index}", group_id="g", prompt_id="p", iteration=0,
                                    prompt_ids=[], prompt_text="bench", meta={}, seed=0)
            episode = gateway.open(request)
            token: Any = client.hget(keys.episode(episode), "token")
            assert token is not None
            episodes.append([episode, token.decode()])
        assert agents.stdin is not None and agents.stdout is not None
        agents.stdin.write(json.dumps({"url": url, "episodes": episodes, "calls": calls,
                                       "max_tokens": args.max_tokens}) + "\n")
        agents.stdin.flush()
        p50, rate = json.loads(agents.stdout.readline())
        return float(p50), float(rate)

    worst_overhead, worst_ratio = 0.0, float("inf")
    try:
        for clients in [int(level) for level in args.levels.split(",")]:
            calls = max(args.calls, 2 * clients)
            direct_runs, gateway_runs = [], []
            _timed(direct, clients, clients)  # warm both paths at this batch size
            gateway_timed(clients, clients)
            for round_ in range(args.rounds):
                direct_runs.append(_timed(direct, clients, calls))
                gateway_runs.append(gateway_timed(clients, calls))
                print(f"concurrency {clients} round {round_}: direct (p50 ms, calls/s) {direct_runs[-1]}, gateway "
                      f"{gateway_runs[-1]}", flush=True)
            d_p50 = statistics.median(r[0] for r in direct_runs)
            g_p50 = statistics.median(r[0] for r in gateway_runs)
            d_rate = statistics.median(r[1] for r in direct_runs)
            g_rate = statistics.median(r[1] for r in gateway_runs)
            overhead, ratio = g_p50 - d_p50, g_rate / d_rate
            worst_overhead, worst_ratio = max(worst_overhead, overhead), min(worst_ratio, ratio)
            print(f"RESULT concurrency={clients} direct_p50_ms={d_p50:.1f} gateway_p50_ms={g_p50:.1f} "
                  f"overhead_p50_ms={overhead:.1f} direct_calls_s={d_rate:.1f} gateway_calls_s={g_rate:.1f} "
                  f"throughput_ratio={ratio:.2f}", flush=True)
    finally:
        loop.stop.set()
        agents.stdin.close()
        agents.wait(timeout=30)
        if server is not None:
            server.should_exit = True
        if api_process is not None:
            api_process.terminate()
            api_process.wait(timeout=30)
        for key in client.scan_iter(f"streamrl:job:{job_id}:*"):
            client.delete(key)
    print(f"RESULT gateway_overhead_p50_ms={worst_overhead:.1f} throughput_ratio={worst_ratio:.2f}")


if __name__ == "__main__":
    main()
