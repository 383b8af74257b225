"""The agent's loop: read the GPUs, derive the node metadata, publish, sleep a jittered interval.

Jitter (±10 %) keeps the agents of a large cluster from reading and writing in lock step after
they start together. A failed NVML read is logged and retried next round: a driver upgrade or a
GPU reset must not kill the DaemonSet pod.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable
from typing import Any

from admission.agent.inventory import NodeInventory, read_inventory
from admission.agent.metadata import NodeMetadata
from admission.agent.publisher import Publisher, PublishResult

log = logging.getLogger("berth.agent")


def run_once(
    nvml: Any,
    publisher: Publisher,
    to_metadata: Callable[[NodeInventory], NodeMetadata],
) -> PublishResult:
    """One round: read, derive, publish. NVML errors propagate to the caller."""
    return publisher.publish(to_metadata(read_inventory(nvml)))


def run_loop(
    nvml: Any,
    publisher: Publisher,
    to_metadata: Callable[[NodeInventory], NodeMetadata],
    *,
    interval_s: float,
    stop: threading.Event,
    rng: Callable[[], float] = random.random,
    max_rounds: int | None = None,
) -> int:
    """Run rounds until ``stop`` is set (or ``max_rounds`` ran); returns the rounds run."""
    rounds = 0
    while not stop.is_set() and (max_rounds is None or rounds < max_rounds):
        rounds += 1
        wait = interval_s * (0.9 + 0.2 * rng())
        try:
            result = run_once(nvml, publisher, to_metadata)
        except nvml.NVMLError as exc:
            log.warning("reading the GPUs through NVML failed, retrying next round: %s", exc)
        else:
            if result.action == "patched":
                log.info("node updated: %s", sorted(result.patch["metadata"]) if result.patch
                         else "")
            elif result.action == "failed":
                log.warning("node update failed, retry in %.1fs: %s", result.retry_in_s,
                            result.error)
            if result.retry_in_s > 0:
                # Come back when the deferred change may go out, not a whole interval later.
                wait = min(wait, max(1.0, result.retry_in_s))
        stop.wait(wait)
    return rounds
