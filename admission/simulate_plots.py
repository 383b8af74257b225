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
    against its fair share, and SLO attainment against utilisation."""
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


def _utilisation(ax, results: Sequence[TimedResult]) -> None:  # type: ignore[no-untyped-def]
    for r in results:
        ts = [t / 60 for t, _ in r.utilisation] + [r.end_s / 60]
        vs = [v * 100 for _, v in r.utilisation] + [r.utilisation[-1][1] * 100]
        ax.step(ts, vs, where="post", label=r.name, linewidth=1.2)
    ax.set_xlabel("simulated time (min)")
    ax.set_ylabel("GPU allocated (% of capacity)")
    ax.set_title("GPU allocation over time")
    ax.set_ylim(0, 105)
    ax.legend(fontsize=8)


def _waits(ax, results: Sequence[TimedResult]) -> None:  # type: ignore[no-untyped-def]
    for r in results:
        waits = sorted(r.waits_s)
        if not waits:
            continue
        n = len(r.outcomes)  # gangs never placed keep the curve below 100 %
        ys = [100 * (i + 1) / n for i in range(len(waits))]
        ax.step([max(w, 0.1) for w in waits], ys, where="post", label=r.name, linewidth=1.2)
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
    ax.set_title("Fairness across tenants (1.0 = fair share)")
    ax.legend(fontsize=7)


def _slo(ax, results: Sequence[TimedResult]) -> None:  # type: ignore[no-untyped-def]
    for r in results:
        ax.scatter(r.mean_utilisation * 100, r.slo.attainment * 100, s=50)
        ax.annotate(r.name, (r.mean_utilisation * 100, r.slo.attainment * 100),
                    textcoords="offset points", xytext=(5, 4), fontsize=8)
    ax.set_xlabel("mean GPU allocated while gangs arrive (%)")
    ax.set_ylabel("latency-sensitive pod-time within SLO (%)")
    ax.set_title("SLO attainment against utilisation")
    ax.grid(alpha=0.3)
