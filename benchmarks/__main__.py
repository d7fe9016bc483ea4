"""``python -m benchmarks [--quick | --tiny] [sizes] [--save]``: run the benchmarks and print one table, each
figure beside its target and the previous saved run's figure."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks import (
    api_calls,
    bursts,
    cluster_size,
    cold_start,
    contention,
    order,
    refresh,
    storms,
    waiting,
    wake,
)
from benchmarks.report import Result, Row, markdown_table, text_table
from benchmarks.schedule import Budget

LAST_RUN = Path(__file__).resolve().parent / "last-run.json"
# In the order they run: the quick, exact ones first.
BENCHMARKS = ("waiting", "cold", "contention", "calls", "sizes", "refresh", "storms", "order", "bursts")
# (default, --quick, --tiny) per size option; --quick keeps every benchmark but makes each smaller, --tiny is
# what CI runs: each benchmark once, to prove it still runs and prints its rows (at the least that does: the
# refreshes of 3 nodes over the 3 zones under a budget of 2 in all, 1 per zone, all three terminating at once, so
# that one node waits for a slot and is woken when one frees (6 nodes under 4/2, two of them waiting, ran the same
# code paths with twice the launches, drains and pods); the order's paced 2x, at 6 nodes, the least in which
# nodes wait under the 4/2 its budget_for gives a group that small; and one cluster size).
SIZES: dict[str, tuple[Any, Any, Any]] = {
    "nodes": (24, 12, 3),
    "storm_nodes": (24, 12, 3),
    "max_unavailable": (4, 4, 2),
    "per_zone": (2, 2, 1),
    "order_sizes": ((30, 100, 300), (30,), ()),
    # the same refresh with pods and polls --pace times slower, where the sandbox saturates two cores at pace 1
    "paced_sizes": ((300,), (), (6,)),
    "pace": (3.0, 3.0, 2.0),
    "calls_nodes": (6, 3, 2),
    "cluster_sizes": ((50, 500, 5000), (50, 500), (20,)),
    "burst": (500, 100, 6),
    "acquirers": (50, 30, 8),
    "cold_runs": (7, 3, 1),
    # the cases also imported without the layer's .pyc files (None: every one; import boto3 always): no row is
    # measured so, only the details, and each case compiles every module it imports
    "cold_without_pyc": (None, None, ("drain",)),
    # containers of each function started before a sandbox benchmark measures (None: all it may run at once, about
    # twenty, each more than half a CPU-second to start); the others start when needed, cold
    "warm": (None, None, 2),
}


def _sizes(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(",") if part.strip())  # "" for none


def _names(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())  # "" for none


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Run the benchmarks on the sandbox and print one table (see benchmarks/README.md).",
    )
    scale = parser.add_mutually_exclusive_group()
    scale.add_argument("--quick", action="store_true", help="smaller sizes (a few minutes on 2 cores)")
    scale.add_argument("--tiny", action="store_true", help="the smallest sizes: each benchmark runs, fast")
    parser.add_argument("--nodes", type=int, help="refresh: nodes in the group (default 24)")
    parser.add_argument(
        "--max-unavailable", type=int, help="refresh: nodes draining at once (default 4; --tiny 2)"
    )
    parser.add_argument(
        "--per-zone", type=int, help="refresh: nodes draining at once per zone (default 2; --tiny 1)"
    )
    parser.add_argument(
        "--retry-seconds", type=int, default=30, help="BudgetRetrySeconds: a waiter's backoff (the baseline)"
    )
    parser.add_argument(
        "--poll-seconds", type=int, default=1, help="refresh, order: DrainPollSeconds (production default 5)"
    )
    parser.add_argument(
        "--drain-concurrency", type=int, default=6, help="refresh: DrainConcurrency (template default 20)"
    )
    parser.add_argument(
        "--storm-nodes",
        type=int,
        help="storms: nodes in the group refreshed quiet and in a storm (default 24)",
    )
    parser.add_argument("--order-sizes", type=_sizes, help="order: group sizes, e.g. 30,100,300")
    parser.add_argument(
        "--paced-sizes",
        type=_sizes,
        help="order: group sizes run again with pods and polls --pace times slower",
    )
    parser.add_argument("--pace", type=float, help="order: how much slower the paced runs are (default 3)")
    parser.add_argument("--pods", type=int, default=10, help="calls: drainable pods on the measured node")
    parser.add_argument("--calls-nodes", type=int, help="calls: cluster nodes at the first size (then x3)")
    parser.add_argument("--cluster-sizes", type=_sizes, help="sizes: cluster sizes, e.g. 50,500,5000")
    parser.add_argument("--burst", type=int, help="bursts: lifecycle actions at once (default 500)")
    parser.add_argument("--acquirers", type=int, help="contention: concurrent acquirers (default 50)")
    parser.add_argument("--cold-runs", type=int, help="cold: fresh interpreters per import (default 7)")
    parser.add_argument(
        "--cold-without-pyc",
        type=_names,
        help="cold: the cases also imported without .pyc files, e.g. drain,intake+parse (default all; boto3 always)",
    )
    parser.add_argument(
        "--warm", type=int, help="sandboxes: containers of each function started ahead (default all)"
    )
    parser.add_argument("--only", choices=BENCHMARKS, action="append", help="run only these (repeatable)")
    parser.add_argument("--log-dir", type=Path, help="keep the handlers' logs here (default: discarded)")
    parser.add_argument(
        "--save",
        action="store_true",
        help=f"save this run's figures as the previous run's, for the next ({LAST_RUN.name})",
    )
    args = parser.parse_args(argv)
    column = 2 if args.tiny else 1 if args.quick else 0
    for name, choices in SIZES.items():
        if getattr(args, name) is None:
            setattr(args, name, choices[column])
    return args


def machine() -> str:
    kubectl = "none"
    try:
        done = subprocess.run(["kubectl", "version", "--client"], capture_output=True, text=True, check=False)
        kubectl = done.stdout.splitlines()[0].split(":", 1)[-1].strip() if done.stdout else "unknown"
    except FileNotFoundError:
        pass
    return (
        f"{os.cpu_count()} cores, {platform.system()} {platform.machine()}, "
        f"Python {platform.python_version()}, kubectl {kubectl}"
    )


def run(
    args: argparse.Namespace, log_dir: Path, report: Callable[[Result], None], failed: list[str]
) -> list[Result]:
    """Run the selected benchmarks; ``failed`` collects those that raised."""
    selected = args.only or BENCHMARKS
    budget = Budget(args.max_unavailable, args.per_zone)
    results: list[Result] = []
    # The quiet refreshes run so far, by their settings: the storm's quiet refresh is the refresh benchmark's when
    # their settings match (as at the default sizes and --tiny), rather than the same refresh run twice.
    refreshes: dict[refresh.Settings, refresh.RefreshRun] = {}

    def done(found: Result) -> None:
        results.append(found)
        report(found)

    for name in BENCHMARKS:
        if name not in selected:
            continue
        try:
            _run_one(name, args, budget, log_dir, done, refreshes)
        except Exception as error:  # one benchmark failing must not lose the others' figures
            print(f"\n## {name}: FAILED\n  {type(error).__name__}: {error}", flush=True)
            failed.append(name)
    return results


def _run_one(
    name: str,
    args: argparse.Namespace,
    budget: Budget,
    log_dir: Path,
    done: Callable[[Result], None],
    refreshes: dict[refresh.Settings, refresh.RefreshRun],
) -> None:
    if name == "waiting":
        done(waiting.result(waiting.run()))
    elif name == "cold":
        done(cold_start.result(cold_start.run(args.cold_runs, args.cold_without_pyc)))
    elif name == "contention":
        done(contention.result(contention.run(args.acquirers, budget), args.acquirers, budget))
    elif name == "calls":
        calls = api_calls.Settings(pods=args.pods, nodes=args.calls_nodes, warm=args.warm)
        done(api_calls.result(api_calls.run(calls, log_dir / "calls"), calls))
    elif name == "sizes":
        sizes = args.cluster_sizes
        scoped = cluster_size.run(sizes, log_dir / "sizes", warm=args.warm)
        # the unscoped comparison is a second sandbox of the same code path: left out of --tiny (CI's run)
        unscoped = (
            None
            if args.tiny
            else cluster_size.run(
                (sizes[0], sizes[-1]), log_dir / "sizes-unscoped", scoped=False, warm=args.warm
            )
        )
        done(cluster_size.result(scoped, unscoped))
    elif name == "refresh":
        settings = refresh.Settings(
            args.nodes, budget, args.retry_seconds, args.poll_seconds, args.drain_concurrency, warm=args.warm
        )
        ran = refreshes[settings] = refresh.run(settings, log_dir / "refresh")
        done(refresh.result(ran))
        done(wake.result(ran))
    elif name == "storms":
        settings = refresh.Settings(
            args.storm_nodes,
            budget,
            args.retry_seconds,
            args.poll_seconds,
            args.drain_concurrency,
            warm=args.warm,
        )
        done(storms.result(*storms.run(settings, log_dir / "storms", refreshes.get(settings))))
    elif name == "order":
        runs = [(nodes, 1.0) for nodes in args.order_sizes] + [
            (nodes, args.pace) for nodes in args.paced_sizes
        ]
        for nodes, pace in runs:  # each size reported as soon as it is measured
            ordered = order.run_one(nodes, args.retry_seconds, args.poll_seconds, log_dir, pace, args.warm)
            done(order.result([ordered]))
    elif name == "bursts":
        done(bursts.result(bursts.run(args.burst, log_dir / "bursts", args.warm)))


def previous_run() -> dict[str, float]:
    if not LAST_RUN.exists():
        return {}
    saved = json.loads(LAST_RUN.read_text())
    return {name: row["ours"] for name, row in saved.get("rows", {}).items()}


def save(rows: list[Row], about: str, argv: list[str] | None) -> None:
    # a run of some benchmarks (--only) updates their rows; a whole run replaces every row, so that no row of
    # an older run (or of a name no benchmark prints any more) stays beside the new date
    partial = "--only" in (argv or [])
    saved = json.loads(LAST_RUN.read_text()) if LAST_RUN.exists() and partial else {"rows": {}}
    saved["rows"].update(
        {
            row.name: {
                "ours": row.ours,
                "base": row.base,
                "unit": row.unit,
                "target": row.target,
                "met": row.met,
            }
            for row in rows
        }
    )
    saved["machine"] = about
    saved["date"] = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    saved["command"] = " ".join(["python -m benchmarks", *(argv or [])])
    LAST_RUN.write_text(json.dumps(saved, indent=2, sort_keys=True) + "\n")


def main(argv: list[str] | None = None) -> int:
    # from the command line too (argv None): save() tells a partial run (--only) by its arguments
    argv = sys.argv[1:] if argv is None else argv
    args = parse(argv)
    began = time.monotonic()
    about = machine()
    print(f"machine: {about}", flush=True)

    previous = previous_run()

    def report(found: Result) -> None:
        print(f"\n## {found.title}")
        for line in found.details:
            print(f"  {line}")
        print(f"\n{text_table(found.rows, previous)}", flush=True)  # at once: a later failure loses nothing

    failed: list[str] = []
    with tempfile.TemporaryDirectory(prefix="nodecycle-bench-") as scratch:
        results = run(args, args.log_dir or Path(scratch), report, failed)
    rows = [row for found in results for row in found.rows]
    print(
        f"\n# All figures\n\n{text_table(rows, previous)}\n\nMarkdown (for the README):\n\n{markdown_table(rows)}"
    )
    missed = [row.name for row in rows if row.met is False]
    print(f"\n{len(rows)} figures, {len(missed)} targets missed; {time.monotonic() - began:.0f} s in all")
    if failed:
        print(f"benchmarks that failed: {', '.join(failed)}")
    if args.save and rows:
        save(rows, about, argv)
        print(f"saved as the previous run: {LAST_RUN}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
