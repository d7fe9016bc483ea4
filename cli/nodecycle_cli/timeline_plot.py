"""Draw a refresh's :class:`~nodecycle_cli.timeline.Timeline`: a PNG, and a self-contained HTML page.

One lane per node, grouped by zone, coloured by phase; above each zone, how many of its nodes held a budget
slot at each moment against the per-zone limit (a dashed line), and at the top the same for the whole
cluster. Matplotlib comes with the ``sandbox`` extra, like the demo that draws this.
"""

from __future__ import annotations

import html
import io
from pathlib import Path
from typing import TYPE_CHECKING

from nodecycle_cli.timeline import DRAINED, DRAINING, GONE, PHASES, WAITING, Timeline

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

COLOURS = {WAITING: "#f2c14e", DRAINING: "#e4572e", DRAINED: "#4c9f70", GONE: "#d0d0d0"}
HOLDING_COLOUR = "#3d6fb6"  # nodes holding a budget slot (draining or drained)
LIMIT_COLOUR = "#b3261e"
LANE_HEIGHT = 0.34  # inches per node


def write(timeline: Timeline, png: Path, page: Path, title: str) -> tuple[Path, Path]:
    """Draw the timeline into ``png`` and ``page`` (HTML with the picture inline as SVG)."""
    import matplotlib

    matplotlib.use("Agg")  # no display: files only
    figure = draw(timeline, title)
    png.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(png, dpi=110)
    svg = io.StringIO()
    figure.savefig(svg, format="svg")
    page.write_text(_page(timeline, title, svg.getvalue()), encoding="utf-8")
    import matplotlib.pyplot as plt

    plt.close(figure)
    return png, page


def verdict(timeline: Timeline) -> str:
    held = timeline.peak() <= timeline.limit and all(
        timeline.per_zone is None or timeline.peak(zone) <= timeline.per_zone for zone in timeline.zones
    )
    return "the budget held at every moment" if held else "THE BUDGET WAS EXCEEDED"


def draw(timeline: Timeline, title: str) -> Figure:
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    zones = timeline.zones
    counts = [sum(lane.zone == zone for lane in timeline.lanes) for zone in zones]
    heights = [1.1] + [x for count in counts for x in (0.75, max(1, count) * LANE_HEIGHT + 0.25)]
    figure = plt.figure(figsize=(12, sum(heights) + 1.4), layout="constrained")
    grid = figure.add_gridspec(len(heights), 1, height_ratios=heights)
    top = figure.add_subplot(grid[0])
    _occupancy(top, timeline, None, timeline.limit, "the whole cluster")
    for index, zone in enumerate(zones):
        strip = figure.add_subplot(grid[1 + 2 * index], sharex=top)
        _occupancy(strip, timeline, zone, timeline.per_zone, zone)
        lanes = figure.add_subplot(grid[2 + 2 * index], sharex=top)
        _lanes(lanes, timeline, zone)
    figure.axes[-1].set_xlabel("seconds since the refresh started")
    figure.axes[-1].tick_params(labelbottom=True)
    figure.suptitle(f"{title}: {verdict(timeline)}", fontsize=13, fontweight="bold")
    figure.legend(
        handles=[Patch(color=COLOURS[p], label=p) for p in PHASES]
        + [
            Patch(color=HOLDING_COLOUR, alpha=0.5, label="nodes holding a budget slot"),
            plt.Line2D([], [], color=LIMIT_COLOUR, linestyle="--", linewidth=2, label="budget limit"),
        ],
        loc="outside lower center",
        ncols=6,
        frameon=False,
    )
    return figure


