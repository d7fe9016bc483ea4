"""What every benchmark smoke test checks. The tests are split over three files only so that
``--dist loadfile`` spreads the long runs over the workers."""

from __future__ import annotations

import pytest

from benchmarks.__main__ import main


def runs_and_prints(
    benchmark: str | tuple[str, ...], rows: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """``benchmark``: its name, or the names of benchmarks run together (one reusing another's run)."""
    names = (benchmark,) if isinstance(benchmark, str) else benchmark
    # When the benchmark runs alone at its smallest size (never saving its figures)
    assert main(["--tiny", *(arg for name in names for arg in ("--only", name))]) == 0

    # Then the table has each of its rows, and the markdown table for the README too
    printed = capsys.readouterr().out
    table, _, markdown = printed.partition("Markdown (for the README):")
    for row in rows:
        assert row in table, f"{benchmark} did not print a row starting {row!r}"
        assert row in markdown
