"""A kubeconfig for kubectl (and any client that reads one) pointing at a sandbox API server."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import yaml


def kubeconfig(server_url: str, token: str, *, ca_pem: bytes | None, name: str = "sandbox") -> dict[str, Any]:
    cluster: dict[str, Any] = {"server": server_url}
    if ca_pem is not None:
        cluster["certificate-authority-data"] = base64.b64encode(ca_pem).decode()
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": cluster}],
        "users": [{"name": name, "user": {"token": token}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "current-context": name,
        "preferences": {},
    }


def write_kubeconfig(
    path: Path, server_url: str, token: str, *, ca_pem: bytes | None, name: str = "sandbox"
) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(kubeconfig(server_url, token, ca_pem=ca_pem, name=name), sort_keys=False))
    path.chmod(0o600)  # kubectl warns about group/world-readable kubeconfigs
    return path
