"""Generated, malformed and hostile input for every ``berth`` command that reads a file or a
number: the real entry point (:func:`admission.cli.main`) runs in-process on each example and
must end within seconds with exit status 0 or 2, never a traceback; a 2 comes with lines that
each name the file (or the flag) at fault.

Files: random bytes, the worked example snapshot and a small CSV trace truncated and mutated,
documents nested far too deep, YAML alias chains, huge, negative and non-finite numbers, keys
written twice. Flags: every number ``berth simulate``, ``berth solve`` and ``berth certs``
take, from NaN to 10^30, and certificate host names from any text.
"""

from __future__ import annotations

import io
import ipaddress
import re
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from admission.cli import main

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = (REPO / "config" / "examples" / "snapshot.yaml").read_bytes()
NODES = b"sn,cpu_milli,memory_mib,gpu,model\nn0,32000,131072,2,T4\nn1,32000,131072,1,T4\n"
PODS = (
    b"name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
    b"deletion_time,scheduled_time\n"
    b"p0,1000,1024,2,1000,,LS,Running,0,100,0\n"
    b"p1,1000,1024,1,500,,LS,Running,10,300,10\n"
    b"p2,1000,1024,1,1000,,BE,Running,12,60,12\n"
)
#: Generous on a busy two-core machine; the bounded work takes well under a second.
PER_CASE_S = 10.0
HOSTILE = settings(max_examples=100, deadline=None, derandomize=True,
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

NUMBERS = ["1e400", "1.0e+400", "-1.0e+400", ".inf", "-.inf", ".nan", "nan", "inf", "-1",
           "-0", "0", "1e9", "1000000000", "1000000001", str(10**30), str(-(10**30)),
           str(2**63), "99999999999999999999", "0x10", "1_000", "4.5", "1e-300", "65", "64"]


@contextmanager
def _scratch() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="berth-hostile-") as d:
        yield Path(d)


def _run(argv: Sequence[str], *, names: Sequence[str]) -> tuple[int, str]:
    """``berth ARGV`` in-process: it must end in time with 0 or 2 and no traceback, and when
    it fails every line it prints must name one of ``names`` (argparse's own errors: the
    option)."""
    out, err = io.StringIO(), io.StringIO()
    started = time.perf_counter()
    argparse_error = False
    with redirect_stdout(out), redirect_stderr(err):
        try:
            rc = main(list(argv))
        except SystemExit as exc:  # argparse refused a flag's value
            rc, argparse_error = int(exc.code or 0), True
    elapsed = time.perf_counter() - started
    text = err.getvalue()
    assert elapsed < PER_CASE_S, f"{argv} took {elapsed:.1f} s"
    assert rc in (0, 2), (argv, rc, text)
    assert "Traceback" not in text and "Error:" not in text.replace("error:", ""), text
    if rc == 2:
        lines = [line for line in text.splitlines() if line.strip()]
        assert lines, f"{argv}: exit 2 without a message"
        if argparse_error:
            assert "error: argument" in lines[-1], text
        else:
            for line in lines:
                assert any(n in line for n in names), (line, names)
    return rc, text


# --------------------------------------------------------------------------------------------
# Generated files
# --------------------------------------------------------------------------------------------


@st.composite
def mutated(draw: st.DrawFn, base: bytes) -> bytes:
    """``base`` truncated, cut, spliced with random bytes, a number swapped for a hostile one,
    or a line repeated (in YAML: a key written twice)."""
    data = bytearray(base)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["truncate", "delete", "insert", "number", "number",
                                     "repeat"]))
        at = draw(st.integers(0, len(data)))
        if kind == "truncate":
            del data[at:]
        elif kind == "delete":
            del data[at:at + draw(st.integers(1, 40))]
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "number":
            spots = [m.span() for m in re.finditer(rb"\b\d+\b", bytes(data))]
            if spots:
                lo, hi = draw(st.sampled_from(spots))
                data[lo:hi] = draw(st.sampled_from(NUMBERS)).encode()
        else:
            lines = bytes(data).split(b"\n")
            k = draw(st.integers(0, len(lines) - 1))
            lines.insert(k, lines[k])
            data = bytearray(b"\n".join(lines))
    return bytes(data)


