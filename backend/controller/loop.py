"""The controller process's loop (`streamrl controller`): one reconcile pass, then wait for a wake-up or the interval.

    run_controller(interval=1.0, idle_interval=10.0)   # forever; `once=True`: one pass, errors propagate

Between passes it blocks on the API's wake-up list (`keys.controller_wake`, pushed after every job change), so a
submitted or cancelled job is acted on at once; without a wake-up the next pass comes after `interval`, or after
`idle_interval` while there is no job to watch (an idle platform then costs almost no CPU; the watch loop slows down
too). A pass that fails (a
database or Redis hiccup) is logged and retried at the next one. Beside the passes a `WatchLoop` thread sends due
alert deliveries, records stalls and mirrors trackers (backend/controller/watch.py); with `once` it runs one step of
each after the pass.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from backend.controller.reconcile import CeleryTaskSender, TaskSender, reconcile_once
from backend.controller.watch import WatchLoop
from contract import keys
from contract.redis_client import connect
from contract.settings import get_settings
from contract.tasks import platform_redis_url

log = logging.getLogger("streamrl.controller")


def run_controller(*, interval: float = 1.0, idle_interval: float = 10.0, once: bool = False,
                   sender: TaskSender | None = None, client: Any = None) -> None:
    sender = sender or CeleryTaskSender()
    client = client or connect(platform_redis_url())  # one client for every pass (one per pass costs a connection)
    watch = WatchLoop(get_settings(), client)  # alert deliveries and stall events, beside the reconcile passes
    if not once:
        watch.start()
    while True:
        busy = True
        try:
            report = reconcile_once(sender=sender, client=client).as_dict()
            busy = report.pop("jobs_pending") > 0
            changes = {k: v for k, v in report.items() if v}
            if changes:
                log.info("%s", changes)
        except Exception as exc:  # a database or Redis hiccup: log and retry at the next pass
            if once:
                raise
            log.warning("reconcile pass failed: %s", exc)
        if once:
            watch.step()
            watch.tracker_step()
            return
        watch.set_busy(busy)
        if wait_for_wake(client, keys.controller_wake(), interval if busy else max(interval, idle_interval)):
            watch.set_busy(True)  # a job changed: watch at full pace until a pass says there is nothing to watch


def wait_for_wake(client: Any, key: str, timeout_s: float) -> bool:
    """Block until the wake-up list `key` has an entry (then empty it) or `timeout_s` passes; True when woken.
    Without Redis it just sleeps."""
    try:
        woken = client.blpop([key], timeout=timeout_s) is not None
        if woken:
            client.delete(key)  # wake-ups that piled up during the pass: one pass covers them all
        return woken
    except Exception:  # Redis down: the reconcile pass reports it; keep the pace
        time.sleep(timeout_s)
        return False
