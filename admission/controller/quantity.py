"""Kubernetes resource quantities ("500m", "16Gi", "1e3", "2") as integers in Berth's units.

The snapshot counts CPU in milli-cores and memory in MiB; the API server writes quantities in
any of the suffix forms, so they are parsed exactly (Decimal) and rounded up: a pod that asks
for 1 byte more than a MiB needs two.
"""

from __future__ import annotations

import math
from decimal import Decimal, InvalidOperation

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
            "k": Decimal("1e3"), "M": Decimal("1e6"), "G": Decimal("1e9"), "T": Decimal("1e12"),
            "P": Decimal("1e15"), "E": Decimal("1e18")}


class QuantityError(ValueError):
    """A quantity string the API server would not have accepted."""


def parse(text: str | int | float) -> Decimal:
    """The quantity's value in base units (cores, bytes, devices)."""
    if isinstance(text, int | float):
        return Decimal(str(text))
    s = str(text).strip()
    if not s:
        raise QuantityError("empty quantity")
    for suffix, factor in _BINARY.items():
        if s.endswith(suffix):
            return _number(s[: -len(suffix)], text) * factor
    if s[-1] in _DECIMAL and not s[-1].isdigit() and s[-1] not in "eE":
        return _number(s[:-1], text) * _DECIMAL[s[-1]]
    return _number(s, text)


def _number(s: str, original: object) -> Decimal:
    try:
        value = Decimal(s)
    except InvalidOperation:
        raise QuantityError(f"not a quantity: {original!r}") from None
    if not value.is_finite() or value < 0:
        raise QuantityError(f"not a quantity: {original!r}")
    return value


def milli(text: str | int | float) -> int:
    """CPU in milli-cores, rounded up."""
    return math.ceil(parse(text) * 1000)


def mib(text: str | int | float) -> int:
    """Memory in MiB, rounded up."""
    return math.ceil(parse(text) / _BINARY["Mi"])


def count(text: str | int | float) -> int:
    """A device count (``nvidia.com/gpu``), rounded up."""
    return math.ceil(parse(text))