@st.composite
def deep(draw: st.DrawFn) -> bytes:
    n = draw(st.sampled_from([65, 100, 1_000, 10_000, 100_000]))
    style = draw(st.sampled_from(["flow-list", "flow-map", "json", "block"]))
    if style == "flow-list":
        return b"nodes: " + b"[" * n + b"]" * n
    if style == "flow-map":
        return b"{a: " * n + b"1" + b"}" * n
    if style == "json":
        return b'{"nodes": ' + b'[{"a": ' * n + b"1" + b"}]" * n + b"}"
    return b"".join(b"  " * i + b"- \n" for i in range(min(n, 2_000)))


@st.composite
def alias_chain(draw: st.DrawFn) -> bytes:
    """``a0: &a0 [x, ...]``, each next level a list of ``width`` aliases of the one before."""
    width, levels = draw(st.integers(2, 12)), draw(st.integers(1, 12))
    out = [b"x0: &x0 [" + b", ".join([b"lol"] * width) + b"]"]
    for i in range(1, levels):
        out.append(f"x{i}: &x{i} [".encode() + b", ".join(
            [f"*x{i - 1}".encode()] * width) + b"]")
    out.append(draw(st.sampled_from([b"nodes: *x", b"gangs: *x", b"running: *x"]))
               + str(levels - 1).encode())
    return b"\n".join(out) + b"\n"


def _dup_key(doc: bytes, k: int) -> bytes:
    lines = doc.split(b"\n")
    keyed = [i for i, line in enumerate(lines) if re.match(rb"^\s*\w+: \S", line)]
    i = keyed[k % len(keyed)]
    return b"\n".join([*lines[: i + 1], lines[i], *lines[i + 1:]])


snapshots = st.one_of(
    st.binary(max_size=2_000),
    mutated(EXAMPLE),
    deep(),
    alias_chain(),
    st.integers(0, 10_000).map(lambda k: _dup_key(EXAMPLE, k)),
    st.sampled_from(NUMBERS).map(
        lambda n: EXAMPLE.replace(b"cpu_milli: 96000", b"cpu_milli: " + n.encode())),
    st.sampled_from(NUMBERS).map(
        lambda n: EXAMPLE.replace(b"weight: 2", b"weight: " + n.encode())),
    st.sampled_from(NUMBERS).map(
        lambda n: EXAMPLE.replace(b"wait_seconds: 600", b"wait_seconds: " + n.encode())),
    st.sampled_from(NUMBERS).map(
        lambda n: EXAMPLE.replace(b"count: 8", b"count: " + n.encode())),
)


@HOSTILE
@given(doc=snapshots, suffix=st.sampled_from([".yaml", ".json"]))
def test_solve_on_hostile_snapshots(doc: bytes, suffix: str) -> None:
    with _scratch() as d:
        path = d / f"snap{suffix}"
        path.write_bytes(doc)
        _run(["solve", str(path), "--solver", "bestfit", "--json"], names=[str(path)])


traces = st.one_of(st.binary(max_size=1_000), st.just(b""))


@HOSTILE
@given(nodes=st.one_of(mutated(NODES), traces), pods=st.one_of(mutated(PODS), traces),
       mode=st.sampled_from(["fgd", "timed"]))
def test_simulate_on_hostile_traces(nodes: bytes, pods: bytes, mode: str) -> None:
    with _scratch() as d:
        n, p = d / "nodes.csv", d / "pods.csv"
        n.write_bytes(nodes)
        p.write_bytes(pods)
        policy = ["--policy", "bestfit"] if mode == "fgd" else ["--compare", "bestfit"]
        _run(["simulate", "--mode", mode, "--nodes", str(n), "--pods", str(p), "--seeds", "1",
              "--arrival", "0.2", *policy], names=[str(n), str(p), "--"])


