"""The servers' event loop: uvloop when importable, asyncio's loop as the fallback, and an
explicit choice that fails with the fix when uvloop is missing."""

from __future__ import annotations

import asyncio
import logging
import sys

import pytest

from admission import event_loop


async def _kind() -> str:
    await asyncio.sleep(0)
    return event_loop.loop_name()


def test_auto_serves_on_uvloop_when_installed() -> None:
    pytest.importorskip("uvloop", reason="uvloop is a dependency: pip install -e .")
    assert event_loop.run(_kind()) == "uvloop"
    assert event_loop.run(_kind(), "uvloop") == "uvloop"


def test_asyncio_can_be_forced() -> None:
    assert event_loop.run(_kind(), "asyncio") == "asyncio"


def test_without_uvloop_auto_falls_back_and_explicit_choice_explains(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop now raises ImportError
    with caplog.at_level(logging.WARNING, logger="berth.loop"):
        assert event_loop.run(_kind()) == "asyncio"
    assert "serving on asyncio's loop" in caplog.text
    coro = _kind()
    with pytest.raises(event_loop.LoopUnavailable, match="pip install uvloop"):
        event_loop.run(coro, "uvloop")
    assert coro.cr_frame is None  # closed, never left pending


def test_an_unknown_choice_is_refused() -> None:
    with pytest.raises(ValueError, match="auto, uvloop, asyncio"):
        event_loop.loop_factory("trio")
