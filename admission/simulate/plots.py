"""Figures of timed replays: GPU allocation over time, queueing delay, fairness and SLOs.

Built from :class:`solver.simulate.timed.TimedResult` objects alone, on matplotlib's Agg
backend so they render on machines without a display; the caller saves them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from solver.simulate.timed import TimedResult


def _pyplot():  # type: ignore[no-untyped-def]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def timed_figure(results: Sequence[TimedResult], *, title: str = "") -> Figure:
    """Four panels: allocated GPU share over time, queueing delay CDF, each tenant's GPU time
    against its fair share, and utilisation beside SLO attainment for each policy."""
    plt = _pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(13, 9))
    _utilisation(axes[0][0], results)
    _waits(axes[0][1], results)
    _fairness(axes[1][0], results)
    _slo(axes[1][1], results)
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
