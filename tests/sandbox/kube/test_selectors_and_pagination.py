"""fieldSelector, labelSelector and limit/continue on lists, against one shared, settled cluster."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from nodecycle_sandbox.kube import KubeServer

from .conftest import Kube, connect, node_name, nodes_seed, status_of

Pod = dict[str, Any]


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[KubeServer, Kube]]:
    """3 nodes with room for 3 pods each and 12 pods: 3 of them stay Pending."""
    with KubeServer(tick_seconds=0.02, pod_start_seconds=0.0) as server:
        server.seed(
            {
                "nodes": nodes_seed(3, pods_capacity=3),
                "deployments": [
                    {
                        "name": "web",
                        "namespace": "shop",
                        "replicas": 4,
                        "labels": {"app": "web", "tier": "front"},
                    },
                    {
                        "name": "api",
                        "namespace": "shop",
                        "replicas": 3,
                        "labels": {"app": "api", "tier": "back"},
                    },
                    {"name": "batch", "namespace": "jobs", "replicas": 4, "labels": {"app": "batch"}},
                ],
                "objects": [
                    {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "metadata": {"name": "canary", "namespace": "shop", "labels": {"canary": "yes"}},
                        "spec": {"containers": [{"name": "c", "image": "x"}]},
                    }
                ],
            }
        )
        server.settle()
        kube = connect(server)
        yield server, kube
        kube.api_client.close()


def _names(pods: list[Pod]) -> list[str]:
    return sorted(f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in pods)


def _listed(kube: Kube, **kwargs: Any) -> list[str]:
    return sorted(
        f"{p.metadata.namespace}/{p.metadata.name}"
        for p in kube.core.list_pod_for_all_namespaces(**kwargs).items
    )


FIRST_NODE = node_name(0, 10)


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        (f"spec.nodeName={FIRST_NODE}", lambda p: p["spec"].get("nodeName") == FIRST_NODE),
        (f"spec.nodeName=={FIRST_NODE}", lambda p: p["spec"].get("nodeName") == FIRST_NODE),
        (f"spec.nodeName!={FIRST_NODE}", lambda p: p["spec"].get("nodeName") != FIRST_NODE),
        ("spec.nodeName=", lambda p: not p["spec"].get("nodeName")),
        ("metadata.name=canary", lambda p: p["metadata"]["name"] == "canary"),
        ("metadata.namespace=jobs", lambda p: p["metadata"]["namespace"] == "jobs"),
        ("status.phase=Pending", lambda p: p["status"]["phase"] == "Pending"),
        (
            "status.phase!=Pending,metadata.namespace!=jobs",
            lambda p: p["status"]["phase"] != "Pending" and p["metadata"]["namespace"] != "jobs",
        ),
    ],
)
def test_field_selector_selects_pods_by_node_name_namespace_and_phase(
    cluster: tuple[KubeServer, Kube], selector: str, expected: Callable[[Pod], bool]
) -> None:
    server, kube = cluster
    wanted = _names([p for p in server.objects("pods") if expected(p)])
    assert wanted, "the cluster must hold pods this selector matches"
    assert _listed(kube, field_selector=selector) == wanted


def test_three_pods_stay_pending_when_nodes_are_full(cluster: tuple[KubeServer, Kube]) -> None:
    _, kube = cluster
    assert len(_listed(kube, field_selector="status.phase=Pending")) == 3
    assert len(_listed(kube, field_selector="status.phase=Running")) == 9


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("app=web", lambda labels: labels.get("app") == "web"),
        ("app==web", lambda labels: labels.get("app") == "web"),
        ("app!=web", lambda labels: labels.get("app") != "web"),
        ("app in (web, api)", lambda labels: labels.get("app") in ("web", "api")),
        ("app notin (web,api)", lambda labels: labels.get("app") not in ("web", "api")),
        ("tier", lambda labels: "tier" in labels),
        ("!tier", lambda labels: "tier" not in labels),
        (
            "tier=front,app in (web)",
            lambda labels: labels.get("tier") == "front" and labels.get("app") == "web",
        ),
        ("canary,!app", lambda labels: "canary" in labels and "app" not in labels),
        # members may be empty, as labels.Parse reads them: "notin ()" is "notin {''}"
        ("app notin (,web)", lambda labels: labels.get("app") not in ("", "web")),
        ("app notin ()", lambda labels: labels.get("app") != ""),
    ],
)
def test_label_selector_supports_equality_sets_and_existence(
    cluster: tuple[KubeServer, Kube], selector: str, expected: Callable[[dict[str, str]], bool]
) -> None:
    server, kube = cluster
    wanted = _names([p for p in server.objects("pods") if expected(p["metadata"].get("labels", {}))])
    assert wanted
    assert _listed(kube, label_selector=selector) == wanted


def test_label_and_field_selectors_combine_on_namespaced_lists(cluster: tuple[KubeServer, Kube]) -> None:
    server, kube = cluster
    listed = kube.core.list_namespaced_pod(
        "shop", label_selector="tier", field_selector="status.phase=Running"
    )
    expected = [
        p
        for p in server.objects("pods", "shop")
        if "tier" in p["metadata"]["labels"] and p["status"]["phase"] == "Running"
    ]
    assert sorted(p.metadata.name for p in listed.items) == sorted(p["metadata"]["name"] for p in expected)


def test_label_selector_edges_kubernetes_accepts(cluster: tuple[KubeServer, Kube]) -> None:
    # (accepted, not a 400; no pod has these labels)
    _, kube = cluster
    assert _listed(kube, label_selector=f"example.com/app={'x' * 63}") == []
    assert _listed(kube, label_selector="zone-index<9223372036854775807") == []


def test_node_field_selector_on_unschedulable(cluster: tuple[KubeServer, Kube]) -> None:
    _, kube = cluster
    assert len(kube.core.list_node(field_selector="spec.unschedulable=false").items) == 3
    assert kube.core.list_node(field_selector="spec.unschedulable=true").items == []


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"field_selector": "spec.containers=x"}, "field label not supported: spec.containers"),
        ({"label_selector": "app in web"}, "unable to parse requirement"),
        ({"label_selector": "a=b=c"}, "unable to parse requirement"),
        ({"label_selector": "zone-index>-1"}, "unable to parse requirement"),  # a bound is a label value
        # labels.NewRequirement (k8s.io/apimachinery pkg/labels/selector.go): a qualified key, label values
        # of 63 characters at most, and a bound that is a 64-bit integer
        ({"label_selector": f"app={'x' * 64}"}, "must be no more than 63 characters"),
        ({"label_selector": f"app in (web,{'x' * 64})"}, "must be no more than 63 characters"),
        ({"label_selector": f"{'k' * 64}=v"}, "name part must be no more than 63 characters"),
        ({"label_selector": "Example.com/app=web"}, "prefix part a lowercase RFC 1123 subdomain"),
        ({"label_selector": "zone-index>9223372036854775808"}, "the value must be an integer"),
        # the lexer's whitespace is a space, a tab, a CR or an LF: any other character (a no-break space, a
        # vertical tab, a form feed) is part of the word it touches
        ({"label_selector": "role=workers\u00a0"}, "unable to parse requirement"),
        ({"label_selector": "role=workers,\x0bzone=a"}, "unable to parse requirement"),
        ({"label_selector": "role\x0c in (a)"}, "unable to parse requirement"),
        ({"_continue": "garbage!", "limit": 2}, "continue key is not valid"),
    ],
)
def test_malformed_list_options_are_400_bad_request(
    cluster: tuple[KubeServer, Kube], kwargs: dict[str, Any], message: str
) -> None:
    _, kube = cluster
    with pytest.raises(ApiException) as raised:
        kube.core.list_pod_for_all_namespaces(**kwargs)
    body = status_of(raised.value)
    assert (raised.value.status, body["reason"]) == (400, "BadRequest")
    assert message in body["message"]


def test_limit_and_continue_page_through_every_pod_once(cluster: tuple[KubeServer, Kube]) -> None:
    server, kube = cluster
    seen: list[str] = []
    token = None
    pages = 0
    while True:
        page = kube.core.list_pod_for_all_namespaces(limit=5, _continue=token)
        pages += 1
        assert len(page.items) <= 5
        if pages == 1:
            assert page.metadata.remaining_item_count == len(server.objects("pods")) - 5
        seen += [f"{p.metadata.namespace}/{p.metadata.name}" for p in page.items]
        token = page.metadata._continue
        if not token:
            break
    assert pages == 3
    assert seen == _names(server.objects("pods"))  # in order, none twice


def test_pagination_applies_after_selectors(cluster: tuple[KubeServer, Kube]) -> None:
    _, kube = cluster
    first = kube.core.list_namespaced_pod("shop", label_selector="tier=front", limit=3)
    rest = kube.core.list_namespaced_pod(
        "shop", label_selector="tier=front", limit=3, _continue=first.metadata._continue
    )
    names = [p.metadata.name for p in first.items + rest.items]
    assert len(names) == 4
    assert all(n.startswith("web-") for n in names)
    assert rest.metadata._continue is None
    assert first.metadata.remaining_item_count is None  # as on a real server: not reported with selectors


def test_the_client_default_limit_500_returns_everything_in_one_page(
    cluster: tuple[KubeServer, Kube],
) -> None:
    server, kube = cluster
    page = kube.core.list_pod_for_all_namespaces(limit=500)
    assert len(page.items) == len(server.objects("pods"))
    assert page.metadata._continue is None


def test_a_list_continued_after_a_compaction_is_410_expired_and_a_new_list_is_served(
    server: KubeServer, kube: Kube
) -> None:
    # Given a paged list begun, a node written since, and etcd's history compacted then (kube-apiserver asks
    # every 5 minutes): the list's revision is gone
    server.seed({"nodes": nodes_seed(3)})
    first = kube.core.list_node(limit=1)
    assert first.metadata._continue
    kube.core.patch_node(node_name(0, 10), {"metadata": {"labels": {"written": "since"}}})
    server.compact()

    # When the list is continued, Then it is refused as expired: the list must start over
    with pytest.raises(ApiException) as raised:
        kube.core.list_node(limit=1, _continue=first.metadata._continue)
    assert (raised.value.status, status_of(raised.value)["reason"]) == (410, "Expired")
    assert "too old to display a consistent list result" in status_of(raised.value)["message"]
    # and a list started over pages through every node
    again = kube.core.list_node(limit=2)
    rest = kube.core.list_node(limit=2, _continue=again.metadata._continue)
    assert len(again.items) + len(rest.items) == 3


def test_a_full_page_of_a_filtered_list_continues_while_any_object_follows_it_even_none_selected(
    cluster: tuple[KubeServer, Kube],
) -> None:
    _, kube = cluster
    # Given the 3 back-end pods of shop, whose names sort before the namespace's other pods (canary, web-*)
    # When they are listed by label 3 to a page
    first = kube.core.list_namespaced_pod("shop", label_selector="tier=back", limit=3)
    # Then the full page continues, as etcd's store pages it (hasMore: another key after the page, selected or
    # not), and the next page is empty and ends the list: a client must go by the token, not by a short page
    assert sorted(p.metadata.name[:4] for p in first.items) == ["api-"] * 3
    assert first.metadata._continue
    assert first.metadata.remaining_item_count is None
    rest = kube.core.list_namespaced_pod(
        "shop", label_selector="tier=back", limit=3, _continue=first.metadata._continue
    )
    assert rest.items == []
    assert rest.metadata._continue is None


def test_a_continued_list_shows_the_objects_as_they_were_at_its_first_page(
    server: KubeServer, kube: Kube
) -> None:
    # Given a paged list of 4 nodes begun (2 to a page)
    server.seed({"nodes": nodes_seed(4)})
    names = sorted(n["metadata"]["name"] for n in server.objects("nodes"))
    first = kube.core.list_node(limit=2)
    # When, before it is continued, its last node is deleted and the third labelled
    kube.core.delete_node(names[3])
    kube.core.patch_node(names[2], {"metadata": {"labels": {"written": "since"}}})
    rest = kube.core.list_node(limit=2, _continue=first.metadata._continue)
    # Then the rest is read at the first page's revision, as etcd serves a continued list (clientv3.WithRev): the
    # deleted node is still there, the third without its label, and every page tells the same resourceVersion
    assert [n.metadata.name for n in rest.items] == names[2:]
    assert "written" not in (rest.items[0].metadata.labels or {})
    assert rest.metadata.resource_version == first.metadata.resource_version
    assert rest.metadata._continue is None
    # while a list begun now sees them as they are
    now = kube.core.list_node(limit=10)
    assert [n.metadata.name for n in now.items] == names[:3]
