"""``python -m benchmarks [--quick] [sizes]``: run the benchmarks on the sandbox and print one table."""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import tempfile
import time
from pathlib import Path

from benchmarks import api_calls, contention, refresh, wake
from benchmarks.report import Result, markdown_table, text_table
from benchmarks.schedule import Budget

BENCHMARKS = ("refresh", "calls", "contention")  # "refresh" also gives the wake latency
# (default, --quick) per size option; --quick keeps every benchmark but makes each smaller.
SIZES = {"nodes": (24, 12), "calls_nodes": (6, 3), "acquirers": (50, 30)}


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks", description="Run the benchmarks on the sandbox and print one table."
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smaller sizes (about a minute on 2 cores; the default run takes about 1.5)",
    )
    parser.add_argument("--nodes", type=int, help="refresh: nodes in the group (default 24, quick 12)")
    parser.add_argument("--max-unavailable", type=int, default=4, help="budget: nodes draining at once")
    parser.add_argument("--per-zone", type=int, default=2, help="budget: nodes draining at once per zone")
    parser.add_argument(
        "--retry-seconds", type=int, default=30, help="BudgetRetrySeconds: a waiter's backoff (the baseline)"
    )
    parser.add_argument(
        "--poll-seconds", type=int, default=1, help="refresh: DrainPollSeconds (production default 5)"
    )
    parser.add_argument("--pods", type=int, default=10, help="calls: drainable pods on the measured node")
    parser.add_argument(
        "--calls-nodes", type=int, help="calls: cluster nodes at the first size (default 6, quick 3; then x3)"
    )
    parser.add_argument(
        "--acquirers", type=int, help="contention: concurrent acquirers (default 50, quick 30)"
    )
    parser.add_argument("--only", choices=BENCHMARKS, action="append", help="run only these (repeatable)")
    parser.add_argument("--log-dir", type=Path, help="keep the handlers' logs here (default: discarded)")
    args = parser.parse_args(argv)
    for name, (default, quick) in SIZES.items():
        if getattr(args, name) is None:
            setattr(args, name, quick if args.quick else default)
    return args


def machine() -> str:
    kubectl = "none"
    try:
        done = subprocess.run(["kubectl", "version", "--client"], capture_output=True, text=True, check=False)
        kubectl = done.stdout.splitlines()[0].split(":", 1)[-1].strip() if done.stdout else "unknown"
    except FileNotFoundError:
        pass
    return (
        f"machine: {os.cpu_count()} cores, {platform.system()} {platform.machine()}, "
        f"Python {platform.python_version()}, kubectl {kubectl}"
    )


def run(args: argparse.Namespace, log_dir: Path) -> list[Result]:
    selected = args.only or BENCHMARKS
    budget = Budget(args.max_unavailable, args.per_zone)
    results = []
    if "refresh" in selected:
        settings = refresh.Settings(args.nodes, budget, args.retry_seconds, args.poll_seconds)
        done = refresh.run(settings, log_dir / "refresh")
        results += [refresh.result(done), wake.result(done)]
    if "calls" in selected:
        calls = api_calls.Settings(pods=args.pods, nodes=args.calls_nodes)
        results.append(api_calls.result(api_calls.run(calls, log_dir / "calls"), calls))
    if "contention" in selected:
        results.append(contention.result(contention.run(args.acquirers, budget), args.acquirers, budget))
    return results


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    began = time.monotonic()
    print(machine(), flush=True)
    with tempfile.TemporaryDirectory(prefix="nodecycle-bench-") as scratch:
        results = run(args, args.log_dir or Path(scratch))
    for found in results:
        print(f"\n## {found.title}")
        for line in found.details:
            print(f"  {line}")
    rows = [row for found in results for row in found.rows]
    print(f"\n{text_table(rows)}\n\nMarkdown (for the README):\n\n{markdown_table(rows)}")
    missed = [row.name for row in rows if row.met is False]
    print(f"\n{len(rows)} figures, {len(missed)} targets missed; {time.monotonic() - began:.0f} s in all")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
