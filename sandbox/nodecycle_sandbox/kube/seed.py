"""Cluster seeds: a YAML/JSON document of nodes and workloads, turned into the objects to create.

Shape (every list is optional)::

    namespaces: [shop]
    nodes:
      - {name: ip-10-0-1-10.eu-west-1.compute.internal, instanceId: i-0123456789abcdef0, zone: eu-west-1a,
         podsCapacity: 110, ready: true, labels: {}, staticPods: [{name: probe, namespace: kube-system}]}
      - {privateIp: 10.0.2.10, instanceId: i-..., zone: eu-west-1b}       # name from the EC2 private DNS
    deployments:
      - {name: web, namespace: shop, replicas: 3, labels: {app: web}, image: nginx, emptyDir: false,
         shutdownSeconds: 1.5, startSeconds: 0.2, terminationGracePeriodSeconds: 30,
         template: {...a full pod template, instead of the shorthands...},
         pdb: {minAvailable: 2}}                                            # or {maxUnavailable: "25%"}
    daemonSets:
      - {name: node-agent, namespace: kube-system, labels: {app: node-agent}, image: ..., template: {...}}
    configMaps:
      - {name: settings, namespace: shop, data: {key: value}}
    objects: [...any manifests of the served kinds...]

Namespaces that objects use are created too.
"""

from __future__ import annotations

import importlib.resources
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from nodecycle_sandbox.kube.builders import default_container, ec2_node_name, region_of
from nodecycle_sandbox.kube.controllers import StaticPod
from nodecycle_sandbox.kube.meta import SHUTDOWN_ANNOTATION, START_ANNOTATION, JsonObj
from nodecycle_sandbox.kube.resources import ALL, CONFIGMAPS, DAEMONSETS, DEPLOYMENTS, PDBS, ResourceType

DEFAULT_SEED = "default-seed.yaml"
_TOP_KEYS = {"namespaces", "nodes", "deployments", "daemonSets", "configMaps", "objects"}
_NODE_KEYS = {"name", "privateIp", "instanceId", "zone", "podsCapacity", "ready", "labels", "staticPods"}
_WORKLOAD_KEYS = {
    "name",
    "namespace",
    "replicas",
    "labels",
    "image",
    "emptyDir",
    "shutdownSeconds",
    "startSeconds",
    "terminationGracePeriodSeconds",
    "template",
    "pdb",
}


@dataclass(frozen=True)
class NodeSeed:
    name: str
    instance_id: str
    zone: str
    ready: bool
    labels: dict[str, str]
    pods_capacity: int
    static_pods: tuple[StaticPod, ...]


@dataclass(frozen=True)
class Seed:
    namespaces: tuple[str, ...]
    nodes: tuple[NodeSeed, ...]
    objects: tuple[tuple[ResourceType, JsonObj], ...]  # in creation order


def default_seed() -> dict[str, Any]:
    """The seed shipped with the package (``data/default-seed.yaml``)."""
    text = importlib.resources.files("nodecycle_sandbox.kube").joinpath("data", DEFAULT_SEED).read_text()
    loaded: dict[str, Any] = yaml.safe_load(text)
    return loaded


def load_seed(source: Mapping[str, Any] | str | Path) -> Seed:
    """Read a seed from a mapping or a .yaml/.yml/.json file; raise ValueError naming what is wrong."""
    if isinstance(source, Mapping):
        doc: Any = source
    else:
        text = Path(source).read_text()
        doc = json.loads(text) if str(source).endswith(".json") else yaml.safe_load(text)
    if not isinstance(doc, Mapping):
        raise ValueError("a seed must be a mapping")
    _only(doc, _TOP_KEYS, "seed")
    nodes = tuple(_node(n) for n in doc.get("nodes") or [])
    objects: list[tuple[ResourceType, JsonObj]] = []
    for entry in doc.get("configMaps") or []:
        _only(entry, {"name", "namespace", "data"}, "configMaps[]")
        meta = {"name": entry["name"], "namespace": entry.get("namespace", "default")}
        objects.append((CONFIGMAPS, {"metadata": meta, "data": dict(entry.get("data") or {})}))
    for entry in doc.get("daemonSets") or []:
        objects.append((DAEMONSETS, _workload(entry, "DaemonSet")))
    for entry in doc.get("deployments") or []:
        objects.append((DEPLOYMENTS, _workload(entry, "Deployment")))
        if entry.get("pdb") is not None:
            objects.append((PDBS, _pdb(entry)))
    for manifest in doc.get("objects") or []:
        objects.append((_type_of(manifest), dict(manifest)))
    namespaces = list(doc.get("namespaces") or [])
    for _, obj in objects:
        namespace = obj["metadata"].get("namespace")
        if namespace and namespace not in namespaces:
            namespaces.append(namespace)
    return Seed(tuple(namespaces), nodes, tuple(objects))


