"""The doctor's look for node claims no stack of the region will clear.

A drain claims its node with the ``nodecycle.io/owner`` annotation (and ``nodecycle.io/in-progress``, its lifecycle
and start). Another stack leaves such a node alone while the claim's owner writes nothing in its budget (a stack of
another BudgetNamespace, or one removed more than a day ago), until the claim is nine days old (CLAIM_OUTLIVED): each
terminate action of the node's instance is completed at its drain timeout with the node undrained (outcome
``node-owned-by:OWNER``), a NodeClaimedElsewhere event on the node the only sign. A removed stack's leftover claim is
that, and no sweeper clears it (each sweeper clears its own owner's only). Listed here: the claims whose owner is
neither this stack's nor that of any stack in the region. A claim of a stack still there (another budget's drain in
progress) is its drain's, not a finding.

A claim whose owner wrote in this stack's budget within LIMITS_RETENTION (its limits still there) is no finding
either: this stack's drains tell that owner's drain dead by the budget (it holds no slot nor place for the node there)
and adopt the node; while it holds one, its drain is alive (a stack of another region or account on the cluster, which
the doctor does not see), and clearing its claim would start a second drain on the node.

A warning, not a problem: the doctor sees the stacks of this account and region only, and a claim is harmful only
once its node's instance is disrupted; the operator who knows the owner gone clears it."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from nodecycle.domain.ports.cluster import IN_PROGRESS_ANNOTATION, OWNER_ANNOTATION
from nodecycle_cli.deployment import stack_outputs
from nodecycle_cli.doctor.findings import Finding

CHECK = "cluster.node-claims"
SHOWN = 10  # claims named in the finding (each with its command); the others counted
_PAGE = 500  # nodes a list call returns at most (a continue token for the rest)


def leftover_claims(cloudformation: Any, api_client: Any, deployment: Any) -> list[Finding]:
    """One finding: the cluster's nodes claimed by an owner with no stack in the region, or none."""
    from kubernetes import client

    core = client.CoreV1Api(api_client)
    namespace = deployment.parameter("BudgetNamespace", "nodecycle")
    writers, unread = _budget_writers(core, namespace)
    # the owners of stacks with no functions (see NO_FUNCTIONS), each its stack's name, state and drain function's
    failed: dict[str, tuple[str, str, str]] = {}
    live = stack_owners(cloudformation, failed) | {deployment.owner}
    left = sorted(
        (owner, name, started) for name, owner, started in _claims(core) if owner not in live | writers
    )
    if not left:
        return [
            Finding.ok(
                CHECK,
                f"every node claim in the cluster is a stack's of {deployment.region} or of an owner that writes "
                f"in budget {namespace}",
            )
        ]
    named = "; ".join(f"{name} by {owner} since {started}" for owner, name, started in left[:SHOWN])
    more = f" and {len(left) - SHOWN} more" if len(left) > SHOWN else ""
    owners = ", ".join(
        f"{owner} (its stack {failed[owner][0]} {failed[owner][1]})" if owner in failed else owner
        for owner in sorted({owner for owner, _, _ in left})
    )
    dead = ", but one with no functions" if any(owner in failed for owner, _, _ in left) else ""
    commands = "; ".join(
        f"kubectl annotate node {name} {OWNER_ANNOTATION}- {IN_PROGRESS_ANNOTATION}-"
        for _, name, _ in left[:SHOWN]
    )
    # (kubectl's custom columns take the annotation's dots escaped)
    listing = (
        r" (the others: kubectl get nodes -o custom-columns=NAME:.metadata.name,"
        r"OWNER:.metadata.annotations.nodecycle\.io/owner)"
        if more
        else ""
    )
    finding = Finding.warning(
        CHECK,
        f"{len(left)} node(s) claimed ({OWNER_ANNOTATION}) by an owner no nodecycle stack in "
        f"{deployment.region} has{dead} ({owners}): {named}{more}",
        "a stack whose budget the claim's owner writes nothing in (a removed stack's, one of another "
        "BudgetNamespace) leaves the node alone until the claim is nine days old: each terminate action of its "
        "instance is completed at the drain timeout with the node undrained "
        "(outcome node-owned-by:OWNER, a NodeClaimedElsewhere event on the node), its pods never evicted",
        f"{unread}{_functions_gone(failed, left)}if no stack of another account or region has that owner id "
        "(its drain would lose the node), clear "
        f"each claim: {commands}{listing}; the next drain of the node adopts it",
    )
    return [finding]


