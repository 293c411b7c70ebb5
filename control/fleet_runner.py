"""`control auto` on several replicas in one process: one ``PolicyRunner`` per replica, each on its own
thread with its own policy (its own counters and state), client, lock (the server's) and audit rows. A
replica that fails (unreachable, a database hiccup in its loop, a bug in its step) is that runner's
business: the others go on; one stop event ends them all and each audits its own ``auto-stop``."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

from .runner import PolicyRunner

log = logging.getLogger(__name__)
JOIN_POLL_S = 0.5  # the main thread wakes this often, so a signal handler runs while runners work


def run_all(runners: Sequence[PolicyRunner], stop: threading.Event) -> None:
    """Run every runner until ``stop`` is set; one runner's exception never ends another."""
    if len(runners) == 1:
        runners[0].run(stop)
        return
    threads = [
        threading.Thread(
            target=_run_one, args=(runner, stop), name=f"policy {runner.server_url}", daemon=True
        )
        for runner in runners
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        while thread.is_alive():
            thread.join(JOIN_POLL_S)


def _run_one(runner: PolicyRunner, stop: threading.Event) -> None:
    try:
        runner.run(stop)
    except Exception:  # start/stop failed (its audit row could not be written): this replica only
        log.exception("the policy on %s stopped", runner.server_url)