def _only(entry: Any, allowed: set[str], where: str) -> None:
    if not isinstance(entry, Mapping):
        raise ValueError(f"{where} must be a mapping")
    unknown = set(entry) - allowed
    if unknown:
        raise ValueError(
            f"unknown key(s) in {where}: {', '.join(sorted(unknown))}; allowed: {', '.join(sorted(allowed))}"
        )


def _node(entry: Any) -> NodeSeed:
    _only(entry, _NODE_KEYS, "nodes[]")
    for key in ("instanceId", "zone"):
        if not entry.get(key):
            raise ValueError(f"nodes[] needs {key}: {dict(entry)}")
    zone = str(entry["zone"])
    name = entry.get("name") or (
        entry.get("privateIp") and ec2_node_name(entry["privateIp"], region_of(zone))
    )
    if not name:
        raise ValueError(f"nodes[] needs a name or a privateIp: {dict(entry)}")
    statics = []
    for pod in entry.get("staticPods") or []:
        _only(pod, {"name", "namespace", "image"}, "nodes[].staticPods[]")
        image = pod.get("image", default_container()["image"])
        statics.append(StaticPod(pod["name"], pod.get("namespace", "kube-system"), image))
    return NodeSeed(
        name=str(name),
        instance_id=str(entry["instanceId"]),
        zone=zone,
        ready=bool(entry.get("ready", True)),
        labels=dict(entry.get("labels") or {}),
        pods_capacity=int(entry.get("podsCapacity", 110)),
        static_pods=tuple(statics),
    )


def _workload(entry: Any, kind: str) -> JsonObj:
    _only(entry, _WORKLOAD_KEYS - ({"replicas", "pdb"} if kind == "DaemonSet" else set()), f"{kind} seed")
    name = entry["name"]
    labels = dict(entry.get("labels") or {"app": name})
    template = entry.get("template") or _template(entry, labels)
    spec: JsonObj = {"selector": {"matchLabels": labels}, "template": template}
    if kind == "Deployment":
        spec["replicas"] = int(entry.get("replicas", 1))
    meta = {"name": name, "namespace": entry.get("namespace", "default"), "labels": labels}
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": meta, "spec": spec}


def _template(entry: Mapping[str, Any], labels: dict[str, str]) -> JsonObj:
    annotations = {}
    if entry.get("shutdownSeconds") is not None:
        annotations[SHUTDOWN_ANNOTATION] = str(entry["shutdownSeconds"])
    if entry.get("startSeconds") is not None:
        annotations[START_ANNOTATION] = str(entry["startSeconds"])
    container = default_container(entry["image"]) if entry.get("image") else default_container()
    spec: JsonObj = {"containers": [container]}
    if entry.get("terminationGracePeriodSeconds") is not None:
        spec["terminationGracePeriodSeconds"] = int(entry["terminationGracePeriodSeconds"])
    if entry.get("emptyDir"):
        spec["volumes"] = [{"name": "scratch", "emptyDir": {}}]
        container["volumeMounts"] = [{"name": "scratch", "mountPath": "/scratch"}]
    return {"metadata": {"labels": labels, "annotations": annotations}, "spec": spec}


def _pdb(entry: Mapping[str, Any]) -> JsonObj:
    budget = entry["pdb"]
    _only(budget, {"minAvailable", "maxUnavailable", "name"}, f"pdb of {entry['name']}")
    labels = dict(entry.get("labels") or {"app": entry["name"]})
    spec = {k: v for k, v in budget.items() if k != "name"} | {"selector": {"matchLabels": labels}}
    meta = {"name": budget.get("name", entry["name"]), "namespace": entry.get("namespace", "default")}
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": meta, "spec": spec}


def _type_of(manifest: Any) -> ResourceType:
    if not isinstance(manifest, Mapping) or not isinstance(manifest.get("metadata"), Mapping):
        raise ValueError(f"objects[] must be manifests with metadata: {manifest!r}")
    for rt in ALL:
        if rt.api_version == manifest.get("apiVersion") and rt.kind == manifest.get("kind"):
            return rt
    raise ValueError(
        f"objects[]: the sandbox does not serve {manifest.get('apiVersion')} {manifest.get('kind')}"
    )
