"""The soak's picture: calls per second and p99 latency per route over time, faults shaded.

What an operator looks at first: did throughput hold, which route's tail grew, and did
either come back after each fault. matplotlib is a development dependency (the dev extra),
imported only here.
"""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Any

# Heartbeats outnumber the rest; they get the strongest line, the others a shared palette.
HEARTBEAT_COLOUR = "black"


def draw(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    timeline = report["timeline"]
    step = timeline["stepSeconds"]
    routes = timeline["routes"]
    figure, (rates, tails) = plt.subplots(2, 1, figsize=(15, 8), sharex=True)
    palette = plt.get_cmap("tab20")
    for index, (route, series) in enumerate(sorted(routes.items())):
        times = [step * (i + 0.5) for i in range(len(series["perSecond"]))]
        style: dict[str, Any] = (
            {"color": HEARTBEAT_COLOUR, "linewidth": 2.0}
            if route == "heartbeat"
            else {"color": palette(index % 20), "linewidth": 1.0}
        )
        rates.plot(times, series["perSecond"], label=route, **style)
        # An empty bin is a gap in the line, not a slope to the next call.
        tail = [math.nan if p is None else p for p in series["p99Ms"]]
        tails.plot(times, tail, marker=".", markersize=3, **style)
    for budget, label in ((50, "heartbeat budget"), (100, "write budget"), (200, "read budget")):
        scaled = budget * report["slo"]["p99WithinBudget"]["budgetScale"]
        tails.axhline(scaled, linestyle=":", linewidth=0.8, color="grey")
        tails.annotate(label, (0, scaled), fontsize=7, color="grey", va="bottom")
    warmup = report["run"].get("warmUpSeconds") or 0.0
    for axis in (rates, tails):
        axis.axvspan(0, warmup, color="grey", alpha=0.12)
    if warmup:
        rates.annotate("warm-up", (0, 1), xycoords=("data", "axes fraction"), va="top",
                       fontsize=7, color="grey")  # fmt: skip
    for window in report["windows"]:
        if window.get("skipped"):
            continue
        for axis in (rates, tails):
            axis.axvspan(window["start"], max(window["end"], window["start"] + 0.3),
                         color="tab:red", alpha=0.15)  # fmt: skip
        rates.annotate(window["fault"], (window["start"], 1), xycoords=("data", "axes fraction"),
                       rotation=90, va="top", fontsize=7, color="tab:red")  # fmt: skip
    rates.set_yscale("symlog", linthresh=1)
    rates.set_ylim(bottom=0)
    rates.set_ylabel(f"calls per second ({step:g} s bins)")
    tails.set_yscale("log")
    tails.set_ylabel("p99 latency, ms")
    tails.set_xlabel("seconds since the traffic began")
    rates.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    run = report["run"]
    figure.suptitle(
        f"soak: {run['bus']} bus, {run['devices']} devices, {run['rate']:g} heartbeats/s, "
        f"{run['trafficSeconds']:.0f} s, faults {run['faults']}; ok={report['ok']}"
    )
    figure.tight_layout()
    drawn = io.BytesIO()
    figure.savefig(drawn, dpi=80)
    plt.close(figure)
    _save_small(drawn, path)


def _save_small(drawn: io.BytesIO, path: Path) -> None:
    """A 64-colour palette PNG: the lines need no more, and it is a quarter of the size
    (small enough to keep in docs/). Pillow comes with matplotlib."""
    from PIL import Image

    drawn.seek(0)
    with Image.open(drawn) as image:
        image.convert("P", palette=Image.Palette.ADAPTIVE, colors=64).save(path, optimize=True)
