"""``nodecycle status``: the lifecycles a stack is working on, from its lifecycle table.

    nodecycle status [--table NAME] [--owner ID] [--all] [-o table|json]

The table and owner default to ``NODECYCLE_RECORD_TABLE`` and ``NODECYCLE_OWNER_ID`` (the sandbox's
environment file sets both); AWS credentials, region and endpoint come from the environment as boto3 reads
them.
"""

from __future__ import annotations

import argparse
import json
import os
from datetime import UTC, datetime, timedelta
from typing import Any

from nodecycle.adapters.aws.records import DynamoRecordStore
from nodecycle.domain.model import LifecycleRecord
from nodecycle_cli.output import age, table


def register(commands: Any) -> None:
    parser = commands.add_parser("status", help="the lifecycles a stack is working on")
    parser.add_argument("--table", default=os.environ.get("NODECYCLE_RECORD_TABLE"), help="lifecycle table")
    parser.add_argument("--owner", default=os.environ.get("NODECYCLE_OWNER_ID"), help="the stack's owner id")
    parser.add_argument("--all", action="store_true", help="finished lifecycles too (reads the whole table)")
    parser.add_argument("-o", "--output", choices=("table", "json"), default="table")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if not args.table or not args.owner:
        raise SystemExit(
            "nodecycle status needs --table and --owner (or NODECYCLE_RECORD_TABLE, NODECYCLE_OWNER_ID)"
        )
    store = DynamoRecordStore(args.table, ttl=timedelta(days=1))
    records = list(store.scan(args.owner) if args.all else store.open_records(args.owner))
    records.sort(key=lambda record: record.received_at)
    if args.output == "json":
        print(json.dumps([record.model_dump(mode="json") for record in records], indent=2))
        return 0
    print("\n".join(render(records, datetime.now(UTC), finished_too=args.all)).rstrip())
    return 0


def render(records: list[LifecycleRecord], now: datetime, *, finished_too: bool) -> list[str]:
    title = f"{'LIFECYCLES' if finished_too else 'OPEN LIFECYCLES'} ({len(records)})"
    return table(
        title,
        ["INSTANCE", "TRANSITION", "STEP", "NODE", "ZONE", "AGE", "NEXT", "HEARTBEATS", "OUTCOME"],
        [
            [
                record.instance_id,
                record.transition.short,
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
    )


def _next(record: LifecycleRecord, now: datetime) -> str:
    seconds = (record.due_at - now).total_seconds()
    return "now" if seconds <= 0 else f"in {age(seconds)}"
