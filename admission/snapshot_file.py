"""A YAML or JSON snapshot from a file the user names, read with bounded work.

``berth solve`` reads snapshots from files anyone may hand it; each hostile file (binary, a
directory, nested 10^5 deep, an alias bomb, a key written twice) must end in one line naming the
file, where and what to do. The reading and the bounds are :mod:`admission.yamlfile`'s; this
module holds a snapshot's caps and words the errors for ``berth solve``.
"""

from __future__ import annotations

from admission.yamlfile import (
    BoundError,
    Caps,
    SyntaxProblem,
    YamlFileError,
    compose,
    construct,
    dotted,
    read_text,
    short,
)

#: The largest file read (bytes). A cluster of 10,000 eight-GPU nodes in the long form is
#: about 15 MB.
MAX_BYTES = 32 * 1024 * 1024
#: Deepest nesting of mappings and lists (a snapshot needs about 8).
MAX_DEPTH = 64
#: Most aliases (``*name``) in one file.
MAX_ALIASES = 1_000
#: Most values (scalars, mappings and lists) the document holds once its aliases are expanded.
MAX_VALUES = 2_000_000
CAPS = Caps(max_depth=MAX_DEPTH, max_aliases=MAX_ALIASES, max_values=MAX_VALUES)


class DocumentError(Exception):
    """The file cannot be read as a bounded YAML or JSON document. ``lines``: one message per
    problem, each naming the file (and the line and field where known) and the fix."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__("\n".join(lines))
        self.lines = tuple(lines)


def _lines(exc: YamlFileError) -> list[str]:
    return [p.render(exc.source) for p in exc.problems]


def load_document(path: str, *, what: str = "a YAML or JSON file") -> object:
    """The document in the file at ``path``, read with bounded work (see
    :mod:`admission.yamlfile`); :class:`DocumentError` names the file, the place and the fix."""
    try:
        text = read_text(path, what=what, max_bytes=MAX_BYTES)
        root, duplicates = compose(text, CAPS, path)
    except BoundError as exc:
        (problem,) = exc.problems
        where = problem.where(path)
        if exc.kind == "depth":
            deep = dotted(exc.loc, shorten=True)
            at = f" ...{deep[-40:]}:" if len(deep) > 40 else f" {deep}:" if deep else ""
            raise DocumentError([f"{where}:{at} {problem.message}; a snapshot needs fewer "
                                 "than 10: is this the right file?"]) from None
        if exc.kind == "values" and exc.anchor is None:
            raise DocumentError([f"{where}: {problem.message}; is this the right file?"]) \
                from None
        raise DocumentError(_lines(exc)) from None
    except SyntaxProblem as exc:
        raise DocumentError([f"{exc.problems[0].where(path)}: not valid YAML or JSON: "
                             f"{exc.problem}"]) from None
    except YamlFileError as exc:
        raise DocumentError(_lines(exc)) from None
    if duplicates:
        raise DocumentError([
            f"{path}:{d.again[0]}:{d.again[1]}: {dotted(d.loc, shorten=True)}: duplicate key "
            f"(first at line {d.first[0]}); YAML would keep only the last one: remove one of "
            "them" for d in duplicates])
    try:
        return construct(root)
    except SyntaxProblem as exc:
        raise DocumentError([f"{exc.problems[0].where(path)}: not valid YAML or JSON: "
                             f"{exc.problem}"]) from None
    except (ValueError, OverflowError) as exc:  # an out-of-range date, a 5,000-digit number
        raise DocumentError([f"{path}: a value cannot be read ({short(str(exc), 80)}); "
                             "write it as a plain number or a quoted string"]) from None
