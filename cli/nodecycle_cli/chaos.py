"""``nodecycle chaos``: the seeded fault campaign on the local sandbox.

Runs K scenarios drawn from the seed (launches, scale-ins, instance refreshes, instances terminated, two
owners on one cluster; Elastic IPs allocated and from a pool), each under faults drawn from the same seed
(API server 409 storms, 429s, 500s, slow answers and dropped connections; AWS throttling and 5xx; SQS
duplicates, delays, reordering and drops; containers killed after an API call; moved clocks; a node losing
its kubelet), each to quiescence, sweeper included. ``--lag`` runs the same scenarios on an eventually
consistent AWS: the lifecycle table's index behind its writes, EC2's reads behind its writes, or both.
``--forge`` sends forged and replayed hook notifications to the intake queues among the real ones (a token no
hook issued, an action already completed, the other stack's queue). Every scenario is judged by the invariants of
docs/design.md from what the sandbox recorded; a violation is shrunk to the fewest faults that still
reproduce it and printed with its seed. The exit status is 1 when any invariant was violated.

``--mutations`` instead checks that the campaign catches deliberately broken copies of the product.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "chaos",
        help="run the seeded fault campaign and judge the invariants",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--scenarios", type=int, default=10, metavar="K", help="how many scenarios (default 10)"
    )
    parser.add_argument("--seed", type=int, default=1, help="the campaign's seed (default 1)")
    parser.add_argument(
        "--only", type=int, metavar="INDEX", help="run scenario INDEX of the seed alone (a replay)"
    )
    parser.add_argument("--no-faults", action="store_true", help="the same scenarios with no fault injected")
    parser.add_argument(
        "--lag",
        action="store_true",
        help="the same scenarios on an eventually consistent AWS: DynamoDB's index and EC2's reads lag its writes",
    )
    parser.add_argument(
        "--forge",
        action="store_true",
        help="the same scenarios with forged and replayed lifecycle notifications sent to the intake queues",
    )
    parser.add_argument("--no-shrink", action="store_true", help="report violations without shrinking them")
    parser.add_argument("--log-dir", type=Path, help="keep the functions' logs here")
    parser.add_argument(
        "--worlds",
        type=int,
        default=1,
        metavar="N",
        help="share the scenarios among N sandboxes run at once, each in its own process (default 1)",
    )
    parser.add_argument(
        "--mutations",
        action="store_true",
        help="check that each planted bug is caught (at most --scenarios scenarios each)",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from nodecycle_sandbox.scenario import project_root

    root = project_root()
    if args.mutations:
        return _mutations(root, args)
    from nodecycle_sandbox.chaos import run_campaign

    report = run_campaign(
        scenarios=args.scenarios,
        seed=args.seed,
        root=root,
        only=args.only,
        faults=not args.no_faults,
        lag=args.lag,
        forge=args.forge,
        shrink=not args.no_shrink,
        log_dir=args.log_dir,
        worlds=args.worlds,
        progress=lambda line: print(line, flush=True),
    )
    print(report.summary())
    return 0 if report.ok else 1


def _mutations(root: Path, args: argparse.Namespace) -> int:
    from nodecycle_sandbox.chaos.mutations import MUTATIONS, check_mutation, table

    results = []
    for mutation in MUTATIONS:
        print(f"mutation {mutation.name}: {mutation.what}", flush=True)
        results.append(
            check_mutation(
                root,
                mutation,
                seed=args.seed,
                max_scenarios=args.scenarios,
                progress=lambda line: print(f"  {line}", flush=True),
            )
        )
    print(table(results))
    return 0 if all(r.caught for r in results) else 1
