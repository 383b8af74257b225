"""The event loop the servers run on: uvloop when it is installed, asyncio's own otherwise.

uvloop does TLS record processing and socket I/O in compiled code, which is where most of
the webhook's CPU per review goes (bench/webhook_load.md measures both loops). It is a
dependency, but a missing or broken build must not keep Berth from serving: ``auto`` falls
back to asyncio's loop and says so in the log. ``asyncio`` forces the standard loop (to
compare, or to rule uvloop out when chasing a problem).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

log = logging.getLogger("berth.loop")

CHOICES = ("auto", "uvloop", "asyncio")

T = TypeVar("T")


class LoopUnavailable(Exception):
    """``uvloop`` was asked for explicitly and cannot be imported."""


def loop_factory(choice: str = "auto") -> Callable[[], asyncio.AbstractEventLoop] | None:
    """A factory for the chosen loop; None means asyncio's default loop."""
    if choice not in CHOICES:
        raise ValueError(f"event loop must be one of {', '.join(CHOICES)}, got {choice!r}")
    if choice == "asyncio":
        return None
    try:
        import uvloop
    except ImportError as exc:
        if choice == "uvloop":
            raise LoopUnavailable(f"uvloop cannot be imported ({exc}); install it with "
                                  "`pip install uvloop` or choose the asyncio loop") from None
        log.warning("uvloop cannot be imported (%s); serving on asyncio's loop", exc)
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def run(main: Coroutine[Any, Any, T], choice: str = "auto") -> T:
    """``asyncio.run`` on the chosen loop."""
    try:
        factory = loop_factory(choice)
    except BaseException:
        main.close()  # never awaited: close it so Python does not warn about it
        raise
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)


def loop_name() -> str:
    """The running loop's kind, for the startup log line."""
    loop = asyncio.get_running_loop()
    return "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"
