"""Bounded YAML reading: the one place Berth turns an untrusted file into a YAML node tree.

Snapshots (``berth solve``) and the policy (``berth policy check``, the webhook) come from files
anyone may hand Berth: a binary file, a directory, a document nested 10^5 deep, an alias bomb
("billion laughs": a kilobyte of anchors standing for 10^9 values), a recursive alias or a key
written twice must each end in an error that names the place and the fix, within a second, never
in a traceback, a RecursionError or minutes of work. Two readers used to do this separately and
drifted apart; each caller now passes its own :class:`Caps` and words the errors for its users.

* :func:`read_text`: the file's text: a regular file, at most ``max_bytes``, UTF-8 (or UTF-16
  with a byte-order mark), no NUL byte.
* :func:`compose`: scan the event stream first (the nesting depth, the number of aliases and
  the size once aliases are expanded are bounded, an alias inside the node it names is refused,
  and every key written twice in one mapping is collected with both places: PyYAML silently
  keeps the last), and only then compose the node tree, at a depth and size known to be safe.
  The tree is returned (not the data) so a caller can mark its errors with lines and columns;
  :func:`construct` builds the data from it.
"""

from __future__ import annotations

import codecs
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

Loc = tuple[str | int, ...]

_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_MERGE = "tag:yaml.org,2002:merge"
_resolver: Any = yaml.resolver.Resolver()


@dataclass(frozen=True, slots=True)
class Caps:
    """The bounds one kind of file is read under."""

    max_depth: int  # deepest nesting of mappings and lists
    max_aliases: int  # most aliases (``*name``)
    max_values: int  # most scalars, mappings and lists once aliases are expanded


@dataclass(frozen=True, slots=True)
class Problem:
    """One problem in a file: its message and, where known, its place (1-based)."""

    message: str
    line: int | None = None
    column: int | None = None

    def where(self, source: str) -> str:
        """``source:line:column``, as much of it as is known."""
        if self.line is None:
            return source
        return f"{source}:{self.line}" + (f":{self.column}" if self.column is not None else "")

    def render(self, source: str) -> str:
        return f"{self.where(source)}: {self.message}"


class YamlFileError(Exception):
    """The file cannot be read as bounded YAML; ``problems`` say where and what to do."""

    def __init__(self, problems: list[Problem], source: str = "") -> None:
        self.problems = tuple(problems)
        self.source = source
        super().__init__("\n".join(p.render(source) for p in problems))


class BoundError(YamlFileError):
    """A bound of :class:`Caps` is exceeded. ``kind`` is ``depth``, ``aliases``, ``values``
    (counting aliases as what they stand for), or ``recursive``; ``limit`` the bound; ``loc``
    where (the path of the open node, for ``depth``); ``anchor`` the alias that crossed it."""

    def __init__(self, kind: str, limit: int, message: str, mark: Any, *, loc: Loc = (),
                 anchor: str | None = None, source: str = "") -> None:
        line, column = (mark.line + 1, mark.column + 1) if mark is not None else (None, None)
        super().__init__([Problem(message, line, column)], source)
        self.kind, self.limit, self.loc, self.anchor = kind, limit, loc, anchor


class SyntaxProblem(YamlFileError):
    """The text is not valid YAML; ``problem`` is the parser's word for it."""

    def __init__(self, problem: str, mark: Any, source: str = "") -> None:
        line, column = (mark.line + 1, mark.column + 1) if mark is not None else (None, None)
        super().__init__([Problem(problem, line, column)], source)
        self.problem = problem


@dataclass(frozen=True, slots=True)
class Duplicate:
    """A key written twice in one mapping: its path and both places (1-based line, column)."""

    loc: Loc
    first: tuple[int, int]
    again: tuple[int, int]


