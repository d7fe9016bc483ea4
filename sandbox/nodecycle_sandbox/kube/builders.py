"""Builders for the objects the simulated cluster creates by itself: nodes, their kubelets' Leases, pods of
controllers, mirror pods."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
import secrets
from typing import Any

from nodecycle_sandbox.kube.meta import MIRROR_ANNOTATION, ZONE_LABEL, JsonObj, json_copy, owner_ref, rfc3339

KUBELET_VERSION = "v1.32.0-eks-sandbox"
NODE_LEASE_NAMESPACE = "kube-node-lease"
NODE_LEASE_SECONDS = 40  # the kubelet's nodeLeaseDurationSeconds (it renews at a quarter of it: every 10 s)
# The alphabet of k8s.io/apimachinery/pkg/util/rand: no vowels, no look-alike digits.
_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_EC2_NAME = re.compile(r"^ip-(\d{1,3})-(\d{1,3})-(\d{1,3})-(\d{1,3})(\.|$)")


def random_suffix(length: int = 5) -> str:
    return "".join(secrets.choice(_NAME_ALPHABET) for _ in range(length))


def template_hash(template: JsonObj) -> str:
    """A stable pod-template-hash for a Deployment's ReplicaSet (the value differs from Kubernetes')."""
    digest = hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()
    return "".join(_NAME_ALPHABET[int(digest[i : i + 2], 16) % len(_NAME_ALPHABET)] for i in range(0, 20, 2))


def region_of(zone: str) -> str:
    return zone[:-1] if zone and zone[-1].isalpha() else zone


def ec2_node_name(private_ip: str, region: str) -> str:
    """The node name EKS gives an instance: its EC2 private DNS name."""
    return f"ip-{private_ip.replace('.', '-')}.{region}.compute.internal"


def ip_of_node_name(name: str) -> str | None:
    m = _EC2_NAME.match(name)
    return ".".join(m.group(i) for i in range(1, 5)) if m else None


def ready_condition(ready: bool, now: float) -> JsonObj:
    return {
        "type": "Ready",
        "status": "True" if ready else "False",
        "reason": "KubeletReady" if ready else "KubeletNotReady",
        "message": "kubelet is posting ready status" if ready else "container runtime network not ready",
        "lastHeartbeatTime": rfc3339(now),
    }


def micro_time(epoch: float) -> str:
    """A MicroTime, as a Lease's renewTime is written."""
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def node_lease(node: JsonObj, *, uid: str, now: float) -> JsonObj:
    """The Lease a node's kubelet creates as it starts (``kube-node-lease/<node>``, owned by the node, so that
    it goes with it)."""
    name = node["metadata"]["name"]
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": name,
            "namespace": NODE_LEASE_NAMESPACE,
            "uid": uid,
            "creationTimestamp": rfc3339(now),
            "ownerReferences": [owner_ref(node, controller=False)],
        },
        "spec": {
            "holderIdentity": name,
            "leaseDurationSeconds": NODE_LEASE_SECONDS,
            "renewTime": micro_time(now),
        },
    }