def _occupancy(axes: Axes, timeline: Timeline, zone: str | None, limit: int | None, label: str) -> None:
    steps = timeline.occupancy(zone)
    times = [t - timeline.start for t, _ in steps] + [timeline.end - timeline.start]
    values = [count for _, count in steps]
    values.append(values[-1])
    axes.fill_between(times, values, step="post", color=HOLDING_COLOUR, alpha=0.35, linewidth=0)
    axes.step(times, values, where="post", color=HOLDING_COLOUR, linewidth=1.5)
    peak = max(values)
    ceiling = max(peak, limit or 0) + 1
    if limit is not None:
        axes.axhline(limit, color=LIMIT_COLOUR, linestyle="--", linewidth=2, zorder=3)
    held = limit is None or peak <= limit
    limit_text = f"limit {limit}" if limit is not None else "no limit"
    axes.set_title(
        f"{label}: at most {peak} holding a budget slot at once ({limit_text})",
        loc="left",
        fontsize=10,
        color="#1b5e20" if held else LIMIT_COLOUR,
        fontweight="bold",
    )
    axes.set_ylim(0, ceiling)
    axes.set_yticks(range(ceiling + 1))
    axes.set_xlim(0, timeline.end - timeline.start)
    axes.tick_params(labelbottom=False)
    axes.grid(axis="x", alpha=0.3)
    axes.spines[["top", "right"]].set_visible(False)


def _lanes(axes: Axes, timeline: Timeline, zone: str) -> None:
    lanes = [lane for lane in timeline.lanes if lane.zone == zone]
    for row, lane in enumerate(lanes):
        for span in lane.spans:
            axes.broken_barh(
                [(span.start - timeline.start, span.end - span.start)],
                (row - 0.38, 0.76),
                facecolors=COLOURS[span.phase],
            )
        if lane.outcome:
            drained = lane.span(DRAINED) or lane.span(DRAINING)
            if drained is not None:
                axes.text(
                    drained.end - timeline.start + 0.01 * (timeline.end - timeline.start),
                    row,
                    f"outcome: {lane.outcome}",
                    va="center",
                    fontsize=8,
                    color="#444444",
                    style="italic",
                )
    axes.set_yticks(
        range(len(lanes)), [f"{lane.node.split('.')[0]}  {lane.instance_id}" for lane in lanes], fontsize=8
    )
    axes.set_ylim(len(lanes) - 0.5, -0.5)
    axes.tick_params(labelbottom=False)
    axes.grid(axis="x", alpha=0.3)
    axes.spines[["top", "right"]].set_visible(False)


def _page(timeline: Timeline, title: str, svg: str) -> str:
    rows = []
    for lane in sorted(timeline.lanes, key=lambda lane: (lane.zone, lane.spans[0].start)):
        cells = [lane.zone, lane.node, lane.instance_id]
        for phase in (WAITING, DRAINING, DRAINED):
            span = lane.span(phase)
            cells.append(f"{span.end - span.start:.1f} s" if span else "-")
        cells.append(lane.outcome or "-")
        rows.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
    zones = ", ".join(f"{zone}: {timeline.peak(zone)}" for zone in timeline.zones)
    summary = (
        f"At most {timeline.peak()} nodes held a budget slot at once (limit {timeline.limit}); per zone, at most "
        f"{zones} (limit {timeline.per_zone if timeline.per_zone is not None else 'none'})."
    )
    svg_body = svg[svg.index("<svg") :]  # drop the XML prolog: inline SVG in HTML
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{html.escape(title)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; color: #222; }}
svg {{ max-width: 100%; height: auto; }}
table {{ border-collapse: collapse; margin-top: 1em; font-size: 0.9em; }}
td, th {{ border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; }}
th {{ background: #f3f3f3; }}
</style>
</head>
<body>
<h1>{html.escape(title)}: {html.escape(verdict(timeline))}</h1>
<p>{html.escape(summary)} A node holds its slot from its cordon (draining) until its lifecycle action is
completed (drained); the phases come from the sandbox's records: the Kubernetes API server's history and the
Auto Scaling emulation.</p>
{svg_body}
<table>
<tr><th>zone</th><th>node</th><th>instance</th><th>waited for a slot</th><th>draining</th><th>drained</th>
<th>outcome</th></tr>
{chr(10).join(rows)}
</table>
</body>
</html>
"""
