"""Instructions per review of each webhook server, counted by valgrind: a figure that other
work on a shared machine cannot move.

CPU time per review (bench/webhook_load.py) is the real cost, but on a busy machine it is
inflated by contended caches and cores, by different amounts from one run to the next. This
counts the user-space instructions a server executes per review instead: each server runs
under valgrind's callgrind, pinned to one core; wrk warms it up over TLS with keep-alive,
the counters are zeroed, wrk drives it flat out for ``--seconds``, and the counters are
dumped. Kernel work (system calls, the TCP stack) is not counted and instructions are not all
equally fast, so read it beside the load benchmark's CPU times, not instead of them.

The servers are those of bench/webhook_load.py (the bare aiohttp TLS handler on asyncio's loop
and on uvloop, ``berth webhook`` on uvloop and on asyncio's loop), plus, with ``--before
COMMIT``, ``berth webhook`` as it was at that commit (its ``admission/`` taken with ``git
archive``), on asyncio's loop. ``--write`` puts the table into bench/webhook_load.md under
"## Instructions per review" (webhook_load.py --write keeps that section).

    python3 bench/webhook_instructions.py [--before COMMIT] [--seconds 15] [--write]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.webhook_load import (  # noqa: E402
    LUA,
    conditions,
    free_port,
    server_command,
    training_pod_review,
    wait_ready,
    wrk,
)

SECTION = "## Instructions per review"
NAMES = {
    "bare": "bare aiohttp TLS handler, asyncio loop",
    "bare-uvloop": "bare aiohttp TLS handler, uvloop",
    "berth": "`berth webhook` (uvloop)",
    "berth-asyncio": "`berth webhook --event-loop asyncio`",
    "berth-before": "`berth webhook` at --before, asyncio loop (its only one)",
}


def command(kind: str, port: int, certs: Path) -> list[str]:
    cmd = server_command("berth" if kind == "berth-before" else kind, port, certs)
    if kind == "berth-before":  # the code at --before has no --event-loop option
        i = cmd.index("--event-loop")
        del cmd[i:i + 2]
    return cmd


def checkout(commit: str, into: Path) -> Path:
    """``admission/`` as it was at ``commit``, extracted into ``into``."""
    into.mkdir()
    archive = subprocess.run(["git", "-C", str(REPO), "archive", commit, "admission"],
                             capture_output=True, check=False)
    if archive.returncode != 0:
        raise SystemExit(f"--before {commit}: git archive failed: "
                         f"{archive.stderr.decode().strip()}")
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into


def total_instructions(dump: Path) -> int:
    m = re.search(r"^(?:totals|summary): (\d+)", dump.read_text(), re.M)
    if not m:
        raise SystemExit(f"{dump}: no instruction total in callgrind's output")
    return int(m.group(1))


def measure(kind: str, code: Path, tmp: Path, seconds: int, args: argparse.Namespace
            ) -> tuple[float, int]:
    """(instructions per review, reviews counted) of one server."""
    port, certs = free_port(), tmp / "certs"
    out = tmp / f"callgrind.{kind}"
    env = dict(os.environ, PYTHONPATH=str(code))
    proc = subprocess.Popen(
        ["taskset", "-c", args.server_core, "valgrind", "--tool=callgrind",
         f"--callgrind-out-file={out}", *command(kind, port, certs)],
        cwd=code, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_ready(port, certs / "ca.crt", proc, timeout=300)  # valgrind starts slowly
        wrk(port, tmp / "flat.lua", 5, args.connections, args.wrk_core)  # warm-up
        subprocess.run(["callgrind_control", "--zero", str(proc.pid)], check=True,
                       capture_output=True)
        result = wrk(port, tmp / "flat.lua", seconds, args.connections, args.wrk_core)
        subprocess.run(["callgrind_control", "--dump", str(proc.pid)], check=True,
                       capture_output=True)
        if result["non2xx"] or result["socket_errors"]:
            raise SystemExit(f"{kind}: {result['non2xx']} non-2xx answers, "
                             f"{result['socket_errors']} socket errors")
        deadline = time.monotonic() + 30
        while not (dumps := sorted(tmp.glob(f"callgrind.{kind}.*"))):
            if time.monotonic() > deadline:
                raise SystemExit(f"{kind}: callgrind wrote no dump")
            time.sleep(0.2)
        time.sleep(1)  # let the dump finish writing
        requests = int(result["requests"])
        return total_instructions(dumps[-1]) / max(requests, 1), requests
    finally:
        proc.kill()
        proc.wait()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", metavar="COMMIT",
                    help="also measure `berth webhook` as it was at this git commit")
    ap.add_argument("--servers", default="bare,bare-uvloop,berth,berth-asyncio",
                    help="comma-separated (default: %(default)s)")
    ap.add_argument("--seconds", type=int, default=15, help="length of the counted wrk run")
    # One connection: each review is then one trip round the event loop. With several, how
    # many requests pile up between two polls (fewer trips per review) depends on how much
    # of the machine wrk gets, which is what this count is meant to be free of.
    ap.add_argument("--connections", type=int, default=1)
    ap.add_argument("--server-core", default="0")
    ap.add_argument("--wrk-core", default="1")
    ap.add_argument("--write", action="store_true", help="update bench/webhook_load.md")
    args = ap.parse_args()
    for tool, package in (("valgrind", "valgrind"), ("callgrind_control", "valgrind"),
                          ("wrk", "wrk"), ("taskset", "util-linux")):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is missing: install it with `apt-get install -y {package}`")
    kinds = args.servers.split(",")
    unknown = [k for k in kinds if k not in NAMES or k == "berth-before"]
    if unknown:
        raise SystemExit(f"--servers: unknown {unknown}; choose from bare, bare-uvloop, "
                         "berth, berth-asyncio")
    codes = dict.fromkeys(kinds, REPO)
    started = conditions()
    rows = []
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        if args.before is not None:
            codes["berth-before"] = checkout(args.before, tmp / "before")
        from admission.certs import write_bundle

        write_bundle(tmp / "certs", "127.0.0.1")
        body = tmp / "review.json"
        body.write_text(json.dumps(training_pod_review(kueue=True), separators=(",", ":")))
        (tmp / "flat.lua").write_text(LUA.replace("__BODY__", str(body))
                                      .replace("__INTERVAL__", "0"))
        for kind, code in codes.items():
            per_review, requests = measure(kind, code, tmp, args.seconds, args)
            rows.append((kind, per_review, requests))
            print(f"{kind:14s} {per_review / 1e3:7.0f} k instructions/review ({requests} "
                  "reviews)", flush=True)
    report = render(rows, args, started)
    print(report)
    if args.write:
        write_section(REPO / "bench" / "webhook_load.md", report)
    return 0


def render(rows: list[tuple[str, float, int]], args: argparse.Namespace, started: str) -> str:
    flags = f" --before {args.before}" if args.before else ""
    base = {kind: value for kind, value, _ in rows}
    lines = [
        SECTION,
        "",
        "User-space instructions per review counted by valgrind's callgrind (see the script's "
        "docstring): other work on the machine does not change them, so they compare code "
        "versions and event loops on a busy machine. The kernel's share of each review (system "
        "calls, the TCP stack) is not counted. Regenerate (updates this section):",
        "",
        "```",
        f"python3 bench/webhook_instructions.py{flags} --seconds {args.seconds} "
        f"--connections {args.connections} --write",
        "```",
        "",
        f"Conditions: {started}. Same payload as the load benchmark (Kueue-vocabulary pod); "
        f"wrk with {args.connections} keep-alive TLS connection(s), flat out for "
        f"{args.seconds} s under valgrind after a 5 s warm-up. With one connection each "
        "review is one trip round the event loop; with several, the count would depend on "
        "how many requests pile up between two polls, which a busy machine changes.",
        "",
        "| server | k instructions / review | vs bare, asyncio loop | reviews counted |",
        "|---|---:|---:|---:|",
    ]
    for kind, value, requests in rows:
        ratio = f"{value / base['bare']:.2f}" if "bare" in base else ""
        name = NAMES[kind].replace("--before", str(args.before))
        lines.append(f"| {name} | {value / 1e3:.0f} | {ratio} | {requests} |")
    lines.append("")
    return "\n".join(lines)


def write_section(path: Path, section: str) -> None:
    text = path.read_text() if path.exists() else ""
    if SECTION in text:
        head, _, rest = text.partition(SECTION)
        following = rest.find("\n## ")
        tail = rest[following + 1:] if following >= 0 else ""
        text = head + section + ("\n" + tail if tail else "")
    else:
        text = text.rstrip("\n") + "\n\n" + section
    path.write_text(text)


if __name__ == "__main__":
    raise SystemExit(main())