# --------------------------------------------------------------------------------------------
# Generated numbers
# --------------------------------------------------------------------------------------------

numbers = st.one_of(
    st.sampled_from(NUMBERS),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(-(10**30), 10**30).map(str),
    st.text(max_size=6),
)
TIMED_FLAGS = ["--window-s", "--time-limit", "--until", "--speedup", "--time-scale",
               "--tenants", "--max-pending", "--seeds"]
FGD_FLAGS = ["--window", "--arrival", "--orders", "--time-limit", "--seeds"]


@HOSTILE
@given(flag=st.sampled_from(TIMED_FLAGS + FGD_FLAGS), value=numbers,
       mode=st.sampled_from(["fgd", "timed"]))
def test_simulate_numbers(flag: str, value: str, mode: str) -> None:
    if mode == "fgd" and flag not in FGD_FLAGS:
        mode = "timed"
    with _scratch() as d:
        n, p = d / "nodes.csv", d / "pods.csv"
        n.write_bytes(NODES)
        p.write_bytes(PODS)
        policy = ["--policy", "bestfit"] if mode == "fgd" else ["--compare", "bestfit"]
        _run(["simulate", "--mode", mode, "--nodes", str(n), "--pods", str(p), *policy,
              f"{flag}={value}"], names=[flag])


@HOSTILE
@given(value=numbers)
def test_simulate_default_mode_refuses_bad_seeds_at_once(value: str) -> None:
    from admission.simulate import SimulateError, parse_seeds

    try:
        parse_seeds(value)
    except SimulateError:
        _run(["simulate", f"--seeds={value}"], names=["--seeds"])  # refused before the run


@HOSTILE
@given(flag=st.sampled_from(["--time-limit", "--seed", "--workers"]), value=numbers)
def test_solve_numbers(flag: str, value: str) -> None:
    _run(["solve", str(REPO / "config" / "examples" / "snapshot.yaml"), "--solver", "bestfit",
          "--json", f"{flag}={value}"], names=[flag])


# --------------------------------------------------------------------------------------------
# Certificate host names
# --------------------------------------------------------------------------------------------

hosts = st.one_of(
    st.text(max_size=80),
    st.from_regex(r"[a-z0-9.\-*:\[\]/%_ ]{0,70}", fullmatch=True),
    st.ip_addresses().map(str),
    st.sampled_from(["", " ", "a..b", "-x", "a" * 300, ("a" * 64) + ".com",
                     "https://berth.example.com", "127.0.0.1:8443", "[::1]", "[::1]:8443",
                     "berth-webhook.berth-system.svc", "localhost", "::1", "10.0.0.1"]),
)


@HOSTILE
@given(host=hosts, dns=st.lists(hosts, max_size=2))
def test_certs_on_any_host_name(host: str, dns: list[str]) -> None:
    with _scratch() as d:
        argv = ["certs", "--out", str(d / "certs"), f"--host={host}",
                *(f"--dns={n}" for n in dns)]
        rc, _ = _run(argv, names=["--host", "--dns"])
        if rc == 0:
            from cryptography import x509

            cert = x509.load_pem_x509_certificate((d / "certs" / "tls.crt").read_bytes())
            san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
            try:
                assert ipaddress.ip_address(host) in san.get_values_for_type(x509.IPAddress)
            except ValueError:
                assert host in san.get_values_for_type(x509.DNSName)


@pytest.mark.parametrize("host", ["berth-webhook.berth-system.svc", "localhost", "127.0.0.1",
                                  "::1", "2001:db8::1", "a-b.c0.example", "x" * 63 + ".io"])
def test_valid_hosts_still_make_a_certificate(host: str, tmp_path: Path) -> None:
    rc, _ = _run(["certs", "--out", str(tmp_path), f"--host={host}", "--dns=*.example.com"],
                 names=["--host"])
    assert rc == 0
