"""One loader for the sample events in events/ (the same files `sam local invoke -e` uses)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

EVENTS = Path(__file__).resolve().parents[2] / "events"


def load_event(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((EVENTS / name).read_text())
    return data


def sqs_bodies(name: str) -> list[str]:
    return [record["body"] for record in load_event(name)["Records"]]


def sqs_event(*bodies: str | dict[str, Any], template: str = "sqs-hook-terminate.json") -> dict[str, Any]:
    """An SQS batch shaped like the sample, with the given bodies and distinct message ids."""
    base = load_event(template)["Records"][0]
    records = []
    for index, body in enumerate(bodies):
        text = body if isinstance(body, str) else json.dumps(body)
        records.append(
            {**base, "messageId": f"message-{index}", "receiptHandle": f"handle-{index}", "body": text}
        )
    return {"Records": records}


def happening_now(event: dict[str, Any]) -> dict[str, Any]:
    """The sample as if AWS sent it just now (sample times are fixed; a lifecycle action's clock is not)."""
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    if "Records" in event:
        records = []
        for record in event["Records"]:
            body = record["body"]
            try:
                data = json.loads(body)
            except json.JSONDecodeError:
                records.append(record)
                continue
            if isinstance(data, dict):
                if "time" in data:
                    data["time"] = stamp
                if "Time" in data:
                    data["Time"] = stamp
                body = json.dumps(data)
            records.append({**record, "body": body})
        return {**event, "Records": records}
    return {**event, "time": stamp}
