"""Figures of timed replays: GPU allocation over time, queueing delay, fairness and SLOs, and
what each window planned over time (reservations, backfill, reclaims).

Built from :class:`solver.simulate.timed.TimedResult` objects alone, on matplotlib's Agg
backend so they render on machines without a display; the caller saves them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from solver.simulate.timed import TimedResult


def _pyplot() -> Any:  # matplotlib.pyplot: typed loosely, imported on first use
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def timed_figure(results: Sequence[TimedResult], *, title: str = "") -> Figure:
    """Five panels: allocated GPU share over time, queueing delay CDF, each tenant's GPU time
    against its fair share, utilisation beside SLO attainment for each policy, and across the
    bottom what each window planned over time: gangs holding a reservation, gangs backfilled
    and gangs reclaimed."""
    plt = _pyplot()
    fig: Figure = plt.figure(figsize=(13, 12.5))
    grid = fig.add_gridspec(3, 2, height_ratios=(1, 1, 0.7))
    _utilisation(fig.add_subplot(grid[0, 0]), results)
    _waits(fig.add_subplot(grid[0, 1]), results)
    _fairness(fig.add_subplot(grid[1, 0]), results)
    _slo(fig.add_subplot(grid[1, 1]), results)
    _planning(fig.add_subplot(grid[2, :]), results)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


#: Line styles cycle with the colours so that policies whose curves coincide stay visible.
_STYLES = ("-", "--", ":", "-.")


def binned(series: Sequence[tuple[float, float]], end: float, step: float) -> list[float]:
    """Time-weighted mean of a step series over consecutive bins of ``step`` seconds."""
    out: list[float] = []
    i = 0
    value = series[0][1] if series else 0.0
    t = 0.0
    while t < end:
        stop = min(t + step, end)
        area, cur = 0.0, t
        while i < len(series) and series[i][0] <= stop:
            area += value * (max(series[i][0], cur) - cur)
            cur = max(series[i][0], cur)
            value = series[i][1]
            i += 1
        area += value * (stop - cur)
        out.append(area / (stop - t))
        t = stop
    return out


def _utilisation(ax, results: Sequence[TimedResult]) -> None:  # type: ignore[no-untyped-def]
    step = 60.0
    for k, r in enumerate(results):
        ys = [v * 100 for v in binned(r.utilisation, r.end_s, step)]
        xs = [i * step / 60 for i in range(len(ys))]
        ax.plot(xs, ys, label=r.name, linewidth=1.3, linestyle=_STYLES[k % len(_STYLES)])
    ax.set_xlabel("simulated time (min)")
    ax.set_ylabel("GPU allocated (% of capacity, 1-min mean)")
    ax.set_title("GPU allocation over time")
    ax.set_ylim(0, 105)
    ax.legend(fontsize=8)


def _waits(ax, results: Sequence[TimedResult]) -> None:  # type: ignore[no-untyped-def]
    for k, r in enumerate(results):
        waits = sorted(r.waits_s)
        if not waits:
            continue
        n = len(r.outcomes)  # gangs never placed keep the curve below 100 %
        ys = [100 * (i + 1) / n for i in range(len(waits))]
        ax.step([max(w, 0.1) for w in waits], ys, where="post", label=r.name, linewidth=1.3,
                linestyle=_STYLES[k % len(_STYLES)])
    ax.set_xscale("log")
    ax.set_xlabel("queueing delay (s, log)")
    ax.set_ylabel("gangs started within (%)")
    ax.set_title("Queueing delay (CDF over all arrived gangs)")
    ax.set_ylim(0, 101)
    ax.legend(fontsize=8)


def _fairness(ax, results: Sequence[TimedResult]) -> None:  # type: ignore[no-untyped-def]
    tenants = [t.tenant for t in results[0].tenants] if results else []
    width = 0.8 / max(1, len(results))
    for i, r in enumerate(results):
        ratios = {t.tenant: t.fair_ratio for t in r.tenants}
        xs = [j + i * width for j in range(len(tenants))]
        ax.bar(xs, [ratios.get(t, 0.0) for t in tenants], width=width,
               label=f"{r.name} (Jain {r.jain:.3f})")
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(tenants))])
    if results:
        labels = [f"{t.tenant}\nweight {t.weight:g}" for t in results[0].tenants]
        ax.set_xticklabels(labels)
    ax.set_ylabel("GPU time / weighted fair share")
    ax.set_title("Fairness across tenants while gangs arrive (1.0 = fair share)")
    ax.set_ylim(0, 1.45)  # room above the bars for the legend
    ax.legend(fontsize=7, loc="upper center", ncol=3)


def _slo(ax, results: Sequence[TimedResult]) -> None:  # type: ignore[no-untyped-def]
    xs = list(range(len(results)))
    alloc = [r.mean_utilisation * 100 for r in results]
    slo = [r.slo.attainment * 100 for r in results]
    ax.bar([x - 0.2 for x in xs], alloc, width=0.4, label="mean GPU allocated while gangs arrive")
    ax.bar([x + 0.2 for x in xs], slo, width=0.4, label="latency-sensitive pod-time within SLO")
    for x, a, v in zip(xs, alloc, slo, strict=True):
        ax.text(x - 0.2, a + 1, f"{a:.0f}", ha="center", fontsize=7)
        ax.text(x + 0.2, v + 1, f"{v:.0f}", ha="center", fontsize=7)
    ax.set_xticks(xs)
    ax.set_xticklabels([r.name for r in results], rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("%")
    ax.set_ylim(0, 115)
    ax.set_title("Utilisation and SLO attainment (interference-aware vs oblivious)")
    ax.legend(fontsize=8, loc="lower left")


def _planning(ax, results: Sequence[TimedResult]) -> None:  # type: ignore[no-untyped-def]
    """Reservations held as a step line per policy that made any; backfilled gangs (dots)
    and reclaimed gangs (crosses) at the windows that had them. Policies that plan none of
    the three (the greedy baselines, or CP-SAT told no deadlines) are named in the title."""
    planners = [r for r in results if any(p[1] or p[2] or p[3] for p in r.planning)]
    end = max((r.end_s for r in results), default=0.0) / 60
    for k, r in enumerate(planners):
        xs = [0.0] + [t / 60 for t, *_ in r.planning] + [r.end_s / 60]
        ys = [0] + [p[1] for p in r.planning]
        ys.append(ys[-1])
        line = ax.step(xs, ys, where="post", linewidth=1.3, linestyle=_STYLES[k % len(_STYLES)],
                       label=f"{r.name}: gangs holding a reservation")[0]
        colour = line.get_color()
        bf = [(t / 60, n) for t, _, n, _ in r.planning if n]
        if bf:
            ax.scatter(*zip(*bf, strict=True), marker="o", s=14, color=colour,
                       label=f"{r.name}: gangs backfilled ({r.backfilled})")
        rc = [(t / 60, n) for t, _, _, n in r.planning if n]
        if rc:
            ax.scatter(*zip(*rc, strict=True), marker="x", s=40, color=colour,
                       label=f"{r.name}: gangs reclaimed ({r.reclaimed})")
        elif r.reclaimed == 0:
            line.set_label(f"{r.name}: gangs holding a reservation (no reclaim)")
    others = [r.name for r in results if r not in planners]
    title = "Planning over time: reservations, backfill, reclaims"
    if others:
        title += f"\n(none planned by {', '.join(others)})"
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("simulated time (min)")
    ax.set_ylabel("gangs (per window)")
    ax.set_xlim(0, max(end, 1e-3))
    ax.set_ylim(bottom=0)
    from matplotlib.ticker import MaxNLocator

    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    if planners:
        ax.legend(fontsize=8, loc="upper right")
