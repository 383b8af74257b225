"""A bounded pool for the controller's writes to the API server.

Each write is one round trip (a few to tens of milliseconds on a busy control plane, nearly
all of it spent waiting), so writing one pod at a time caps a release at a few dozen pods a
second however fast the solver is. The pool keeps up to ``size`` calls in flight. It only
overlaps round trips: the order the release protocol needs is kept by its callers, which wait
for a whole step (every placement of a gang) before they start the next (its gates).

A crash or a bug in one call (any exception) stops the batch as a dying process would: no
call of the batch starts after it (those under way finish, as requests already sent would),
and the first such exception is raised to the caller once nothing of the batch runs any more.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


class Abandoned(Exception):
    """A call not started because another call of its batch had failed."""


class Writers:
    def __init__(self, size: int, name: str) -> None:
        self.size = max(1, size)
        # One thread writes inline: no pool, exactly the sequential order.
        self._pool = (ThreadPoolExecutor(self.size, thread_name_prefix=name)
                      if self.size > 1 else None)

    def each(self, fn: Callable[[T], R], items: Sequence[T], stop: threading.Event) -> list[R]:
        """``fn`` over ``items``, up to ``size`` at once; results in the order of ``items``.

        ``stop`` is shared by every call of one batch (it may span several ``each``): once it is
        set no call starts; a call that raises sets it. Raises the first exception that is not
        :class:`Abandoned`, else :class:`Abandoned` if any call was skipped."""
        def one(item: T) -> R:
            if stop.is_set():
                raise Abandoned("an earlier write of this batch failed")
            try:
                return fn(item)
            except BaseException:
                stop.set()
                raise

        if self._pool is None or len(items) <= 1:
            return [one(item) for item in items]
        futures = [self._pool.submit(one, item) for item in items]
        wait(futures)
        errors = [exc for f in futures if (exc := f.exception()) is not None]
        if errors:
            raise next((e for e in errors if not isinstance(e, Abandoned)), errors[0])
        return [f.result() for f in futures]

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
