"""Reading trace CSV files (node lists, pod lists) with errors that name file, line and column.

A user pointing ``berth simulate`` at a hand-edited or truncated CSV must learn exactly where the
problem is, so every failure becomes a :class:`TraceFileError` naming the file, the 1-based line
and the column, and nothing is half-read.
"""

from __future__ import annotations

import csv
import stat
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from admission.simulate.errors import SimulateError
from solver.simulate.timed_scenario import TracePod
from solver.simulate.trace import NODE_COLUMNS, POD_COLUMNS, RowError, node_from_row, pod_from_row
from solver.types import Node

T = TypeVar("T")

#: The largest trace file read (the openb pod lists are about 1 MB).
MAX_BYTES = 256 * 1024 * 1024
#: Most nodes in a node list and pods in a pod list (openb: 1,523 nodes, 8,152 pods).
MAX_NODES = 100_000
MAX_PODS = 1_000_000
#: Most columns in a header (the pod lists have 11).
MAX_COLUMNS = 64


class TraceFileError(SimulateError):
    """``path:line: column C: problem``; line and column are None where they do not apply."""

    def __init__(self, path: Path, line: int | None, column: str | None, message: str) -> None:
        where = f"{path}" + (f":{line}" if line is not None else "")
        col = f" column {column}:" if column else ""
        super().__init__(f"{where}:{col} {message}")
        self.path, self.line, self.column, self.message = path, line, column, message


def _open(path: Path) -> Any:
    """The file for reading, once it is known to be a regular file of a sane size."""
    try:
        st = path.stat()
    except FileNotFoundError:
        raise TraceFileError(path, None, None, "cannot open: no such file; check the "
                             "path") from None
    except OSError as exc:
        raise TraceFileError(path, None, None, f"cannot open: {exc.strerror or exc}") from None
    if stat.S_ISDIR(st.st_mode):
        raise TraceFileError(path, None, None, "is a directory; give the CSV file inside it")
    if not stat.S_ISREG(st.st_mode):
        raise TraceFileError(path, None, None, "is not a regular file; give a CSV file")
    if st.st_size > MAX_BYTES:
        raise TraceFileError(path, None, None, f"{st.st_size} bytes; at most {MAX_BYTES} "
                             "are read: is this a trace CSV?")
    try:
        return path.open(newline="", encoding="utf-8")
    except OSError as exc:
        raise TraceFileError(path, None, None, f"cannot open: {exc.strerror or exc}") from None


def _read(path: Path, required: Sequence[str], parse: Callable[[dict[str, str]], T],
          max_rows: int, what: str) -> list[T]:
    handle = _open(path)
    out: list[T] = []
    names: set[str] = set()
    with handle:
        reader = csv.reader(handle)
        try:
            header = next(reader, None)
            if header is None:
                raise TraceFileError(path, 1, None, "the file is empty; expected a header row "
                                     f"with {', '.join(required)}")
            if len(header) > MAX_COLUMNS:
                raise TraceFileError(path, 1, None, f"{len(header)} columns in the header; at "
                                     f"most {MAX_COLUMNS}: is this a trace CSV?")
            header = [h.strip() for h in header]
            missing = [c for c in required if c not in header]
            if missing:
                raise TraceFileError(path, 1, missing[0], "missing from the header; expected "
                                     f"columns {', '.join(required)}")
            for row in reader:
                line = reader.line_num
                if not row or all(not cell.strip() for cell in row):
                    continue
                if len(row) > len(header):
                    raise TraceFileError(path, line, None, f"{len(row)} fields but the header "
                                         f"has {len(header)}")
                record = dict(zip(header, row, strict=False))
                try:
                    item = parse(record)
                except RowError as exc:
                    raise TraceFileError(path, line, exc.column, exc.message) from None
                name = getattr(item, "name", None)
                if isinstance(name, str):
                    if name in names:
                        raise TraceFileError(path, line, required[0],
                                             f"duplicate name {name!r}")
                    names.add(name)
                out.append(item)
                if len(out) > max_rows:
                    raise TraceFileError(path, line, None, f"more than {max_rows} {what}; "
                                         "split the file or sample it")
        except csv.Error as exc:
            raise TraceFileError(path, reader.line_num, None, f"malformed CSV: {exc}") from None
        except UnicodeDecodeError:
            raise TraceFileError(path, reader.line_num + 1, None,
                                 "not UTF-8 text; is this a CSV file? Save it as UTF-8") from None
        except OSError as exc:
            raise TraceFileError(path, reader.line_num, None,
                                 f"cannot read: {exc.strerror or exc}") from None
    return out


def read_nodes(path: Path) -> list[Node]:
    """A node list (``sn,cpu_milli,memory_mib,gpu,model``)."""
    nodes = _read(path, NODE_COLUMNS, node_from_row, MAX_NODES, "nodes")
    if not nodes:
        raise TraceFileError(path, None, None, "holds no node")
    return nodes


def read_pods(path: Path) -> list[TracePod]:
    """A pod list (``name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec,qos,...]``)."""
    pods = _read(path, POD_COLUMNS, pod_from_row, MAX_PODS, "pods")
    if not pods:
        raise TraceFileError(path, None, None, "holds no pod")
    return pods
