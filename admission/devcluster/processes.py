"""Starting, probing and stopping the local control plane's processes.

Every program runs in a session (and so a process group) of its own, with stdout and stderr in
a log file, so that stopping it kills anything it forked and a crash leaves a log to read.
Processes are recorded by pid, process-group id and executable path; a stop from another
Python process (``berth dev-cluster down``) checks the executable before signalling, so a pid
reused by an unrelated program after a reboot is never killed.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """A ``preexec_fn``: runs in the child before exec, and asks the kernel to SIGKILL the
    child when its parent dies, so a test run killed outright (SIGKILL, OOM) still leaves no
    control plane behind."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


class StartupError(RuntimeError):
    """A component did not become healthy; the message includes the tail of its log."""


@dataclass(frozen=True)
class ProcessRecord:
    """What is needed to find and stop a started process later, from any Python process."""

    name: str
    pid: int
    pgid: int
    exe: str
    log: str

    def to_json(self) -> dict[str, object]:
        return asdict(self)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def log_tail(path: str | Path, lines: int = 25) -> str:
    try:
        text = Path(path).read_text(errors="replace")
    except OSError as exc:
        return f"(no log: {exc})"
    return "\n".join(text.splitlines()[-lines:])


def start(
    name: str,
    argv: Sequence[str],
    log_dir: Path,
    *,
    env: dict[str, str] | None = None,
    preexec_fn: Callable[[], None] | None = None,
    exe: str | None = None,
) -> tuple[subprocess.Popen[bytes], ProcessRecord]:
    """Start ``argv`` in a session of its own, output to ``log_dir/<name>.log``. ``exe`` is
    the program the process runs once ``argv[0]`` has exec'd it (a wrapper such as
    ``unshare ... sh -c 'exec PROGRAM'``), so that a later check finds it by that path."""
    log = log_dir / f"{name}.log"
    with log.open("ab") as out:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # own process group: killpg reaches its children too
            env={**os.environ, **(env or {})},
            preexec_fn=preexec_fn,
        )
    record = ProcessRecord(name=name, pid=proc.pid, pgid=proc.pid, exe=exe or str(argv[0]),
                           log=str(log))
    return proc, record


class Spawn(Protocol):
    """Starts one named process and records it: :meth:`DevCluster.spawn` (recorded in the
    cluster's state, stopped by ``berth dev-cluster down``) or :func:`spawner`'s (a test's)."""

    def __call__(self, name: str, argv: Sequence[str], *, env: dict[str, str] | None = None,
                 exe: str | None = None) -> tuple[subprocess.Popen[bytes], ProcessRecord]: ...


def spawner(log_dir: Path, *, die_with_parent_process: bool = True) -> Spawn:
    """A :class:`Spawn` that logs into ``log_dir``, its processes tied to this one."""
    def spawn(name: str, argv: Sequence[str], *, env: dict[str, str] | None = None,
              exe: str | None = None) -> tuple[subprocess.Popen[bytes], ProcessRecord]:
        log_dir.mkdir(parents=True, exist_ok=True)
        return start(name, argv, log_dir, env=env, exe=exe,
                     preexec_fn=die_with_parent if die_with_parent_process else None)
    return spawn


def is_running(record: ProcessRecord) -> bool:
    """True while the recorded process exists and still runs the recorded executable."""
    try:
        exe = os.readlink(f"/proc/{record.pid}/exe")
    except OSError:
        return False
    try:
        with open(f"/proc/{record.pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    if state == "Z":  # exited, not yet reaped by its parent
        return False
    return os.path.realpath(record.exe) == exe.removesuffix(" (deleted)")


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of process group ``pgid``. Zombies are skipped: once their
    parent is gone they wait for init to reap them, and they hold nothing (no port, no file)."""
    members = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # fields after the command name: state, ppid, pgrp, ...
        if fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


def group_alive(pgid: int) -> bool:
    return bool(group_members(pgid))


def stop(record: ProcessRecord, proc: subprocess.Popen[bytes] | None = None,
         grace: float = 10.0) -> None:
    """SIGTERM the process group, SIGKILL it after ``grace`` seconds, reap what we can."""
    if proc is None and not is_running(record) and not group_alive(record.pgid):
        return
    if proc is None and not is_running(record):
        # The leader is gone but its group lives on: its children. Kill them outright.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(record.pgid, signal.SIGKILL)
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(record.pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=0.1)
        else:
            time.sleep(0.1)
        if not group_alive(record.pgid):
            break
    with contextlib.suppress(ProcessLookupError):
        os.killpg(record.pgid, signal.SIGKILL)
    if proc is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)
    # SIGKILL is delivered asynchronously: return only once the group is really gone.
    deadline = time.monotonic() + 5
    while group_alive(record.pgid) and time.monotonic() < deadline:
        time.sleep(0.05)


def https_context(ca: Path | None = None, cert: Path | None = None,
                  key: Path | None = None) -> ssl.SSLContext:
    """TLS context for health probes: verified against ``ca`` if given, else unverified
    (controller-manager and scheduler serve self-signed certificates on 127.0.0.1)."""
    if ca is None:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    else:
        ctx = ssl.create_default_context(cafile=str(ca))
    if cert is not None and key is not None:
        ctx.load_cert_chain(str(cert), str(key))
    return ctx


def http_ok(url: str, ctx: ssl.SSLContext | None = None, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=ctx) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError, ssl.SSLError):
        return False


def wait_until(
    name: str,
    check: Callable[[], bool],
    *,
    timeout: float,
    proc: subprocess.Popen[bytes] | None = None,
    record: ProcessRecord | None = None,
    interval: float = 0.25,
) -> None:
    """Poll ``check`` until true; fail early, with the log tail, if the process exits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        if proc is not None and proc.poll() is not None:
            tail = log_tail(record.log) if record else ""
            raise StartupError(f"{name} exited with status {proc.returncode}:\n{tail}")
        time.sleep(interval)
    tail = log_tail(record.log) if record else ""
    raise StartupError(f"{name} not ready after {timeout:.0f}s:\n{tail}")