# What a kubelet of an EKS node reports besides its readiness, as a real Node carries it: the pressure
# conditions, the kubelet's port and the images on the node (EKS's add-ons, the pause image; a name by tag
# and one by digest each). Without them a Node was a third of a real one's size, and what a list or a
# metadata-only list saves was measured on objects smaller than a cluster's.
_PRESSURES = (
    ("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
    ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
    ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
)
_EKS_IMAGES = (
    ("amazon-k8s-cni", "v1.19.2-eksbuild.1", 45923842),
    ("amazon-k8s-cni-init", "v1.19.2-eksbuild.1", 62311271),
    ("amazon/aws-network-policy-agent", "v1.1.6-eksbuild.1", 33912574),
    ("eks/kube-proxy", "v1.32.0-minimal-eksbuild.2", 36871904),
    ("eks/coredns", "v1.11.4-eksbuild.2", 18254216),
    ("eks/eks-pod-identity-agent", "0.1.17", 11487363),
    ("eks/aws-ebs-csi-driver", "v1.38.1", 79822318),
    ("eks/csi-node-driver-registrar", "v2.12.0-eks-1-32-2", 11823145),
    ("eks/livenessprobe", "v2.14.0-eks-1-32-2", 11037251),
    ("eks/pause", "3.10", 299225),
)


def pressure_conditions(now: float) -> list[JsonObj]:
    """The pressure conditions a healthy kubelet posts (without their lastTransitionTime)."""
    return [
        {
            "type": kind,
            "status": "False",
            "reason": reason,
            "message": message,
            "lastHeartbeatTime": rfc3339(now),
        }
        for kind, reason, message in _PRESSURES
    ]


def _images(region: str) -> list[JsonObj]:
    registry = f"602401143452.dkr.ecr.{region}.amazonaws.com"
    return [
        {
            "names": [
                f"{registry}/{repo}@sha256:{hashlib.sha256(f'{repo}:{tag}'.encode()).hexdigest()}",
                f"{registry}/{repo}:{tag}",
            ],
            "sizeBytes": size,
        }
        for repo, tag, size in _EKS_IMAGES
    ]


def node_object(
    name: str,
    *,
    instance_id: str,
    zone: str,
    ready: bool,
    labels: dict[str, str] | None,
    pods_capacity: int,
    now: float,
) -> JsonObj:
    region = region_of(zone)
    resources = {
        "cpu": "2",
        "memory": "7910Mi",
        "ephemeral-storage": "20959212Ki",
        "pods": str(pods_capacity),
    }
    addresses = [{"type": "Hostname", "address": name}, {"type": "InternalDNS", "address": name}]
    ip = ip_of_node_name(name)
    if ip:
        addresses.insert(0, {"type": "InternalIP", "address": ip})
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "node.kubernetes.io/instance-type": "m5.large",
                "topology.kubernetes.io/region": region,
                ZONE_LABEL: zone,
                **(labels or {}),
            },
        },
        "spec": {"providerID": f"aws:///{zone}/{instance_id}"},
        "status": {
            "capacity": dict(resources),
            "allocatable": dict(resources),
            "conditions": [
                *({**c, "lastTransitionTime": rfc3339(now)} for c in pressure_conditions(now)),
                {**ready_condition(ready, now), "lastTransitionTime": rfc3339(now)},
            ],
            "addresses": addresses,
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "images": _images(region),
            "nodeInfo": {
                "architecture": "amd64",
                "bootID": secrets.token_hex(16),
                "containerRuntimeVersion": "containerd://1.7.25",
                "kernelVersion": "6.1.0-sandbox",
                "kubeProxyVersion": KUBELET_VERSION,
                "kubeletVersion": KUBELET_VERSION,
                "machineID": secrets.token_hex(16),
                "operatingSystem": "linux",
                "osImage": "Amazon Linux 2023",
                "systemUUID": secrets.token_hex(16),
            },
        },
    }


def pod_from_template(template: JsonObj, *, namespace: str, owner: JsonObj) -> JsonObj:
    """A pod of a ReplicaSet or DaemonSet, named ``<owner>-<random suffix>`` like the real controllers do."""
    meta: dict[str, Any] = template.get("metadata") or {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": f"{owner['metadata']['name']}-",
            "namespace": namespace,
            "labels": dict(meta.get("labels") or {}),
            "annotations": dict(meta.get("annotations") or {}),
            "ownerReferences": [owner_ref(owner)],
        },
        "spec": json_copy(template.get("spec") or {}),
    }


def mirror_pod(node: JsonObj, *, name: str, namespace: str, image: str) -> JsonObj:
    """The API-side mirror of a kubelet static pod: named ``<name>-<node>``, owned by its Node."""
    node_name = node["metadata"]["name"]
    config_hash = hashlib.sha256(f"{namespace}/{name}/{image}".encode()).hexdigest()[:32]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{name}-{node_name}",
            "namespace": namespace,
            "labels": {"component": name, "tier": "node"},
            "annotations": {
                MIRROR_ANNOTATION: config_hash,
                "kubernetes.io/config.hash": config_hash,
                "kubernetes.io/config.source": "file",
            },
            "ownerReferences": [owner_ref(node)],
        },
        "spec": {
            "nodeName": node_name,
            "containers": [{"name": name, "image": image}],
            "tolerations": [{"operator": "Exists", "effect": "NoExecute"}],
        },
    }


def default_container(image: str = "public.ecr.aws/docker/library/nginx:stable") -> JsonObj:
    return {"name": "app", "image": image}