def short(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def dotted(loc: Loc, *, shorten: bool = False) -> str:
    """``tenants[2].quota``: a path in the file's own spelling."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            name = short(part) if shorten else part
            out += f".{name}" if out else name
    return out


def read_text(path: str | Path, *, what: str, max_bytes: int) -> str:
    """The file at ``path`` as text: a regular file of at most ``max_bytes``, UTF-8 (or UTF-16
    with a byte-order mark), without NUL bytes; else :class:`YamlFileError` (source: ``path``)."""
    source = str(path)

    def fail(message: str, line: int | None = None) -> YamlFileError:
        return YamlFileError([Problem(message, line)], source)

    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        raise fail("cannot read: no such file; check the path") from None
    except OSError as exc:
        raise fail(f"cannot read: {exc.strerror or exc}") from None
    if stat.S_ISDIR(st.st_mode):
        raise fail(f"is a directory; give {what} inside it")
    if not stat.S_ISREG(st.st_mode):
        raise fail(f"is not a regular file; give {what}")
    if st.st_size > max_bytes:
        raise fail(f"{st.st_size} bytes; at most {max_bytes} are read "
                   f"({max_bytes // (1024 * 1024)} MiB): is this {what}?")
    try:
        with p.open("rb") as handle:
            raw = handle.read(max_bytes + 1)
    except OSError as exc:
        raise fail(f"cannot read: {exc.strerror or exc}") from None
    if len(raw) > max_bytes:
        raise fail(f"more than {max_bytes} bytes; is this {what}?")
    if raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        try:
            text = raw.decode("utf-16")
        except UnicodeDecodeError:
            raise fail("not valid UTF-16 text despite its byte-order mark; save it as "
                       "UTF-8") from None
    else:
        try:
            text = raw.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            line = raw.count(b"\n", 0, exc.start) + 1
            raise fail(f"not UTF-8 text (byte 0x{raw[exc.start]:02x}); is this {what}? "
                       "Save it as UTF-8", line) from None
    nul = text.find("\x00")
    if nul >= 0:
        raise fail(f"binary data (a NUL byte); give {what}, not a binary file",
                   text.count("\n", 0, nul) + 1)
    return text


@dataclass(slots=True)
class _Frame:
    """An open mapping or list while the events are scanned."""

    mapping: bool
    loc: Loc
    start: int  # values counted before this one opened (itself included)
    anchor: str | None
    index: int = 0  # lists: the next item's index
    expect_key: bool = True  # mappings: the next node is a key
    key: str | None = None  # mappings: the key whose value comes next
    keys: dict[tuple[str, str], tuple[int, int]] = field(default_factory=dict)  # -> first place


def _child_loc(frame: _Frame | None) -> Loc:
    if frame is None:
        return ()
    if frame.mapping:
        if frame.expect_key:
            return frame.loc
        return (*frame.loc, frame.key if frame.key is not None else "?")
    return (*frame.loc, frame.index)


def _place(mark: Any) -> tuple[int, int]:
    return (mark.line + 1, mark.column + 1) if mark is not None else (0, 0)


def scan(text: str, caps: Caps, source: str = "") -> list[Duplicate]:
    """Check the event stream of ``text`` against ``caps``: :class:`BoundError` on the first
    bound exceeded; else every key written twice. Syntax errors are left to :func:`compose`,
    which reports them with their place."""
    stack: list[_Frame] = []
    anchors: dict[str, int] = {}  # anchor -> expanded size, once its node is complete
    open_anchors: set[str] = set()
    values = 0
    aliases = 0
    duplicates: list[Duplicate] = []

    def completed(size: int, anchor: str | None, event: Any, key: tuple[str, str] | None) -> None:
        """A node of ``size`` expanded values ends; tell its parent."""
        if anchor is not None:
            anchors[anchor] = size
            open_anchors.discard(anchor)
        if not stack:
            return
        parent = stack[-1]
        if not parent.mapping:
            parent.index += 1
            return
        if parent.expect_key:
            parent.key = key[1] if key is not None else None
            if key is not None and key[0] != _MERGE:
                first = parent.keys.get(key)
                if first is not None:
                    duplicates.append(Duplicate((*parent.loc, key[1]), first,
                                                _place(event.start_mark)))
                else:
                    parent.keys[key] = _place(event.start_mark)
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
                name: str = event.anchor or ""
                if name in open_anchors:
                    raise BoundError("recursive", 0, f"*{short(name)} refers to a node that "
                                     "contains it (a recursive document); write the values "
                                     "out",
                                     event.start_mark, anchor=name, source=source)
                size = anchors.get(name)
                if size is None:
                    break  # an undefined alias: compose says so, with its place
                if aliases > caps.max_aliases:
                    raise BoundError("aliases", caps.max_aliases, f"more than "
                                     f"{caps.max_aliases} aliases (*name); write the values "
                                     "out instead", event.start_mark, anchor=name,
                                     source=source)
                values += size
                if values > caps.max_values:
                    raise BoundError("values", caps.max_values, "the aliases expand the "
                                     f"document past {caps.max_values} values (at "
                                     f"*{short(name)}); write the values out or use "
                                     "fewer aliases", event.start_mark, anchor=name,
                                     source=source)
                completed(size, None, event, None)
            elif isinstance(event, yaml.SequenceStartEvent | yaml.MappingStartEvent):
                values += 1
                mapping = isinstance(event, yaml.MappingStartEvent)
                stack.append(_Frame(mapping, _child_loc(stack[-1] if stack else None),
                                    values, event.anchor))
                if event.anchor is not None:
                    open_anchors.add(event.anchor)
                if len(stack) > caps.max_depth:
                    raise BoundError("depth", caps.max_depth, f"nested more than "
                                     f"{caps.max_depth} levels deep", event.start_mark,
                                     loc=stack[-1].loc, source=source)
            elif isinstance(event, yaml.SequenceEndEvent | yaml.MappingEndEvent):
                frame = stack.pop()
                completed(values - frame.start + 1, frame.anchor, event, None)
            if values > caps.max_values:
                raise BoundError("values", caps.max_values, f"more than {caps.max_values} "
                                 "values", event.start_mark, source=source)
    except yaml.YAMLError as exc:
        # libyaml (PyYAML >= 6.0.4's wheels) has a nesting bound of its own, and its scanner
        # reads a flow collection's tokens ahead, so it may stop before any event reaches the
        # depth check above: the same bound exceeded, said the same way.
        if (getattr(exc, "problem", None) or "").startswith("exceeded maximum nesting depth"):
            raise BoundError("depth", caps.max_depth, f"nested more than {caps.max_depth} "
                             "levels deep", getattr(exc, "problem_mark", None),
                             loc=stack[-1].loc if stack else (), source=source) from None
        # anything else: compose reports it, with its place
    return duplicates


def compose(text: str, caps: Caps, source: str = "") -> tuple[yaml.Node | None,
                                                                list[Duplicate]]:
    """The node tree of the single document in ``text`` (None when empty) and every key
    written twice, the bounds of ``caps`` checked before the tree is built;
    :class:`BoundError` or :class:`SyntaxProblem` else."""
    duplicates = scan(text, caps, source)
    loader = _Loader(text)
    try:
        return loader.get_single_node(), duplicates
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SyntaxProblem(problem, mark, source) from None
    finally:
        loader.dispose()


def construct(root: yaml.Node | None) -> Any:
    """The data of a tree from :func:`compose`; ValueError or OverflowError on a value that
    cannot be built (an out-of-range date, a 5,000-digit number)."""
    if root is None:
        return None
    loader = _Loader("")
    try:
        return loader.construct_document(root)
    except yaml.YAMLError as exc:  # a tag no safe loader builds
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SyntaxProblem(problem, mark) from None
    finally:
        loader.dispose()
