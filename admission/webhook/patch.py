"""The webhook's JSON Patch for a pod, built against the pod as it arrived.

A JSON Patch cannot add ``/metadata/labels/x`` when ``labels`` does not exist, and ``add`` on an
existing member replaces it; :class:`PatchBuilder` knows both, creating parent maps once and
remembering what it created, so callers just say which value goes where. Pointers and ops come
from :mod:`admission.jsonpatch`; what stays here is the builder and the caches that keep it off
the review's cost.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from admission.jsonpatch import Part, PatchOp, escape, pointer

# Pointer of each member of a map, by the map's pointer: a plain dictionary look-up per key
# (cheaper than a two-argument cache call); merge_map runs for every key Berth sets.
_MEMBERS: dict[str, dict[str, str]] = {}


def _members(base: str) -> dict[str, str]:
    found = _MEMBERS.get(base)
    if found is None or len(found) > 4096:  # bounded: callers may pass any keys
        found = _MEMBERS[base] = {}
    return found


def member(base: str, key: str) -> str:
    """The pointer of member ``key`` of the map at pointer ``base``."""
    members = _members(base)
    path = members.get(key)
    if path is None:
        path = members[key] = base + "/" + escape(key)
    return path


class PatchBuilder:
    def __init__(self, obj: dict[str, Any]) -> None:
        self.obj = obj
        self._made: set[tuple[Part, ...]] = set()
        self.ops: list[PatchOp] = []

    def _get(self, parts: Sequence[Part]) -> tuple[bool, Any]:
        node: Any = self.obj
        for p in parts:
            if isinstance(node, dict):
                if isinstance(p, str) and p in node:
                    node = node[p]
                    continue
            elif isinstance(node, list) and isinstance(p, int) and 0 <= p < len(node):
                node = node[p]
                continue
            return False, None
        return True, node

    def exists(self, parts: Sequence[Part]) -> bool:
        return tuple(parts) in self._made or self._get(parts)[0]

    def _ensure_map(self, parts: Sequence[Part]) -> None:
        # One walk down from the root (not one per prefix): ``node`` is the value at the
        # current prefix in the pod as it arrived, None once the pod has nothing there.
        node: Any = self.obj
        made = self._made
        for i in range(1, len(parts) + 1):
            p = parts[i - 1]
            if isinstance(node, dict) and isinstance(p, str):
                node = node.get(p)
            elif isinstance(node, list) and isinstance(p, int) and 0 <= p < len(node):
                node = node[p]
            else:
                node = None
            if node is not None:
                continue
            prefix = tuple(parts[:i])
            if prefix in made:
                continue
            self.ops.append({"op": "add", "path": pointer(prefix), "value": {}})
            made.add(prefix)

    def set(self, parts: Sequence[Part], value: Any) -> None:
        """Set a member of a map, creating the parent maps that are missing."""
        self._ensure_map(parts[:-1])
        self.ops.append({"op": "add", "path": pointer(parts), "value": value})

    def remove(self, parts: Sequence[Part]) -> None:
        if self._get(parts)[0]:
            self.ops.append({"op": "remove", "path": pointer(parts)})

    def append(self, parts: Sequence[Part], value: Any) -> None:
        """Append to a list, creating it (and its parent maps) when missing."""
        key = tuple(parts)
        found, current = self._get(parts)
        if key in self._made or (found and isinstance(current, list)):
            self.ops.append({"op": "add", "path": pointer(parts) + "/-", "value": value})
            return
        self._ensure_map(parts[:-1])
        self.ops.append({"op": "add", "path": pointer(parts), "value": [value]})
        self._made.add(key)

    def merge_map(self, parts: Sequence[Part], existing: object, values: Mapping[str, Any],
                  drop: Iterable[str] = ()) -> None:
        """Give the map at ``parts`` these ``values`` and remove the ``drop`` keys: one op per
        changed key when the map exists (small patches), else one op adding the whole map."""
        if isinstance(existing, dict) and tuple(parts) not in self._made:
            base = pointer(parts)
            members = _members(base)
            ops = self.ops
            for key in drop:
                if key in existing:
                    ops.append({"op": "remove", "path": member(base, key)})
            for key, value in values.items():
                if existing.get(key) != value:
                    path = members.get(key)
                    if path is None:
                        path = member(base, key)
                    ops.append({"op": "add", "path": path, "value": value})
            return
        self.set(parts, dict(values))

    def extend_list(self, parts: Sequence[Part], existing: object, items: Sequence[Any]) -> None:
        """Append ``items`` to the list at ``parts`` (created when missing)."""
        if not items:
            return
        if isinstance(existing, list) and tuple(parts) not in self._made:
            path = pointer(parts) + "/-"
            self.ops.extend({"op": "add", "path": path, "value": item} for item in items)
            return
        self.set(parts, list(items))
