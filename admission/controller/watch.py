"""List-then-watch loops with resync and backoff, each in its own thread.

The ``kubernetes`` client's watches block, so each kind (pods, nodes) gets a daemon thread:
list everything (replace the inventory's copy), then watch from the list's resourceVersion. A
watch ends every ``resync_seconds`` (server-side timeout) and resumes from the last version it
saw; a 410 Gone or any error triggers a fresh list after an exponential backoff (capped), so a
restarted API server or a long partition ends in a consistent inventory, never a stale one.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence

from admission.controller.api import ApiError, Gone, Json

log = logging.getLogger(__name__)

Lister = Callable[[], tuple[list[Json], str]]
Watcher = Callable[[str, int], Iterator[tuple[str, Json]]]


class WatchLoop:
    def __init__(self, *, kind: str, lister: Lister, watcher: Watcher,
                 replace: Callable[[Sequence[Json]], None],
                 apply: Callable[[str, Json], object],
                 resync_seconds: int = 300, max_backoff: float = 30.0) -> None:
        self.kind = kind
        self.lister = lister
        self.watcher = watcher
        self.replace = replace
        self.apply = apply
        self.resync = resync_seconds
        self.max_backoff = max_backoff
        self.synced = threading.Event()  # set after the first complete list

    def run(self, stop: threading.Event) -> None:
        backoff = 0.5
        while not stop.is_set():
            try:
                items, version = self.lister()
                self.replace(items)
                self.synced.set()
                backoff = 0.5
                while not stop.is_set():
                    started, events = time.monotonic(), 0
                    for event, obj in self.watcher(version, self.resync):
                        events += 1
                        if stop.is_set():
                            return
                        if event == "BOOKMARK":
                            version = (obj.get("metadata") or {}).get("resourceVersion", version)
                            continue
                        if event == "ERROR":
                            raise Gone(410, str(obj.get("message", "watch error")))
                        self.apply(event, obj)
                        version = (obj.get("metadata") or {}).get("resourceVersion", version)
                    if not events and time.monotonic() - started < 1.0:
                        stop.wait(1.0)  # a server that closes watches at once: do not spin
            except Gone:
                log.info("%s watch expired; listing again", self.kind)
                continue
            except (ApiError, OSError, ValueError) as exc:
                log.warning("%s watch failed (%s); retrying in %.1fs", self.kind, exc, backoff)
            except Exception:  # a client bug must not kill the thread silently
                log.exception("%s watch crashed; retrying in %.1fs", self.kind, backoff)
            stop.wait(backoff * (1 + random.random() / 2))
            backoff = min(self.max_backoff, backoff * 2)
