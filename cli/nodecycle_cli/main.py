"""``nodecycle``: the command line of the project (the local sandbox, the demo, the budget, lifecycle status).

It is a developer and operator tool: installed by pyproject.toml, never shipped in the Lambda layer.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

import nodecycle_cli.budget
import nodecycle_cli.chaos
import nodecycle_cli.demo
import nodecycle_cli.sandbox
import nodecycle_cli.status


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nodecycle",
        description="EC2 Auto Scaling lifecycle hooks for EKS nodes and Elastic IP fleets.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log what the tool does")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in (nodecycle_cli.sandbox, nodecycle_cli.demo, nodecycle_cli.budget, nodecycle_cli.status):
        command.register(commands)
    nodecycle_cli.chaos.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s")
    try:
        return int(args.run(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
