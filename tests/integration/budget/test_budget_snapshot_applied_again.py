"""A snapshot of the whole budget ConfigMap (its document and the stack's note, ``budget.written``) applied again to
the same object by a GitOps tool or an operator: ``kubectl get -o yaml`` saved without the server's fields, then
``kubectl apply -f`` of it (no resourceVersion, so no precondition: it succeeds). The note's uid is the object's and
its digest the document's, so the note vouched for it: the holders granted since the snapshot vanished from the
document while their drains went on evicting, and more than the limit was granted (invariant 1). The API server
tells who set the document last (managedFields: kubectl's manager, not the product's fieldManager): the budget seeds
it from the drains in progress its nodes show before it decides. With the real kubectl, on the sandbox API server,
through the product's adapters."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from nodecycle.adapters.kube.budget import WRITTEN_KEY, ConfigMapBudgetStore
from nodecycle.domain.budget import BudgetDocument, SlotReason
from nodecycle.domain.budget.rules import force_release
from nodecycle_sandbox.kube import KubeServer
from tests.integration.budget.conftest import NAMESPACE, add_nodes, core_api, node_name
from tests.integration.budget.test_budget_restored_document import NAME
from tests.integration.budget.test_configmap_recreated import budget_of, cordon, request
from tests.unit.budget.fakes import FakeClock


def kubectl(server: KubeServer, tmp_path: Path, *args: str) -> str:
    binary = shutil.which("kubectl")
    if binary is None:
        pytest.fail("kubectl is required by this test and is not on PATH")
    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path), "KUBECONFIG": str(kubeconfig)}
    command = [binary, "--cache-dir", str(tmp_path / "kube-cache"), *args]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
    return done.stdout


def snapshot(server: KubeServer, tmp_path: Path, name: str) -> Path:
    """The ConfigMap as a GitOps repository keeps it: ``kubectl get -o json`` without the fields the server sets."""
    saved = json.loads(kubectl(server, tmp_path, "get", "configmap", NAME, "-n", NAMESPACE, "-o", "json"))
    metadata = saved["metadata"]
    saved["metadata"] = {
        key: metadata[key] for key in ("name", "namespace", "labels", "annotations") if key in metadata
    }
    path = tmp_path / name
    path.write_text(json.dumps(saved))
    return path


@pytest.mark.parametrize("age", [timedelta(minutes=3), timedelta(hours=1)])
def test_a_snapshot_of_the_whole_configmap_applied_again_with_kubectl_is_seeded(
    server: KubeServer, tmp_path: Path, age: timedelta
) -> None:
    # Given a budget of 2 whose ConfigMap was saved whole ``age`` ago (node 3's drain had just given its slot back:
    # no holder), and two drains in progress now on nodes 0 and 1, granted since
    add_nodes(server, 6)
    api = core_api(server)
    clock = FakeClock(datetime.now(UTC) - age)
    blue = budget_of(api, clock, "blue")
    assert blue.acquire(request(3)).granted
    blue.release(node_name(3), request(3).record_id, request(3).token)
    saved = snapshot(server, tmp_path, "budget.json")
    assert WRITTEN_KEY in json.loads(saved.read_text())["data"]
    clock.advance(age.total_seconds())
    for i in (0, 1):
        assert blue.acquire(request(i)).granted
        cordon(api, request(i))

    # When it is applied again to the same ConfigMap
    kubectl(server, tmp_path, "apply", "-f", str(saved))
    clock.advance(5)

    # Then the drains in progress are counted from their nodes: a third node waits
    third = blue.acquire(request(2))
    assert (third.granted, third.reason, third.holders) == (False, SlotReason.NO_ROOM, 2)
    assert {h.node for h in blue.snapshot().holders} == {node_name(0), node_name(1)}
    api.api_client.close()


def test_a_slot_released_by_hand_in_a_snapshot_applied_again_does_not_vouch_for_it(
    server: KubeServer, tmp_path: Path
) -> None:
    # Given a budget of 2 whose ConfigMap was saved whole a minute ago while node 3 held a slot (given back since),
    # and two drains in progress now on nodes 0 and 1, granted since; the snapshot applied again
    add_nodes(server, 6)
    api = core_api(server)
    clock = FakeClock(datetime.now(UTC) - timedelta(minutes=1))
    blue = budget_of(api, clock, "blue")
    assert blue.acquire(request(3)).granted
    saved = snapshot(server, tmp_path, "budget.json")
    clock.advance(30)
    blue.release(node_name(3), request(3).record_id, request(3).token)
    for i in (0, 1):
        assert blue.acquire(request(i)).granted
        cordon(api, request(i))
    kubectl(server, tmp_path, "apply", "-f", str(saved))
    clock.advance(30)

    # When an operator releases node 3's slot, which the snapshot brought back, as `nodecycle budget release` does
    # (the store's update of the document as it is: no node listed)
    def release(current: BudgetDocument | None) -> tuple[BudgetDocument | None, None]:
        assert current is not None
        holder = current.holder(node_name(3))
        assert holder is not None
        return force_release(current, holder, clock.now()), None

    ConfigMapBudgetStore(lambda: api, NAMESPACE).update(release)

    # Then the document is still not the budget's: its next write counts the drains in progress, a third node waits
    third = blue.acquire(request(2))
    assert (third.granted, third.reason, third.holders) == (False, SlotReason.NO_ROOM, 2)
    assert {h.node for h in blue.snapshot().holders} == {node_name(0), node_name(1)}
    api.api_client.close()
