"""The cluster a command talks to: the official client from a kubeconfig (``--kubeconfig``, ``--context``),
and whether that kubeconfig points at the stack's EKS cluster."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

if TYPE_CHECKING:
    import boto3
    from kubernetes.client import ApiClient


def add_kubeconfig_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
    parser.add_argument("--context", help="kubeconfig context (default: the current context)")


def api_client(args: argparse.Namespace) -> ApiClient:
    """An ``ApiClient`` of the kubeconfig's context; no kubeconfig raises ConfigException (one line)."""
    from kubernetes import client, config

    from nodecycle.adapters.kube.eks_access import CLIENT_RETRIES

    configuration = client.Configuration()
    # The client reads $KUBECONFIG once, when it is imported: read it now (a list of paths is merged).
    files = args.kubeconfig or os.environ.get("KUBECONFIG") or None
    config.load_kube_config(config_file=files, context=args.context, client_configuration=configuration)
    # As the functions' client: urllib3's default sends a PUT whose answer was lost again, which then meets the
    # conflict of its own first write, and a release that landed would be reported as nothing released
    configuration.retries = CLIENT_RETRIES
    return client.ApiClient(configuration)


def eks_endpoint(session: boto3.Session, cluster: str) -> str:
    endpoint: str = session.client("eks").describe_cluster(name=cluster)["cluster"]["endpoint"]
    return endpoint


def same_server(left: str, right: str) -> bool:
    """Two API server URLs name the same server (scheme, host and port; a missing port is 443)."""

    def key(url: str) -> tuple[str, str, int]:
        parts = urlsplit(url.strip().rstrip("/"))
        return parts.scheme.lower(), (parts.hostname or "").lower(), parts.port or 443

    return key(left) == key(right)


@dataclass(frozen=True)
class Mismatch:
    why: str
    known: bool  # the context is another cluster's; False: it could not be compared


def mismatch(kube: ApiClient, session: boto3.Session, cluster: str) -> Mismatch | None:
    """Why the kubeconfig's context is not the stack's cluster (or cannot be told to be), or None when it is."""
    from botocore.exceptions import ClientError

    try:
        endpoint = eks_endpoint(session, cluster)
    except ClientError as error:
        # A courtesy check, not the command's purpose: a role that may read the stack but not describe its
        # cluster (eks:DescribeCluster) still gets the command, told what was not checked
        from nodecycle_cli.failures import aws_answer

        return Mismatch(
            f"cannot check that the kubeconfig's context is cluster {cluster} (eks:DescribeCluster): "
            f"{aws_answer(error)}",
            known=False,
        )
    host = str(kube.configuration.host)
    if same_server(host, endpoint):
        return None
    return Mismatch(
        f"the kubeconfig's context points at {host}, but the stack's cluster {cluster} is at {endpoint}: "
        f"pass --context, or run `aws eks update-kubeconfig --name {cluster}`",
        known=True,
    )
