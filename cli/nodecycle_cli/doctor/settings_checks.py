"""Checks of a stack's parameters against one another: values each valid alone (the template's patterns let them
through) whose combination the runtime cannot honour."""

from __future__ import annotations

import math
from typing import Any

from nodecycle_cli.doctor.findings import Finding

# The template's defaults of the parameters read here: a stack's description lists every parameter with its value,
# but one made from an older template may lack some
_DEFAULTS = {
    "MaintenanceLeadMinutes": 60,
    "DrainTimeoutSeconds": 900,
    "ForceGraceSeconds": 10,
    "LbDeregistrationDelaySeconds": 0,
}


def maintenance_lead(deployment: Any) -> Finding:
    """A scheduled maintenance is drained MaintenanceLeadMinutes before its start, and its drain's deadline is
    capped so that the forced pods' grace, the drain's looks (the product's LOOK_SLACK) and the load balancer delay
    are over by the start (domain/drain/common.py, its maintenance tail). A lead shorter than that and the drain
    timeout leaves no drain its whole timeout: each takes its budget slot at once, room or not (no wait in line
    fits), and force deletes what it has not evicted by its capped deadline, PodDisruptionBudgets or not. A stack
    without a cluster (EIPs only) drains nothing."""
    from nodecycle.domain.drain.common import LOOK_SLACK

    check = "settings.maintenance-lead"
    if not deployment.cluster:
        return Finding.ok(check, "this stack has no cluster (ClusterName empty): no maintenance is drained")
    value = {name: deployment.number(name, default) for name, default in _DEFAULTS.items()}
    lead = value["MaintenanceLeadMinutes"]
    looks = int(LOOK_SLACK.total_seconds())
    drain = (
        value["DrainTimeoutSeconds"]
        + value["ForceGraceSeconds"]
        + looks
        + value["LbDeregistrationDelaySeconds"]
    )
    parts = (
        f"DrainTimeoutSeconds {value['DrainTimeoutSeconds']} + ForceGraceSeconds {value['ForceGraceSeconds']} + "
        f"{looks} s of looks + LbDeregistrationDelaySeconds {value['LbDeregistrationDelaySeconds']} = {drain} s"
    )
    if lead * 60 >= drain:
        return Finding.ok(check, f"MaintenanceLeadMinutes {lead} fits a whole drain ({parts})")
    least = math.ceil(drain / 60)
    return Finding.warning(
        check,
        f"MaintenanceLeadMinutes {lead} ({lead * 60} s) is shorter than a whole drain ({parts}): at least "
        f"{least} minutes",
        "every scheduled maintenance's drain then starts with less time before the maintenance than its drain "
        "timeout: it takes its budget slot at once whether the budget has room or not (ForcedSlots, "
        "BudgetExceededAlarm), and force deletes the pods its evictions have not moved by its deadline, "
        "PodDisruptionBudgets or not",
        f"sam deploy --stack-name {deployment.name} --parameter-overrides MaintenanceLeadMinutes={least} (or a "
        "shorter DrainTimeoutSeconds)",
    )
