"""berth.dev/expected-runtime durations: read strictly, never guessed."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from admission.durations import parse_duration, shown_duration


@pytest.mark.parametrize(("raw", "seconds"), [
    ("2h", 7200), ("90m", 5400), ("3600s", 3600), ("1h30m", 5400), ("1h0m5s", 3605),
    ("0h1s", 1), ("45s", 45), ("007m", 420),
])
def test_durations_users_write(raw: str, seconds: int) -> None:
    assert parse_duration(raw) == seconds


@pytest.mark.parametrize("raw", [
    "", "0s", "0h0m", "2", "h", "2d", "2H", "1.5h", "-2h", "+2h", " 2h", "2h ", "2 h", "30m1h",
    "1h1h", "1s1m", "²h", "١٠m", "２h", "1e3s", "P1D", "PT2H", "0x10s", "1_000s", "2h\n",
    "9" * 11 + "s", "1" * 40, None, 3600, 2.5, ["2h"], {"h": 2},
])
def test_anything_else_is_not_a_duration(raw: object) -> None:
    assert parse_duration(raw) is None


@given(st.integers(min_value=1, max_value=400 * 86_400))
def test_what_berth_shows_reads_back(seconds: int) -> None:
    assert parse_duration(shown_duration(seconds)) == seconds


_REFERENCE = re.compile(r"(?:([0-9]+)h)?(?:([0-9]+)m)?(?:([0-9]+)s)?")


@settings(max_examples=400)
@given(st.text(alphabet="0123456789hms ._-+²٣dH\u200b", max_size=14) | st.text(max_size=20))
def test_hostile_text_is_read_as_the_strict_grammar_or_not_at_all(raw: str) -> None:
    got = parse_duration(raw)
    m = _REFERENCE.fullmatch(raw) if raw.isascii() else None
    if got is None:
        return
    assert m is not None, raw
    h, mins, s = (int(x) if x else 0 for x in m.groups())
    assert got == h * 3600 + mins * 60 + s > 0
