"""Durations a user writes (``berth.dev/expected-runtime``): ``2h``, ``90m``, ``1h30m``,
``3600s``. Shared by the webhook, which refuses a malformed one, and the controller, which reads
what the webhook let through.

Strict on purpose: whole numbers in ASCII digits, each of the units ``h``, ``m``, ``s`` at most
once and in that order, no spaces, no sign, no fractions, no zero. Anything else is not a
duration (None), never a guess.
"""

from __future__ import annotations

import re

_DURATION = re.compile(r"(?:([0-9]{1,6})h)?(?:([0-9]{1,8})m)?(?:([0-9]{1,10})s)?", re.ASCII)

#: How a duration is written, for messages.
DURATION_FORM = "a whole number of hours, minutes or seconds such as 2h, 90m, 1h30m or 3600s"


def parse_duration(raw: object) -> int | None:
    """Seconds of a duration written as :data:`DURATION_FORM`; None when ``raw`` is not one
    (or is zero)."""
    if not isinstance(raw, str) or not raw or len(raw) > 32:
        return None
    m = _DURATION.fullmatch(raw)
    if m is None:
        return None
    h, mins, s = (int(x) if x else 0 for x in m.groups())
    total = h * 3600 + mins * 60 + s
    return total or None


def shown_duration(seconds: float) -> str:
    """``seconds`` the way users write them: 5400 -> "1h30m", 90 -> "1m30s"."""
    whole = max(0, round(seconds))
    h, rest = divmod(whole, 3600)
    m, s = divmod(rest, 60)
    out = (f"{h}h" if h else "") + (f"{m}m" if m else "") + (f"{s}s" if s else "")
    return out or "0s"