def _functions_gone(failed: dict[str, tuple[str, str, str]], left: list[tuple[str, str, str]]) -> str:
    """What tells that a stack whose deletion failed drains no more: its drain function is gone."""
    stacks = sorted({(failed[owner][0], failed[owner][2]) for owner, _, _ in left if owner in failed})
    return "".join(
        f"check that stack {name}'s drain function is gone (aws lambda get-function --function-name {function}: "
        "ResourceNotFoundException); "
        for name, function in stacks
        if function
    )


# The states of a stack that has no functions, or soon none, though DescribeStacks lists it (with its parameters, and
# its outputs if it had any): its deletion stopped half way (DELETE_FAILED), its creation rolled back
# (ROLLBACK_COMPLETE: "any resources that were created during the create stack operation are deleted") or stopped
# rolling back (ROLLBACK_FAILED), or a change set never executed (REVIEW_IN_PROGRESS: "without any templates or
# resources"; AWS CloudFormation User Guide, stack status codes). A deletion or rollback removes the rules and
# functions first (they depend on the roles, queues and table), before what it usually stops at.
NO_FUNCTIONS = ("DELETE_FAILED", "ROLLBACK_COMPLETE", "ROLLBACK_FAILED", "REVIEW_IN_PROGRESS")


def stack_owners(cloudformation: Any, failed: dict[str, tuple[str, str, str]] | None = None) -> set[str]:
    """The owner ids the region's nodecycle stacks drain as: a claim of one is not reported. A stack's OwnerId
    output, once created (what its functions drain as: the OwnerId parameter, or the stack's name when that is
    empty); before its outputs are there, the same from its OwnerId parameter. A stack's name is no owner by itself:
    a stack whose OwnerId names another (set, or changed since its first deployment) leaves its name's claims to no
    one, and a stack of another template that took a removed stack's name renews none of them. Stacks being
    deleted count: their functions may still drain. A stack in one of NO_FUNCTIONS does not: nothing of it drains
    or sweeps; its owner goes into ``failed``, with the stack's name, its state and its drain function's name (when
    an output names it), for the finding to say why."""
    owners: set[str] = set()
    for page in cloudformation.get_paginator("describe_stacks").paginate():
        for stack in page["Stacks"]:
            outputs = stack_outputs(stack)
            parameters = {
                p["ParameterKey"]: p.get("ParameterValue", "") for p in stack.get("Parameters") or []
            }
            if "OwnerId" in outputs:
                owner = outputs["OwnerId"]
            elif "OwnerId" in parameters:  # (being created: no outputs yet)
                owner = parameters["OwnerId"] or stack["StackName"]
            else:
                continue  # (not a nodecycle stack)
            status = stack.get("StackStatus", "")
            if status not in NO_FUNCTIONS:
                owners.add(owner)
            elif failed is not None and owner:
                failed.setdefault(owner, (stack["StackName"], status, outputs.get("DrainFunctionName", "")))
    return owners - {""}


def _budget_writers(core: Any, namespace: str) -> tuple[set[str], str]:
    """The owners that wrote in the budget of ``namespace`` within LIMITS_RETENTION, as this stack's drains judge a
    claim (the document pruned: see rules._claimed_elsewhere); and, when it could not be read, a sentence that says
    so, put before the advice to clear (an owner that writes there may be draining the node)."""
    from datetime import UTC, datetime

    from nodecycle.adapters.kube.budget import ConfigMapBudgetStore
    from nodecycle.domain.budget.document import BudgetFormatError
    from nodecycle.domain.budget.rules import prune
    from nodecycle.domain.errors import TransientError
    from nodecycle.domain.ports.cluster import Refused

    store = ConfigMapBudgetStore(lambda: core, namespace)
    try:
        document = store.read()
    except (Refused, TransientError, BudgetFormatError) as error:
        return set(), (
            f"the budget ConfigMap {namespace}/{store.name} could not be read ({error}): an owner that writes "
            f"there may be draining the node, check its holders first (nodecycle budget show --namespace "
            f"{namespace}); "
        )
    if document is None:
        return set(), ""
    return set(prune(document, datetime.now(UTC)).limits), ""


def _claims(core: Any) -> Iterator[tuple[str, str, str]]:
    """Each claimed node: its name, its owner and its drain's start (as the in-progress annotation has it)."""
    token = None
    while True:
        page = core.list_node(limit=_PAGE, _continue=token)
        for node in page.items:
            annotations: Mapping[str, str] = node.metadata.annotations or {}
            owner = annotations.get(OWNER_ANNOTATION)
            if owner:
                yield node.metadata.name, owner, _started(annotations.get(IN_PROGRESS_ANNOTATION))
        token = page.metadata._continue
        if not token:
            return


def _started(progress: str | None) -> str:
    try:
        data = json.loads(progress or "")
    except ValueError:
        data = None
    started = data.get("started") if isinstance(data, dict) else None
    return str(started) if started else "an unknown time"
