"""Read the CloudWatch EMF documents powertools prints, so tests can assert on metrics."""

from __future__ import annotations

import json
from collections import Counter


def metric_counts(output: str) -> Counter[tuple[str, tuple[tuple[str, str], ...]]]:
    """Sum of every metric in ``output`` by (name, sorted dimensions other than owner/service)."""
    counts: Counter[tuple[str, tuple[tuple[str, str], ...]]] = Counter()
    for line in output.splitlines():
        if not line.startswith("{") or '"_aws"' not in line:
            continue
        document = json.loads(line)
        directive = document["_aws"]["CloudWatchMetrics"][0]
        names = {dimension for group in directive["Dimensions"] for dimension in group}
        dimensions = tuple(
            sorted((name, document[name]) for name in names if name not in ("owner", "service"))
        )
        for metric in directive["Metrics"]:
            values = document[metric["Name"]]
            counts[(metric["Name"], dimensions)] += sum(values) if isinstance(values, list) else values
    return counts


def metric(output: str, name: str, **dimensions: str) -> float:
    return metric_counts(output)[(name, tuple(sorted(dimensions.items())))]
