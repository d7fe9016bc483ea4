"""Plain-text output shared by the commands: aligned tables and short ages."""

from __future__ import annotations


def table(title: str, header: list[str], rows: list[list[str]]) -> list[str]:
    if not rows:
        return [f"{title}: none", ""]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    out = [title]
    for row in [header, *rows]:
        out.append("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    return [*out, ""]


def age(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
