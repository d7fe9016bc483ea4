"""``nodecycle status``: the lifecycles a stack is working on, from its lifecycle table.

    nodecycle status --stack NAME [--region R] [--all] [--json]
    nodecycle status [--table NAME --owner ID] [--all] [--json]

With ``--stack`` the table and owner id come from the stack's outputs; otherwise from ``--table`` and
``--owner`` or ``NODECYCLE_RECORD_TABLE`` and ``NODECYCLE_OWNER_ID`` (the sandbox's environment file sets
both). ``--table`` and ``--owner`` both given name the lifecycles asked for even when ``$NODECYCLE_STACK`` names
a stack (the variable is a default; ``--stack`` on the line is not). AWS credentials, region and endpoint come
from the usual chain.

Below the lifecycles, COMPLETION CLAIMS lists those a completer claimed before its CompleteLifecycleAction and
has not recorded since: who, since when, and when another may take the claim over (HeartbeatMarginSeconds
after it: the stack's, or ``NODECYCLE_HEARTBEAT_MARGIN_SECONDS``, or the template's 60 s).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from nodecycle_cli import version
from nodecycle_cli.claims import claims
from nodecycle_cli.deployment import (
    STACK_VARIABLE,
    Deployment,
    TableMissing,
    add_stack_arguments,
    find,
    lifecycle_table,
    session,
    stack_named_by,
)
from nodecycle_cli.failures import CommandError
from nodecycle_cli.output import age, table

if TYPE_CHECKING:
    from nodecycle.domain.model import LifecycleRecord

# HeartbeatMarginSeconds: how long a completer's claim holds before another may take it over (the template's
# default when neither the stack nor the environment tells)
MARGIN_PARAMETER = "HeartbeatMarginSeconds"
MARGIN_VARIABLE = "NODECYCLE_HEARTBEAT_MARGIN_SECONDS"
DEFAULT_MARGIN_SECONDS = 60


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "status",
        help="the lifecycles a stack is working on",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_stack_arguments(parser)
    # (no default here: --stack must tell one given from the environment's, which --stack overrides)
    parser.add_argument("--table", help="lifecycle table (default: $NODECYCLE_RECORD_TABLE)")
    parser.add_argument("--owner", help="the stack's owner id (default: $NODECYCLE_OWNER_ID)")
    parser.add_argument("--all", action="store_true", help="finished lifecycles too (reads the whole table)")
    parser.add_argument(
        "-o", "--output", choices=("table", "json"), default="table", help="how to print it (default: table)"
    )
    parser.add_argument("--json", dest="output", action="store_const", const="json", help="same as -o json")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from nodecycle.adapters.aws.records import DynamoRecordStore

    aws = session(args)
    # $NODECYCLE_STACK is a default: --table and --owner both on the line name the lifecycles asked for (another
    # stack's, sharing the table or not); --stack on the line is an order, which they must agree with
    on_the_line = args.stack_source == "--stack"
    if args.stack and (on_the_line or not (args.table and args.owner)):
        with stack_named_by(args):
            deployment = find(aws, args.stack)
        for flag, given, its in (
            ("--table", args.table, deployment.table),
            ("--owner", args.owner, deployment.owner),
        ):
            if given not in (None, its):
                # listed under the stack's owner id, they would read as the lifecycles asked for
                raise CommandError(
                    f"{flag} {given} is not stack {args.stack}'s ({its}): pass --stack, or --table and --owner"
                    if on_the_line
                    else f"{flag} {given} is not stack {args.stack}'s ({its}), which {STACK_VARIABLE} names: "
                    "pass --table and --owner both (they override the variable), or --stack"
                )
        args.table, args.owner = deployment.table, deployment.owner
        release: Deployment | None = deployment
        margin = deployment.parameters.get(MARGIN_PARAMETER)
        deleting = deployment.status if deployment.status.startswith("DELETE_") else None
    else:
        args.table = args.table or os.environ.get("NODECYCLE_RECORD_TABLE")
        args.owner = args.owner or os.environ.get("NODECYCLE_OWNER_ID")
        margin = os.environ.get(MARGIN_VARIABLE)
        deleting = None
        release = None
    if not args.table or not args.owner:
        raise CommandError(
            "which stack? pass --stack NAME (or --table and --owner, or set NODECYCLE_RECORD_TABLE and "
            "NODECYCLE_OWNER_ID)"
        )
    dynamodb = aws.client("dynamodb")
    store = DynamoRecordStore(args.table, ttl=timedelta(days=1), dynamodb=dynamodb)
    try:
        with lifecycle_table(args.table, dynamodb.meta.region_name):
            records = list(store.scan(args.owner) if args.all else store.open_records(args.owner))
    except TableMissing:
        if deleting is None:
            raise
        # (not "deleted outside the stack": its own deletion took it)
        raise CommandError(
            f"stack {args.stack} is {deleting}: its lifecycle table {args.table} went with its deletion, and no "
            "lifecycle is left to list (the hooks on its groups stay: docs/removing.md)"
        ) from None
    records.sort(key=lambda record: record.received_at)
    # (told once the lifecycles are read: a command that fails says its one line alone)
    warning = version.mismatch(release) if release is not None else None
    if warning is not None:
        print(warning, file=sys.stderr)
    if args.output == "json":
        print(json.dumps([record.model_dump(mode="json") for record in records], indent=2))
        return 0
    margin_seconds = int(margin) if margin and margin.isdigit() else DEFAULT_MARGIN_SECONDS
    now = datetime.now(UTC)
    if release is not None:
        print(version.line(release), end="\n\n")
    print(
        "\n".join(
            render(records, now, finished_too=args.all, margin=timedelta(seconds=margin_seconds))
        ).rstrip()
    )
    return 0


def render(
    records: list[LifecycleRecord],
    now: datetime,
    *,
    finished_too: bool,
    margin: timedelta = timedelta(seconds=DEFAULT_MARGIN_SECONDS),
) -> list[str]:
    title = f"{'LIFECYCLES' if finished_too else 'OPEN LIFECYCLES'} ({len(records)})"
    return table(
        title,
        ["INSTANCE", "TRANSITION", "STEP", "NODE", "ZONE", "AGE", "NEXT", "HEARTBEATS", "OUTCOME"],
        [
            [
                record.instance_id,
                # a lifecycle the sweeper adopted shows its token (adopted:<hook>), as the runbook says
                record.transition.short + ("" if record.token_known else f" ({record.token})"),
                record.step.value,
                record.node or "-",
                record.zone or "-",
                age((now - record.started_at).total_seconds()),
                "-" if record.finished else _next(record, now),
                str(record.heartbeats),
                record.outcome or "-",
            ]
            for record in records
        ],
    ) + _claims(records, now, margin)


def _claims(records: list[LifecycleRecord], now: datetime, margin: timedelta) -> list[str]:
    """The completion claims at work: a lifecycle at COMPLETE whose completer claimed it and has not recorded
    what its call did. Nothing moves it until its completer does, or until another takes the claim over."""
    found = claims(records, margin)
    if not found:
        return []
    return table(
        f"COMPLETION CLAIMS ({len(found)})",
        ["INSTANCE", "TRANSITION", "BY", "CLAIMED", "TAKEOVER"],
        [
            [
                claim.record.instance_id,
                claim.record.transition.short,
                claim.by + (" (over a vanished one)" if claim.over else ""),
                f"{age((now - claim.at).total_seconds())} ago",
                _takeover(claim.taken_over_in(now)),
            ]
            for claim in found
        ],
    )


def _takeover(left: timedelta) -> str:
    seconds = left.total_seconds()
    # past it: its completer is taken as gone, and the step's next delivery or the sweeper's resend claims over it
    return f"in {age(seconds)}" if seconds > 0 else f"due {age(-seconds)} ago (its completer gone)"


def _next(record: LifecycleRecord, now: datetime) -> str:
    seconds = (record.due_at - now).total_seconds()
    return "now" if seconds <= 0 else f"in {age(seconds)}"
