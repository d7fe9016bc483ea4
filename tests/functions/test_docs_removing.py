"""docs/removing.md's clean-up of the nodes a removed stack leaves marked, run as written with a real kubectl
against the sandbox's API server, on nodes the cluster adapter marked as the drains do: a drain in progress
(cordoned, ``nodecycle.io/owner`` and ``nodecycle.io/in-progress``) and a node its drain's cleanup keeps cordoned
(its instance into a Running warm pool, a scheduled maintenance, a Spot stop, a root volume replacement), which
the release leaves marked ``nodecycle.io/released-for`` alone, with no owner annotation. No sweeper of the stack
lifts that cordon once it is gone: a node the guide's listing leaves out stays cordoned for good (its instance back
in service, taking no pods)."""

from __future__ import annotations

import itertools
import os
import re
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.domain.flow import plan_for
from nodecycle.domain.model import LifecycleEvent, Step, Transition
from nodecycle.domain.policy import PlanPolicy
from nodecycle.domain.ports.cluster import (
    EXCLUDE_LB_LABEL,
    IN_PROGRESS_ANNOTATION,
    OWNER_ANNOTATION,
    RELEASED_FOR_ANNOTATION,
    Claim,
)
from nodecycle_sandbox.kube import KubeServer

ROOT = Path(__file__).resolve().parents[2]
OWNER = "nodecycle"  # the removed stack's (its OwnerId: the stack's name by default)
MARKS = (OWNER_ANNOTATION, IN_PROGRESS_ANNOTATION, RELEASED_FOR_ANNOTATION)


def node_commands() -> list[str]:
    """The shell block of the guide's "Nodes" paragraph, one command a line, comments cut."""
    text = (ROOT / "docs/removing.md").read_text()
    paragraph = text.split("**Nodes.**", 1)[1].split("\n**", 1)[0]
    (block,) = re.findall(r"```sh\n(.*?)```", paragraph, flags=re.DOTALL)
    return [re.split(r"\s+#\s", line)[0].strip() for line in block.splitlines() if line.strip()]


def nodes(count: int) -> list[dict[str, object]]:
    zones = ("eu-west-1a", "eu-west-1b", "eu-west-1c")
    return [
        {
            "name": f"ip-10-0-{i + 1}-10.eu-west-1.compute.internal",
            "instanceId": f"i-0{i:016x}",
            "zone": zones[i % 3],
        }
        for i in range(count)
    ]


def test_the_guides_listing_finds_every_node_the_removed_stack_left_marked_and_clears_them(
    tmp_path: Path,
) -> None:
    if shutil.which("kubectl") is None:
        pytest.fail("kubectl is required by this test and is not on PATH")
    with KubeServer(tick_seconds=0.02, pod_start_seconds=0.05) as server:
        # Given four nodes: a drain of the removed stack in progress; one its drain's cleanup kept cordoned, marked
        # released for its lifecycle (its instance waiting in a Running warm pool); another owner's drain in
        # progress; one untouched
        seeded = nodes(4)
        server.seed({"nodes": seeded})
        in_progress, kept, others, untouched = (str(n["name"]) for n in seeded)
        cluster = KubeCluster(lambda: server.api_client())
        for name, owner in ((in_progress, OWNER), (kept, OWNER), (others, "another-stack")):
            node = cluster.get_node(name)
            assert node is not None
            claim = cluster.claim_node(node, owner=owner, in_progress="{}", cordon=True, exclude_from_lb=True)
            assert claim is Claim.CLAIMED, claim
        node = cluster.get_node(kept)
        assert node is not None
        mark = f"{seeded[1]['instanceId']}/terminate/4d2f7c1a-93b6-4f0e-8a5d-0c6e2b9f1a37"
        assert cluster.release_node(node, released_for=mark) is Claim.CLAIMED
        annotations = server.get_object("nodes", kept)["metadata"]["annotations"]  # type: ignore[index]
        assert OWNER_ANNOTATION not in annotations
        assert annotations[RELEASED_FOR_ANNOTATION] == mark

        # When the guide's listing runs as written, its shell's OWNER the removed stack's
        kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
        env = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": str(tmp_path),
            "KUBECONFIG": str(kubeconfig),
            "OWNER": OWNER,
        }

        def run(command: str) -> str:
            done = subprocess.run(
                ["bash", "-c", command], env=env, capture_output=True, text=True, timeout=60, check=False
            )
            assert done.returncode == 0, f"{command}\n{done.stderr}"
            return done.stdout

        commands = node_commands()
        listings = [c for c in commands if c.startswith("kubectl get nodes")]
        listed = {line.split("\t")[0] for c in listings for line in run(c).splitlines() if line.strip()}

        # Then it lists both nodes the removed stack left marked (the one kept cordoned, with its instance's
        # lifecycle, by which the guide tells whose it is), and neither another owner's nor an untouched one
        assert listed == {in_progress, kept}
        assert any(str(seeded[1]["instanceId"]) in run(c) for c in listings)

        # And its clean-up, run on each, leaves no mark, no cordon and no label of nodecycle's on them
        for name in (in_progress, kept):
            for command in commands:
                if not command.startswith("kubectl get nodes"):
                    run(command.replace("NODE", name))
            found = server.get_object("nodes", name)
            assert found is not None
            assert not set(MARKS) & set(found["metadata"].get("annotations") or {})
            assert EXCLUDE_LB_LABEL not in (found["metadata"].get("labels") or {})
            assert not found["spec"].get("unschedulable")
        assert OWNER_ANNOTATION in server.get_object("nodes", others)["metadata"]["annotations"]  # type: ignore[index]
        assert untouched not in listed


def test_the_step_the_guide_lets_stay_open_comes_after_every_completion() -> None:
    # Given the step at which the guide says an open lifecycle does not hold the removal (its action completed)
    text = " ".join((ROOT / "docs/removing.md").read_text().split("## 2.")[0].split())
    (named,) = re.findall(r"A lifecycle at step `([a-z-]+)` is the exception", text)
    assert named == Step.CLEANUP.value  # (the name `nodecycle status` shows in its STEP column)
    # Then in every plan a hook's action can have, the step comes after the completion, never before it
    flags = (True, False)
    policies = [
        PlanPolicy(kubernetes=k, eip=e, readiness_gate=r) for k in flags for e in flags for r in flags
    ]
    moves = [
        (None, None),
        ("WarmPool", "AutoScalingGroup"),
        ("EC2", "WarmPool"),
        ("AutoScalingGroup", "WarmPool"),
    ]
    hooked = [transition for transition in Transition if transition.has_hook]
    for policy, transition, (origin, destination) in itertools.product(policies, hooked, moves):
        plan = plan_for(
            LifecycleEvent(
                instance_id="i-0123456789abcdef0",
                transition=transition,
                token="7b4c5d2e-1f3a-4b6c-8d9e-0a1b2c3d4e5f",
                group="nodes",
                hook="hook",
                started_at=datetime(2026, 1, 1, tzinfo=UTC),
                origin=origin,
                destination=destination,
                delivery="eventbridge",
            ),
            policy,
        )
        if Step.CLEANUP in plan:
            assert plan.index(Step.COMPLETE) < plan.index(Step.CLEANUP), plan
