"""``-o table`` (rich, as ``berth solve`` prints) and ``-o json`` (for scripts) of a status
and an explanation. Text from the cluster is printed literally, never as rich markup."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import IO, Any

from admission.status.report import Status, WaitingGang, duration_words
from admission.status.why import Explanation

WAITING_PREFIX = "waiting: "


def to_json(obj: Status | Explanation) -> str:
    return json.dumps(asdict(obj), indent=2, sort_keys=False)


def _console(file: IO[str] | None = None) -> Any:
    from rich.console import Console

    console = Console(file=file, highlight=False)
    if not console.is_terminal:  # a pipe or a file: lines as long as they are, like kubectl
        console = Console(file=file, highlight=False, width=400)
    return console


def _text(value: object) -> Any:
    from rich.text import Text

    return Text("-" if value is None or value == "" else str(value))


def _num(x: float | None, none: str = "-") -> str:
    return none if x is None else f"{x:g}"


def _message(w: WaitingGang) -> str:
    msg = w.message or ("not told yet: the controller writes a reason at its next window"
                        if w.state == "queued" else
                        "its queue (Kueue) has not admitted it yet; Berth places it after"
                        if w.state == "at its queue" else "")
    return msg[len(WAITING_PREFIX):] if msg.startswith(WAITING_PREFIX) else msg


def print_status(st: Status, file: IO[str] | None = None) -> None:
    from rich.table import Table

    console = _console(file)
    head = (f"policy: {st.policy}" + (f" (generation {st.policy_generation})"
                                      if st.policy_generation else "")
            + f"\ncontroller: {st.controller}")
    cl = st.cluster
    if cl.gpus is not None:
        head += (f"\ncluster: {_num(cl.gpus)} GPUs on {cl.nodes} nodes"
                 + (f" (+{_num(cl.unusable_gpus)} on cordoned or NotReady nodes)"
                    if cl.unusable_gpus else "")
                 + f"; {_num(cl.held)} held ({_num(cl.held_outside_berth)} by pods Berth did "
                 f"not admit); {_num(cl.free)} free")
    else:
        head += f"\ncluster: {_num(cl.held)} GPUs held; nodes not read"
    if st.namespaces is not None:
        head += f"\nnamespaces read: {', '.join(st.namespaces)}"
    console.print(_text(head))

    tenants = Table(title="Tenants (GPUs)", title_justify="left")
    for col, just in (("tenant", "left"), ("quota", "right"), ("used", "right"),
                      ("borrowed", "right"), ("lent", "right"), ("borrowing", "left"),
                      ("weight", "right"), ("pods", "right"), ("waiting", "left")):
        tenants.add_column(col, justify=just)  # type: ignore[arg-type]
    for t in st.tenants:
        queued = (f"{t.waiting_gangs} gang{'s' if t.waiting_gangs != 1 else ''}, "
                   f"{_num(t.waiting_gpus)} GPUs" if t.waiting_gangs else "-")
        tenants.add_row(_text(t.tenant + ("" if t.in_policy else " (not in policy)")),
                        _num(t.quota, "unlimited"), _num(t.used), _num(t.borrowed),
                        _num(t.lent), _text(t.borrowing), _num(t.weight), str(t.pods),
                        _text(queued))
    console.print(tenants)

    waiting = Table(title=f"Waiting gangs ({len(st.waiting)})", title_justify="left")
    for col, just in (("#", "right"), ("gang", "left"), ("tenant", "left"), ("state", "left"),
                      ("pods", "right"), ("GPUs", "right"), ("waited", "right"),
                      ("reason", "left"), ("message", "left")):
        waiting.add_column(col, justify=just)  # type: ignore[arg-type]
    for w in st.waiting:
        waiting.add_row(_num(w.position), _text(w.gang), _text(w.tenant), _text(w.state),
                        f"{w.pods}/{w.size}", _num(w.gpus),
                        "-" if w.waited_seconds is None else duration_words(w.waited_seconds),
                        _text(w.reason), _text(_message(w)))
    console.print(waiting)

    if st.reservations:
        res = Table(title=f"Reservations ({len(st.reservations)})", title_justify="left")
        for col in ("gang", "tenant", "reservation"):
            res.add_column(col)
        for r in st.reservations:
            res.add_row(_text(r.gang), _text(r.tenant), _text(r.detail))
        console.print(res)
    if st.reclaims:
        rec = Table(title=f"Recent reclaims ({len(st.reclaims)})", title_justify="left")
        for col in ("time", "pod", "message"):
            rec.add_column(col)
        for rc in st.reclaims:
            rec.add_row(_text(rc.time), _text(rc.pod), _text(rc.message))
        console.print(rec)
    for ns, why in sorted(st.skipped.items()):
        console.print(_text(f"skipped namespace {ns}: {why}"), soft_wrap=True)
    for note in st.notes:
        console.print(_text(f"note: {note}"), soft_wrap=True)


def print_explanation(ex: Explanation, file: IO[str] | None = None) -> None:
    from rich.table import Table

    console = _console(file)
    console.print(_text(f"Pod {ex.pod}: {ex.state}"), style="bold")
    facts = Table(show_header=False, box=None, padding=(0, 2, 0, 2))
    facts.add_column("what", style="bold")
    facts.add_column("value")
    rows: list[tuple[str, object]] = [("phase", ex.phase), ("tenant", ex.tenant)]
    if ex.gang:
        rows.append(("gang", ex.gang + (f" ({ex.gang_pods})" if ex.gang_pods else "")))
    if ex.demand:
        rows.append(("asks for", ex.demand))
    if ex.waited:
        rows.append(("waited", ex.waited))
    if ex.position is not None:
        rows.append(("position", f"{ex.position} in {ex.tenant}'s queue, {ex.overall} of all "
                                 "waiting gangs (the solver's order)"))
    if ex.condition:
        cnd = ex.condition
        rows.append(("condition", f"berth.dev/Waiting={cnd['status']}, reason {cnd['reason']}, "
                                  f"since {cnd['since']}"))
    rows.append(("gates", ", ".join(ex.gates) or "none"))
    if ex.plan:
        rows.append(("plan", ", ".join(f"{k.split('/', 1)[-1]}={v}"
                                       for k, v in ex.plan.items())))
    if ex.scheduler:
        rows.append(("scheduler", ex.scheduler))
    for what, value in rows:
        facts.add_row(what, _text(value))
    console.print(facts)
    for title, lines in (("Why", ex.why), ("What would let it start", ex.needs),
                         ("Not known", ex.unknown)):
        if not lines:
            continue
        console.print(_text(title), style="bold")
        for line in lines:
            console.print(_text(f"  - {line}"), soft_wrap=True)
    if ex.events:
        events = Table(title="Recent events", title_justify="left")
        for col in ("time", "type", "reason", "from", "message"):
            events.add_column(col)
        for ev in ex.events:
            events.add_row(*(_text(ev[k]) for k in ("time", "type", "reason", "from",
                                                    "message")))
        console.print(events)
