"""The run report's PNG plots, drawn with matplotlib from reports/series.py's data.

Every time plot shares one look: seconds since the run started on x, and above the
plot a strip with one lane per fault package showing when it was active; the same
intervals shade the plot itself, so a reader sees what the nemesis did at each moment.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, never a window

import matplotlib.pyplot as plt  # noqa: E402  (after choosing the backend)
import numpy as np  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from reports.series import Completions, Highlight, Interval, Lag, PartitionTimeline, Throughput  # noqa: E402

WIDTH_IN = 11.0
PLOT_HEIGHT_IN = 3.6
STRIP_HEIGHT_IN = 0.22   # per fault lane
DPI = 110
POINTS_MAX = 60_000      # a scatter plot draws at most this many points (evenly thinned)
PACKAGE_COLOURS = {"partition": "#e6a23c", "kill": "#d9534f", "pause": "#5b8def", "link": "#9b59b6"}
OUTCOME_STYLE = {"ok": ("#2e8b57", "ok"), "info": ("#f0a020", "info (unknown)"), "fail": ("#c0392b", "fail")}
F_MARKERS = {"send": "^", "poll": "o", "txn": "s"}
EVIDENCE_COLOUR = "#c0392b"
LABELS_MAX = 12          # op labels on one offset timeline


def _figure(intervals: list[Interval], end_s: float, title: str):
    """A figure with a fault strip (when there were faults) over the main axes; returns (figure, axes)."""
    packages = sorted({i.package for i in intervals}, key=lambda p: list(PACKAGE_COLOURS).index(p)
                      if p in PACKAGE_COLOURS else len(PACKAGE_COLOURS))
    if not packages:
        figure, axes = plt.subplots(figsize=(WIDTH_IN, PLOT_HEIGHT_IN), dpi=DPI)
        axes.set_title(title, loc="left", fontsize=11)
        axes.set_xlim(0, max(end_s, 1e-3))
        return figure, axes
    strip_in = STRIP_HEIGHT_IN * len(packages) + 0.15
    figure, (strip, axes) = plt.subplots(
        2, 1, sharex=True, dpi=DPI, figsize=(WIDTH_IN, PLOT_HEIGHT_IN + strip_in),
        gridspec_kw={"height_ratios": [strip_in, PLOT_HEIGHT_IN], "hspace": 0.04})
    for lane, package in enumerate(packages):
        colour = PACKAGE_COLOURS.get(package, "#888888")
        spans = [(i.start_s, i.stop_s - i.start_s) for i in intervals if i.package == package]
        strip.broken_barh(spans, (lane + 0.15, 0.7), color=colour)
        for start_s, width_s in spans:
            axes.axvspan(start_s, start_s + width_s, color=colour, alpha=0.12, linewidth=0)
    strip.set_yticks([lane + 0.5 for lane in range(len(packages))], packages, fontsize=8)
    strip.set_ylim(0, len(packages))
    strip.invert_yaxis()
    strip.tick_params(axis="x", bottom=False)
    for side in ("top", "right", "bottom"):
        strip.spines[side].set_visible(False)
    strip.set_title(title, loc="left", fontsize=11)
    axes.set_xlim(0, max(end_s, 1e-3))
    return figure, axes


def _finish(figure, axes, path: Path, ylabel: str, legend_handles=None) -> Path:
    axes.set_xlabel("time since the run started (s)")
    axes.set_ylabel(ylabel)
    axes.grid(True, which="major", alpha=0.3)
    if legend_handles:
        axes.legend(handles=legend_handles, loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=8,
                    frameon=False)
    figure.savefig(path, bbox_inches="tight")
    plt.close(figure)
    return path


def _fault_handles(intervals: list[Interval]) -> list[Patch]:
    return [Patch(color=PACKAGE_COLOURS.get(p, "#888888"), alpha=0.35, label=f"{p} active")
            for p in PACKAGE_COLOURS if any(i.package == p for i in intervals)]


def _thin(mask: np.ndarray) -> np.ndarray:
    """mask with at most POINTS_MAX true entries, kept evenly across the run."""
    chosen = np.flatnonzero(mask)
    if len(chosen) > POINTS_MAX:
        chosen = chosen[np.linspace(0, len(chosen) - 1, POINTS_MAX).astype(int)]
    thinned = np.zeros_like(mask)
    thinned[chosen] = True
    return thinned


def _marker_size(points: int) -> float:
    """Bigger markers when there are few points, small ones when there are many."""
    return 24.0 if points < 1_000 else 10.0 if points < 10_000 else 5.0


def latency_plot(done: Completions, intervals: list[Interval], end_s: float, path: Path) -> Path:
    """Each op's latency at its invoke time, coloured by outcome, shaped by f; log scale."""
    figure, axes = _figure(intervals, end_s, "Latency of every client op")
    size = _marker_size(len(done.f))
    handles = []
    for outcome, (colour, label) in OUTCOME_STYLE.items():
        for f, marker in F_MARKERS.items():
            chosen = _thin((done.type == outcome) & (done.f == f))
            if chosen.any():
                axes.scatter(done.invoke_s[chosen], np.maximum(done.latency_ms[chosen], 0.01),
                             s=size if outcome == "ok" else 2 * size, marker=marker, color=colour,
                             alpha=0.55 if outcome == "ok" else 0.9, linewidths=0)
                handles.append(plt.Line2D([], [], linestyle="", marker=marker, color=colour,
                                          label=f"{f} {label} ({int(((done.type == outcome) & (done.f == f)).sum()):,})"))
    axes.set_yscale("log")
    return _finish(figure, axes, path, "latency (ms, log scale)", handles + _fault_handles(intervals))


