"""Results: rows of ours | ideal-or-baseline | ratio | target, printed as a text table and as markdown."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Row:
    name: str
    ours: float
    base: float | None  # the ideal or the baseline; None when there is nothing to compare with
    unit: str  # "s" for seconds, "%" for shares, "" for counts
    target: str
    met: bool | None = None  # None: a figure for information, with no target to meet

    @property
    def ratio(self) -> float | None:
        return None if not self.base else self.ours / self.base


@dataclass(frozen=True)
class Result:
    """What one benchmark found: its rows, and the lines that explain them (parameters, breakdowns)."""

    title: str
    rows: list[Row]
    details: list[str] = field(default_factory=list)


HEADER = ("benchmark", "ours", "ideal/base", "ratio", "target", "", "previous")


def amount(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "s":
        return f"{value:.2f} s"
    if unit == "%":
        return f"{value:.0f}%"
    if abs(value) >= 10_000:
        return f"{value:,.0f}"
    return f"{value:.0f}" if value == int(value) else f"{value:.2f}" if abs(value) < 1 else f"{value:.1f}"


def cells(row: Row, previous: float | None = None) -> tuple[str, ...]:
    ratio = "-" if row.ratio is None else f"{row.ratio:.2f}" if row.ratio >= 0.1 else f"{row.ratio:.1g}"
    verdict = "" if row.met is None else ("ok" if row.met else "MISSED")
    return (
        row.name,
        amount(row.ours, row.unit),
        amount(row.base, row.unit),
        ratio,
        row.target,
        verdict,
        amount(previous, row.unit),
    )


def text_table(rows: Sequence[Row], previous: Mapping[str, float] | None = None) -> str:
    """One line per row; ``previous``: each row's figure in the last saved run, by name."""
    before = previous or {}
    lines = [HEADER, *(cells(row, before.get(row.name)) for row in rows)]
    widths = [max(len(line[i]) for line in lines) for i in range(len(HEADER))]

    def render(line: tuple[str, ...]) -> str:
        # The name and the target read left to right; the figures line up on the right.
        parts = [
            text.ljust(width) if i in (0, 4, 5) else text.rjust(width)
            for i, (text, width) in enumerate(zip(line, widths, strict=True))
        ]
        return "   ".join(parts).rstrip()

    rule = "-" * len(render(tuple("-" * w for w in widths)))
    return "\n".join([render(lines[0]), rule, *(render(line) for line in lines[1:])])


def markdown_table(rows: Sequence[Row]) -> str:
    def escape(text: str) -> str:
        return text.replace("|", "\\|")

    lines = [
        "| " + " | ".join(HEADER[:5]) + " | met |",
        "|---|--:|--:|--:|---|---|",
        *("| " + " | ".join(escape(cell) for cell in cells(row)[:6]) + " |" for row in rows),
    ]
    return "\n".join(lines)
