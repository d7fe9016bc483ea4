"""The budget's node selector (NODECYCLE_BUDGET_NODE_SELECTOR) goes with every list of the nodes in its scope: a
selector the API server refuses must be refused by the settings at cold start, naming the setting, rather than
fail every drain at its slot with a 400 that names a query."""

from __future__ import annotations

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from nodecycle.adapters.kube.budget import KubeNodeInventory
from nodecycle.settings import Settings, SettingsError
from nodecycle_sandbox.kube import KubeServer
from tests.integration.budget.conftest import add_nodes

REQUIRED = {
    "NODECYCLE_OWNER_ID": "stack-a",
    "NODECYCLE_MANAGED_GROUPS": "nodes-a",
    "NODECYCLE_RECORD_TABLE": "table",
    "NODECYCLE_DRAIN_QUEUE_URL": "https://sqs/drain",
    "NODECYCLE_EIP_QUEUE_URL": "https://sqs/eip",
    "NODECYCLE_WAKE_QUEUE_URL": "https://sqs/wake",
}


@pytest.mark.parametrize(
    "selector",
    [
        # the bound of < and > is read as a 64-bit integer (labels.NewRequirement's strconv.ParseInt)
        "zone-index>9223372036854775808",
        "role=workers,zone-index<99999999999999999999",
        # a key's prefix is a DNS subdomain: 253 characters at most
        f"{'a' * 254}/role=workers",
        # the lexer's whitespace is a space, a tab, a CR or an LF: a no-break space (pasted from a page) or a
        # vertical tab inside the selector is part of the key or value it touches (the settings strip the
        # value's ends of any whitespace, as what they pass on)
        "role=workers,\u00a0zone-index>1",
        "role in (a,\x0bb)",
    ],
)
def test_a_node_selector_the_api_server_refuses_is_refused_by_the_settings_naming_it(
    core: client.CoreV1Api, server: KubeServer, selector: str
) -> None:
    # Given a selector the API server refuses: the budget's list of the nodes in scope fails on it
    add_nodes(server, 3)
    with pytest.raises(ApiException) as refused:
        KubeNodeInventory(lambda: core, label_selector=selector).nodes_in_scope()
    assert refused.value.status == 400

    # Then the settings refuse it before any drain would, naming the setting
    with pytest.raises(SettingsError, match="NODECYCLE_BUDGET_NODE_SELECTOR: not a label selector"):
        Settings.from_env({**REQUIRED, "NODECYCLE_BUDGET_NODE_SELECTOR": selector})


def test_the_widest_bound_and_prefix_the_api_server_takes_are_accepted(
    core: client.CoreV1Api, server: KubeServer
) -> None:
    selector = f"zone-index<9223372036854775807,{'a' * 253}/role!=system"
    add_nodes(server, 3)
    assert KubeNodeInventory(lambda: core, label_selector=selector).nodes_in_scope() == []
    settings = Settings.from_env({**REQUIRED, "NODECYCLE_BUDGET_NODE_SELECTOR": selector})
    assert settings.budget_node_selector == selector
