"""JSON Patch (RFC 6902) and JSON Pointer (RFC 6901), spelled once for all of Berth.

The webhook answers a pod CREATE with a patch, the controller writes placements and opens gates
with patches, and the tests' API server applies them. All three need the same escaping of ``~``
and ``/`` in pointer tokens, the same op shapes and the same rules for applying them, so all
three take them from here. :func:`apply` lets the controller check a patch before it sends it
and lets the tests store what the API server would.

Where the API server's applier (the json-patch library kube-apiserver uses) is looser than the
RFC, :func:`apply` follows the server, because it predicts what the server stores: a ``test``
of a missing member sees ``null``, and ``replace`` of a missing member of an object sets it.
The whole document (pointer ``""``) is refused, as the server refuses it; ``move`` and ``copy``
are refused too: Berth never sends them.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from typing import Any, Literal, TypedDict

Part = str | int


class PatchOp(TypedDict, total=False):
    """One operation. Written as a dict literal, not built by a call: the webhook writes about
    twenty per review, and a constructor call each costs a measurable share of the review."""

    op: Literal["add", "remove", "replace", "test"]
    path: str
    value: Any  # every op but ``remove``


class PatchError(ValueError):
    """The patch does not apply to the document: a missing path, a bad index, an unknown op."""


class PatchConflict(PatchError):
    """A ``test`` operation found another value: the document changed since it was read."""


# --------------------------------------------------------------------------------------------
# Pointers
# --------------------------------------------------------------------------------------------


@lru_cache(maxsize=4096)
def escape(token: str) -> str:
    """One reference token of a pointer: ``~`` and ``/`` escaped (``~`` first)."""
    return token.replace("~", "~0").replace("/", "~1")


def unescape(token: str) -> str:
    """The key an escaped reference token names (``~1`` first, so ``~01`` reads ``~1``)."""
    return token.replace("~1", "/").replace("~0", "~")


def pointer(parts: Sequence[Part]) -> str:
    """The pointer to the member reached through ``parts`` (keys and list indices)."""
    return _pointer(tuple(parts))


@lru_cache(maxsize=4096)
def _pointer(parts: tuple[Part, ...]) -> str:
    # The same few paths recur on every pod: build each once.
    return "".join("/" + escape(str(p)) for p in parts)


def tokens(path: str) -> list[str]:
    """The unescaped reference tokens of ``path``; the inverse of :func:`pointer`."""
    if not path:
        return []  # the whole document
    if not path.startswith("/"):
        raise PatchError(f"{path!r}: not a pointer to a member (it must start with '/')")
    return [unescape(t) for t in path[1:].split("/")]


# --------------------------------------------------------------------------------------------
# Applying
# --------------------------------------------------------------------------------------------


_KINDS = frozenset(("add", "remove", "replace", "test"))


def apply(doc: Mapping[str, Any], ops: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """``doc`` after ``ops``, as a new document (``doc`` is left as it is). Raises
    :class:`PatchConflict` when a ``test`` fails and :class:`PatchError` when an op does not
    apply; either way no partial result escapes, as the API server applies a patch whole or
    not at all."""
    out: dict[str, Any] = copy.deepcopy(dict(doc))
    for op in ops:
        kind, path = op.get("op"), op.get("path")
        if kind not in _KINDS:
            raise PatchError(f"unsupported JSON patch op {kind!r}")
        if not isinstance(path, str):
            raise PatchError(f"{kind} op without a path")
        if not path:
            raise PatchError(f"{kind} of the whole document: only members may be patched")
        if kind != "remove" and "value" not in op:
            raise PatchError(f"{kind} at {path}: no value")
        *parents, last = tokens(path)
        parent: Any = out
        for token in parents:
            parent = _child(parent, token, path)
        if not isinstance(parent, dict | list):
            raise PatchError(f"{kind} at {path}: the parent is not an object or a list")
        if kind == "test":
            _test(parent, last, op["value"], path)
        elif kind == "add":
            _add(parent, last, copy.deepcopy(op["value"]), path)
        elif kind == "remove":
            _remove(parent, last, path)
        elif isinstance(parent, list):  # replace
            parent[_index(parent, last, path)] = copy.deepcopy(op["value"])
        else:
            parent[last] = copy.deepcopy(op["value"])  # even a missing one, as the server
    return out


def _index(items: list[Any], token: str, path: str, *, end: bool = False) -> int:
    """The list index ``token`` names; ``end`` allows one past the last (an insert)."""
    if not (token.isascii() and token.isdigit()):
        raise PatchError(f"{path}: {token!r} is not a list index")
    index = int(token)
    if index > len(items) or (index == len(items) and not end):
        raise PatchError(f"{path}: index {index} is out of range (length {len(items)})")
    return index


def _child(node: Any, token: str, path: str) -> Any:
    if isinstance(node, dict):
        if token not in node:
            raise PatchError(f"{path}: no member {token!r}")
        return node[token]
    if isinstance(node, list):
        return node[_index(node, token, path)]
    raise PatchError(f"{path}: {token!r} is inside a value that is not an object or a list")


def _add(parent: dict[str, Any] | list[Any], last: str, value: Any, path: str) -> None:
    if isinstance(parent, dict):
        parent[last] = value
    elif last == "-":
        parent.append(value)
    else:
        parent.insert(_index(parent, last, path, end=True), value)


def _remove(parent: dict[str, Any] | list[Any], last: str, path: str) -> None:
    if isinstance(parent, list):
        del parent[_index(parent, last, path)]
    elif last in parent:
        del parent[last]
    else:
        raise PatchError(f"remove at {path}: nothing there")


def _test(parent: dict[str, Any] | list[Any], last: str, want: Any, path: str) -> None:
    # A missing member of an object is null, as the API server reads it.
    here = parent[_index(parent, last, path)] if isinstance(parent, list) else parent.get(last)
    if not _same(here, want):
        raise PatchConflict(f"test failed at {path}: {here!r} != {want!r}")


def _same(a: Any, b: Any) -> bool:
    """JSON equality: Python's, except that ``true`` is not ``1`` and ``false`` is not ``0``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(v, b[k]) for k, v in a.items())
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)
