"""A YAML or JSON document from a file the user names, read with bounded work.

``berth solve`` reads snapshots from files anyone may hand it: a binary file, a directory, a
document nested 10^5 deep, a YAML alias bomb or a key written twice must each end in one line
naming the file, where and what to do, within a second, never in a traceback, a RecursionError
or minutes of work. :func:`load_document` checks the file and scans the YAML event stream before
building anything: the nesting depth, the number of aliases and the size the document has once
its aliases are expanded are bounded, and every key written twice in one mapping is reported with
both lines (PyYAML silently keeps the last, which loses the first). Only then is the document
built, at a depth and size already known to be safe.
"""

from __future__ import annotations

import codecs
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

#: The largest file read (bytes). A cluster of 10,000 eight-GPU nodes in the long form is
#: about 15 MB.
MAX_BYTES = 32 * 1024 * 1024
#: Deepest nesting of mappings and lists (a snapshot needs about 8).
MAX_DEPTH = 64
#: Most aliases (``*name``) in one file.
MAX_ALIASES = 1_000
#: Most values (scalars, mappings and lists) the document holds once its aliases are expanded.
MAX_VALUES = 2_000_000

_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_MERGE = "tag:yaml.org,2002:merge"
_resolver = yaml.resolver.Resolver()


class DocumentError(Exception):
    """The file cannot be read as a bounded YAML or JSON document. ``lines``: one message per
    problem, each naming the file (and the line and field where known) and the fix."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__("\n".join(lines))
        self.lines = tuple(lines)


def _short(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def read_text(path: str, *, what: str = "a YAML or JSON file", max_bytes: int = MAX_BYTES) -> str:
    """The file at ``path`` as text: a regular file of at most ``max_bytes``, UTF-8 (or UTF-16
    with a byte-order mark), without NUL bytes; else :class:`DocumentError`."""
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        raise DocumentError([f"{path}: cannot read: no such file; check the path"]) from None
    except OSError as exc:
        raise DocumentError([f"{path}: cannot read: {exc.strerror or exc}"]) from None
    if stat.S_ISDIR(st.st_mode):
        raise DocumentError([f"{path}: is a directory; give {what} inside it"])
    if not stat.S_ISREG(st.st_mode):
        raise DocumentError([f"{path}: is not a regular file; give {what}"])
    if st.st_size > max_bytes:
        raise DocumentError([f"{path}: {st.st_size} bytes; at most {max_bytes} are read "
                             f"({max_bytes // (1024 * 1024)} MiB): is this {what}?"])
    try:
        with p.open("rb") as handle:
            raw = handle.read(max_bytes + 1)
    except OSError as exc:
        raise DocumentError([f"{path}: cannot read: {exc.strerror or exc}"]) from None
    if len(raw) > max_bytes:
        raise DocumentError([f"{path}: more than {max_bytes} bytes; is this {what}?"])
    if raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        try:
            text = raw.decode("utf-16")
        except UnicodeDecodeError:
            raise DocumentError([f"{path}: not valid UTF-16 text despite its byte-order mark; "
                                 "save it as UTF-8"]) from None
    else:
        try:
            text = raw.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            line = raw.count(b"\n", 0, exc.start) + 1
            byte = raw[exc.start]
            raise DocumentError([f"{path}:{line}: not UTF-8 text (byte 0x{byte:02x}); is this "
                                 f"{what}? Save it as UTF-8"]) from None
    nul = text.find("\x00")
    if nul >= 0:
        line = text.count("\n", 0, nul) + 1
        raise DocumentError([f"{path}:{line}: binary data (a NUL byte); give {what}, not a "
                             "binary file"])
    return text


@dataclass(slots=True)
class _Frame:
    """An open mapping or list while the events are scanned."""

    mapping: bool
    path: str
    start: int  # values counted before this one opened (itself included)
    anchor: str | None
    index: int = 0  # lists: the next item's index
    expect_key: bool = True  # mappings: the next node is a key
    key: str | None = None  # mappings: the key whose value comes next
    keys: dict[tuple[str, str], int] = field(default_factory=dict)  # key -> its first line


def _child_path(frame: _Frame | None) -> str:
    if frame is None:
        return ""
    if frame.mapping:
        if frame.expect_key:
            return frame.path
        key = _short(frame.key) if frame.key is not None else "?"
        return f"{frame.path}.{key}" if frame.path else key
    return f"{frame.path}[{frame.index}]"


def _where(path: str, mark: Any) -> str:
    return f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else path


def scan(text: str, path: str) -> None:
    """Check the event stream of ``text`` against the bounds; raise :class:`DocumentError`
    with every key written twice, or with the first bound exceeded. Syntax errors are left to
    the loader, which reports them with their line."""
    stack: list[_Frame] = []
    anchors: dict[str, int] = {}
    values = 0
    aliases = 0
    duplicates: list[str] = []

    def completed(size: int, anchor: str | None, event: Any, key: tuple[str, str] | None) -> None:
        """A node of ``size`` expanded values ends; tell its parent."""
        if anchor is not None:
            anchors[anchor] = size
        if not stack:
            return
        parent = stack[-1]
        if not parent.mapping:
            parent.index += 1
            return
        if parent.expect_key:
            parent.key = key[1] if key is not None else None
            if key is not None and key[0] != _MERGE:
                line = event.start_mark.line + 1 if event.start_mark is not None else 0
                first = parent.keys.get(key)
                if first is not None:
                    field_path = f"{parent.path}.{_short(key[1])}" if parent.path else \
                        _short(key[1])
                    duplicates.append(
                        f"{_where(path, event.start_mark)}: {field_path}: duplicate key (first "
                        f"at line {first}); YAML would keep only the last one: remove one of "
                        "them")
                else:
                    parent.keys[key] = line
        parent.expect_key = not parent.expect_key

    try:
        for event in yaml.parse(text, Loader=_Loader):
            if isinstance(event, yaml.ScalarEvent):
                values += 1
                key = None
                if stack and stack[-1].mapping and stack[-1].expect_key:
                    tag = event.tag if event.tag not in (None, "!") else _resolver.resolve(
                        yaml.ScalarNode, event.value, event.implicit)
                    key = (tag, event.value)
                completed(1, event.anchor, event, key)
            elif isinstance(event, yaml.AliasEvent):
                aliases += 1
                size = anchors.get(event.anchor)
                if size is None:
                    return  # an undefined alias: the loader says so, with its line
                if aliases > MAX_ALIASES:
                    raise DocumentError([f"{_where(path, event.start_mark)}: more than "
                                         f"{MAX_ALIASES} aliases (*name); write the values out "
                                         "instead"])
                values += size
                if values > MAX_VALUES:
                    raise DocumentError([f"{_where(path, event.start_mark)}: the aliases expand "
                                         f"the document past {MAX_VALUES} values (at "
                                         f"*{_short(event.anchor)}); write the values out or "
                                         "use fewer aliases"])
                completed(size, None, event, None)
            elif isinstance(event, yaml.SequenceStartEvent | yaml.MappingStartEvent):
                values += 1
                mapping = isinstance(event, yaml.MappingStartEvent)
                stack.append(_Frame(mapping, _child_path(stack[-1] if stack else None),
                                    values, event.anchor))
                if len(stack) > MAX_DEPTH:
                    where = _where(path, event.start_mark)
                    deep = stack[-1].path
                    at = f" ...{deep[-40:]}:" if len(deep) > 40 else f" {deep}:" if deep else ""
                    raise DocumentError([f"{where}:{at} nested more than {MAX_DEPTH} levels "
                                         "deep; a snapshot needs fewer than 10: is this the "
                                         "right file?"])
            elif isinstance(event, yaml.SequenceEndEvent | yaml.MappingEndEvent):
                frame = stack.pop()
                completed(values - frame.start + 1, frame.anchor, event, None)
            if values > MAX_VALUES:
                raise DocumentError([f"{_where(path, event.start_mark)}: more than "
                                     f"{MAX_VALUES} values; is this the right file?"])
    except yaml.YAMLError:
        pass  # the loader reports it, with its line
    if duplicates:
        raise DocumentError(duplicates)


def load_document(path: str, *, what: str = "a YAML or JSON file") -> object:
    """The document in the file at ``path``, read with bounded work (see the module's
    docstring); :class:`DocumentError` names the file, the place and the fix."""
    text = read_text(path, what=what)
    scan(text, path)
    try:
        return yaml.load(text, Loader=_Loader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise DocumentError([f"{_where(path, mark)}: not valid YAML or JSON: {problem}"]) \
            from None
    except (ValueError, OverflowError) as exc:  # an out-of-range date, a 5,000-digit number
        raise DocumentError([f"{path}: a value cannot be read ({_short(str(exc), 80)}); "
                             "write it as a plain number or a quoted string"]) from None
