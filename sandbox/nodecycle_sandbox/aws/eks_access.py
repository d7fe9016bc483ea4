"""What moto lacks of EKS cluster access: the authentication mode and access entries.

- ``CreateCluster`` takes ``accessConfig`` (the API's default mode is ``CONFIG_MAP``, as AWS's), and
  ``DescribeCluster`` returns it;
- ``UpdateClusterConfig`` with ``accessConfig`` moves the mode forward only (``CONFIG_MAP`` ->
  ``API_AND_CONFIG_MAP`` -> ``API``), refusing the way back as EKS does;
- ``CreateAccessEntry``, ``DescribeAccessEntry``, ``ListAccessEntries``, ``UpdateAccessEntry`` and
  ``DeleteAccessEntry``, refused with ``InvalidRequestException`` on a ``CONFIG_MAP`` cluster (what makes a
  stack with access entries roll back there), ``ResourceInUseException`` for a principal that has one,
  ``ResourceNotFoundException`` for one that has none, and ``InvalidParameterException`` for a Kubernetes
  group starting with ``system:``.

Installed by patching moto's EKS classes (``install``), for every account and region, in server mode and
under ``mock_aws``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote

from moto.core.responses import ActionResult, EmptyResult
from moto.eks import urls
from moto.eks.exceptions import (
    InvalidParameterException,
    InvalidRequestException,
    ResourceInUseException,
    ResourceNotFoundException,
)
from moto.eks.models import Cluster, EKSBackend
from moto.eks.responses import EKSResponse

API = "API"
API_AND_CONFIG_MAP = "API_AND_CONFIG_MAP"
CONFIG_MAP = "CONFIG_MAP"
MODES = (CONFIG_MAP, API_AND_CONFIG_MAP, API)  # the only order EKS lets a cluster move in
DEFAULT_MODE = CONFIG_MAP  # the EKS API's (and CloudFormation's) default when accessConfig is not given
_MARKER = "_nodecycle_access_installed"


def install() -> None:
    """Idempotent: a second call changes nothing."""
    if getattr(EKSResponse, _MARKER, False):
        return
    urls.url_paths.update(
        {
            "{0}/clusters/(?P<name>[^/]+)/access-entries$": urls.response.dispatch,
            "{0}/clusters/(?P<name>[^/]+)/access-entries/(?P<principalArn>.+)$": urls.response.dispatch,
        }
    )
    original_create = EKSResponse.create_cluster
    original_update = EKSResponse.update_cluster_config

    def create_cluster(self: EKSResponse) -> ActionResult:
        access = self._get_param("accessConfig") or {}
        mode = access.get("authenticationMode", DEFAULT_MODE)
        _check_mode(mode)
        result = original_create(self)
        cluster = _cluster(self.eks_backend, self._get_param("name"))
        configure_access(cluster, mode, access.get("bootstrapClusterCreatorAdminPermissions", True))
        return result

    def update_cluster_config(self: EKSResponse) -> ActionResult:
        access = self._get_param("accessConfig")
        if not access:
            return original_update(self)
        cluster = _cluster(self.eks_backend, self._get_param("name"))
        wanted = access.get("authenticationMode")
        _check_mode(wanted)
        set_authentication_mode(cluster, wanted)
        update = {
            "id": f"{cluster.name}-access-{datetime.now(UTC):%Y%m%d%H%M%S}",
            "status": "Successful",
            "type": "AccessConfigUpdate",
            "params": [{"type": "AuthenticationMode", "value": wanted}],
            "createdAt": datetime.now(UTC),
            "errors": [],
        }
        return ActionResult({"update": update})

    responses = {
        "create_cluster": create_cluster,
        "update_cluster_config": update_cluster_config,
        "create_access_entry": _create_access_entry,
        "describe_access_entry": _describe_access_entry,
        "list_access_entries": _list_access_entries,
        "update_access_entry": _update_access_entry,
        "delete_access_entry": _delete_access_entry,
    }
    for name, function in responses.items():
        setattr(EKSResponse, name, function)
    setattr(EKSResponse, _MARKER, True)


def configure_access(cluster: Cluster, mode: str, bootstrap_admin: bool = True) -> None:
    """A new cluster's access configuration (moto's cluster object has none; its serializer reads the
    ``access_config`` attribute for ``accessConfig``)."""
    setattr(  # noqa: B010 (an attribute moto's Cluster does not declare)
        cluster,
        "access_config",
        {"authenticationMode": mode, "bootstrapClusterCreatorAdminPermissions": bootstrap_admin},
    )


def authentication_mode(cluster: Cluster) -> str:
    config: dict[str, Any] = getattr(cluster, "access_config", None) or {}
    return str(config.get("authenticationMode", DEFAULT_MODE))


def set_authentication_mode(cluster: Cluster, wanted: str) -> None:
    """Move ``cluster`` to ``wanted``; EKS refuses to move back towards ``CONFIG_MAP``."""
    current = authentication_mode(cluster)
    if MODES.index(wanted) < MODES.index(current):
        raise InvalidParameterException(
            clusterName=cluster.name,
            message=f"Unsupported authentication mode update from {current} to {wanted}",
        )
    config = dict(getattr(cluster, "access_config", None) or {})
    configure_access(cluster, wanted, config.get("bootstrapClusterCreatorAdminPermissions", True))


def _check_mode(mode: Any) -> None:
    if mode not in MODES:
        raise InvalidParameterException(
            message=f"Invalid authenticationMode {mode!r}: valid values are {', '.join(MODES)}"
        )


def _cluster(backend: EKSBackend, name: str) -> Cluster:
    cluster = backend.clusters.get(name)
    if cluster is None:
        raise ResourceNotFoundException(
            clusterName=name,
            nodegroupName=None,
            fargateProfileName=None,
            addonName=None,
            message=f"No cluster found for name: {name}.",
        )
    return cluster


def _entries(cluster: Cluster) -> dict[str, dict[str, Any]]:
    """The cluster's access entries by principal ARN, kept on moto's cluster object."""
    if not hasattr(cluster, "access_entries"):
        setattr(cluster, "access_entries", {})  # noqa: B010 (an attribute moto's Cluster does not declare)
    entries: dict[str, dict[str, Any]] = getattr(cluster, "access_entries")  # noqa: B009
    return entries


def _api_cluster(response: EKSResponse) -> Cluster:
    """The cluster of an access-entry call, which only API and API_AND_CONFIG_MAP clusters serve."""
    cluster = _cluster(response.eks_backend, response._get_param("name"))
    if authentication_mode(cluster) == CONFIG_MAP:
        raise InvalidRequestException(
            clusterName=cluster.name,
            message="The cluster's authentication mode must be set to one of [API, API_AND_CONFIG_MAP] "
            "to perform this operation.",
        )
    return cluster


def _principal(response: EKSResponse) -> str:
    return unquote(str(response._get_param("principalArn") or ""))


def _entry(cluster: Cluster, principal: str) -> dict[str, Any]:
    entry = _entries(cluster).get(principal)
    if entry is None:
        raise ResourceNotFoundException(
            clusterName=cluster.name,
            message=f"The specified principalArn {principal} could not be found. You can view your available "
            "access entries with 'list-access-entries'.",
        )
    return entry


def _groups(response: EKSResponse) -> list[str]:
    groups = [str(g) for g in response._get_param("kubernetesGroups") or []]
    reserved = [g for g in groups if g.startswith("system:")]
    if reserved:
        raise InvalidParameterException(
            message=f"The kubernetes group name {reserved[0]} is invalid, it cannot start with system:"
        )
    return groups


def _default_username(principal: str) -> str:
    # A role's sessions are named by EKS; a user is itself.
    parts = principal.split(":", 5)
    if len(parts) == 6 and parts[5].startswith("role/"):
        role = parts[5].rsplit("/", 1)[-1]
        return f"arn:{parts[1]}:sts::{parts[4]}:assumed-role/{role}/{{{{SessionName}}}}"
    return principal


def _create_access_entry(self: EKSResponse) -> ActionResult:
    cluster = _api_cluster(self)
    principal = str(self._get_param("principalArn") or "")
    if not principal.startswith("arn:"):
        raise InvalidParameterException(message=f"The principalArn {principal!r} is not a valid ARN")
    entries = _entries(cluster)
    if principal in entries:
        raise ResourceInUseException(
            clusterName=cluster.name,
            nodegroupName=None,
            addonName=None,
            message="The specified access entry resource is already in use on this cluster.",
        )
    kind = self._get_param("type") or "STANDARD"
    now = datetime.now(UTC)
    entry = {
        "clusterName": cluster.name,
        "principalArn": principal,
        "kubernetesGroups": _groups(self),
        "accessEntryArn": f"{cluster.arn.replace(':cluster/', ':access-entry/')}/{principal.rsplit(':', 1)[-1]}",
        "createdAt": now,
        "modifiedAt": now,
        "tags": self._get_param("tags") or {},
        "username": self._get_param("username") or _default_username(principal),
        "type": kind,
    }
    entries[principal] = entry
    return ActionResult({"accessEntry": entry})


def _describe_access_entry(self: EKSResponse) -> ActionResult:
    cluster = _api_cluster(self)
    return ActionResult({"accessEntry": _entry(cluster, _principal(self))})


def _list_access_entries(self: EKSResponse) -> ActionResult:
    cluster = _api_cluster(self)
    return ActionResult({"accessEntries": sorted(_entries(cluster))})


def _update_access_entry(self: EKSResponse) -> ActionResult:
    cluster = _api_cluster(self)
    entry = _entry(cluster, _principal(self))
    if self._get_param("kubernetesGroups") is not None:
        entry["kubernetesGroups"] = _groups(self)
    if self._get_param("username"):
        entry["username"] = self._get_param("username")
    entry["modifiedAt"] = datetime.now(UTC)
    return ActionResult({"accessEntry": entry})


def _delete_access_entry(self: EKSResponse) -> EmptyResult:
    cluster = _api_cluster(self)
    principal = _principal(self)
    _entry(cluster, principal)
    del _entries(cluster)[principal]
    return EmptyResult()
