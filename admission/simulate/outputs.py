"""Output files of a simulation (``--json``, ``--plot``), checked before the simulation runs.

A replay can take minutes; a JSON path that is a directory, lies in a directory that does not
exist or cannot be written, or names one of the input files, must be refused at the start,
not after the work is done and lost. :func:`check_outputs` does that; :func:`write_text` and
:func:`save_figure` report a write that still fails as a :class:`SimulateError`.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from admission.simulate.errors import SimulateError

#: What matplotlib's Agg backend writes, by file name suffix (no suffix: PNG).
PLOT_FORMATS = ("png", "pdf", "svg", "svgz", "eps", "ps", "jpg", "jpeg", "tif", "tiff", "webp",
                "pgf", "raw", "rgba")


def check_output(path: Path, flag: str, *, plot: bool = False, make_parent: bool = False,
                 inputs: Sequence[Path] = ()) -> None:
    """Raise :class:`SimulateError` unless ``path`` can be written: not a directory, not one
    of ``inputs``, in a directory that exists (or, with ``make_parent``, can be created) and
    is writable; a plot's suffix must be a format matplotlib writes."""
    where = f"{flag} {path}"
    if path.is_dir():
        raise SimulateError(f"{where}: is a directory; name a file inside it")
    if plot and path.suffix and path.suffix[1:].lower() not in PLOT_FORMATS:
        raise SimulateError(f"{where}: cannot draw a {path.suffix} file; use one of "
                            f"{', '.join('.' + f for f in PLOT_FORMATS[:4])}, ...")
    for source in inputs:
        with contextlib.suppress(OSError):
            if path.exists() and path.samefile(source):
                raise SimulateError(f"{where}: is the input file {source}; writing it would "
                                    "overwrite it, so name another file")
    if path.exists() and not path.is_file():
        raise SimulateError(f"{where}: exists and is not a regular file; name another file")
    if path.exists() and not os.access(path, os.W_OK):
        raise SimulateError(f"{where}: cannot be overwritten (permission denied); name "
                            "another file")
    parent = path.parent
    if make_parent:
        while not parent.exists() and parent != parent.parent:
            parent = parent.parent
    if not parent.exists():
        raise SimulateError(f"{where}: the directory {parent} does not exist; create it "
                            "first or name another file")
    if not parent.is_dir():
        raise SimulateError(f"{where}: {parent} is not a directory; name another file")
    try:  # an actual probe: os.access is wrong for root on a read-only file system
        with tempfile.NamedTemporaryFile(dir=parent, prefix=".berth-probe-"):
            pass
    except OSError as exc:
        raise SimulateError(f"{where}: cannot write in {parent} "
                            f"({(exc.strerror or str(exc)).lower()}); name another "
                            "file") from None


def check_outputs(*, json_path: Path | None, plot_path: Path | None,
                  inputs: Sequence[str] = (), make_plot_parent: bool = False) -> None:
    """:func:`check_output` for the JSON and the plot where given."""
    sources = [Path(p) for p in inputs]
    if json_path is not None:
        check_output(json_path, "--json", inputs=sources)
    if plot_path is not None:
        check_output(plot_path, "--plot", plot=True, make_parent=make_plot_parent,
                     inputs=sources)
    if json_path is not None and plot_path is not None and json_path == plot_path:
        raise SimulateError(f"--json and --plot both name {json_path}; give two files")


def write_text(path: Path, text: str, flag: str = "--json") -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    except OSError as exc:
        raise SimulateError(f"{flag} {path}: cannot write: {exc.strerror or exc}") from None


def save_figure(fig: Any, path: Path, *, dpi: int) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=dpi)
    except (OSError, ValueError) as exc:
        raise SimulateError(f"--plot {path}: cannot write the plot: "
                            f"{getattr(exc, 'strerror', None) or exc}") from None