def throughput_plot(rate: Throughput, intervals: list[Interval], end_s: float, path: Path) -> Path:
    """Completed ops per second, one line per f and outcome."""
    figure, axes = _figure(intervals, end_s, f"Throughput (completed ops per second, {rate.bin_s:g} s bins)")
    handles = []
    for (f, outcome), counts in sorted(rate.counts.items()):
        colour, label = OUTCOME_STYLE[outcome]
        style = {"send": "-", "poll": "--", "txn": ":"}.get(f, "-.")
        (line,) = axes.step(rate.bin_starts_s + rate.bin_s / 2, counts / rate.bin_s, where="mid", color=colour,
                            linestyle=style, linewidth=1.4, label=f"{f} {label}")
        handles.append(line)
    axes.set_ylim(bottom=0)
    return _finish(figure, axes, path, "ops / s", handles + _fault_handles(intervals))


def lag_plot(lag: Lag, intervals: list[Interval], end_s: float, path: Path) -> Path:
    """Realtime lag of consumers per partition: the worst lag of any poll, over time."""
    figure, axes = _figure(intervals, end_s, "Realtime lag: how far behind the log each poll started")
    keys = sorted(set(lag.key))
    colours = plt.get_cmap("tab10" if len(keys) <= 10 else "tab20")
    key_array = np.array(lag.key, dtype=object)
    handles = []
    for position, key in enumerate(keys):
        chosen = _thin(key_array == key)
        colour = colours(position % colours.N)
        axes.scatter(lag.time_s[chosen], lag.lag_s[chosen], s=_marker_size(len(lag.lag_s)), color=colour, alpha=0.6,
                     linewidths=0)
        handles.append(plt.Line2D([], [], linestyle="", marker="o", color=colour, label=key))
    if len(lag.lag_s):
        worst = int(np.argmax(lag.lag_s))
        on_right = lag.time_s[worst] > end_s / 2
        axes.annotate(f"worst {lag.lag_s[worst]:.2f} s\n{lag.key[worst]}, process {lag.process[worst]}",
                      (lag.time_s[worst], lag.lag_s[worst]), xytext=(-8 if on_right else 8, -4),
                      textcoords="offset points", fontsize=8, va="top", ha="right" if on_right else "left")
    else:
        axes.text(0.5, 0.5, "no ok polls of assigned partitions", transform=axes.transAxes, ha="center")
    axes.set_ylim(bottom=0)
    return _finish(figure, axes, path, "lag (s)", handles + _fault_handles(intervals))


def partition_plot(timeline: PartitionTimeline, marks: list[Highlight], intervals: list[Interval], end_s: float,
                   path: Path) -> Path:
    """A partition's offsets over time: acked sends and reads, with the anomalies' evidence circled
    and labelled by op (at most LABELS_MAX labels, the earliest)."""
    figure, axes = _figure(intervals, end_s, f"{timeline.topic}-{timeline.partition}: offsets over time")
    reads = _thin(np.ones(len(timeline.read_s), dtype=bool))
    axes.scatter(timeline.read_s[reads], timeline.read_offset[reads], s=_marker_size(len(timeline.read_s)) / 2,
                 color="#9aa5b1", alpha=0.5, linewidths=0)
    axes.scatter(timeline.send_s, timeline.send_offset, s=14, marker="^", color="#2f6db5", linewidths=0)
    for send in (True, False):
        chosen = [m for m in marks if m.send == send]
        if chosen:
            axes.scatter([m.time_s for m in chosen], [m.offset for m in chosen], s=70 if send else 50,
                         marker="^" if send else "o", facecolor="none", edgecolor=EVIDENCE_COLOUR, linewidths=1.5)
    labelled: set[int] = set()
    for mark in marks:
        if mark.op not in labelled and len(labelled) < LABELS_MAX:
            labelled.add(mark.op)
            axes.annotate(f"op {mark.op}", (mark.time_s, mark.offset), xytext=(6, 4 if len(labelled) % 2 else -10),
                          textcoords="offset points", fontsize=7, color=EVIDENCE_COLOUR)
    kinds = ", ".join(sorted({m.anomaly for m in marks}))
    handles = [plt.Line2D([], [], linestyle="", marker="o", color="#9aa5b1", label="read (poll completed)"),
               plt.Line2D([], [], linestyle="", marker="^", color="#2f6db5", label="acked send"),
               plt.Line2D([], [], linestyle="", marker="o", markerfacecolor="none", markeredgecolor=EVIDENCE_COLOUR,
                          label=f"evidence of {kinds}" if kinds else "evidence")]
    axes.yaxis.get_major_locator().set_params(integer=True)
    return _finish(figure, axes, path, "offset", handles + _fault_handles(intervals))
