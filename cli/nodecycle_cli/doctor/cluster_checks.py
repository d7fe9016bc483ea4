"""The doctor's checks of cluster access: the EKS authentication mode, the functions' access entries and what
they may do (SubjectAccessReview), ``deploy/rbac.yaml`` applied, the budget ConfigMap readable."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from nodecycle_cli.doctor.findings import Finding
from nodecycle_cli.doctor.permissions import (
    BUDGET_NAME,
    NEEDS,
    Identity,
    Need,
    ReviewUnavailable,
    denied,
)
from nodecycle_cli.rbac import command as rbac_command

ACCESS_ENTRY_MODES = ("API", "API_AND_CONFIG_MAP")


def _code(error: Exception) -> str:
    response = getattr(error, "response", None) or {}
    return str(response.get("Error", {}).get("Code", ""))


def authentication_mode(eks: Any, cluster: str) -> tuple[Finding, str | None]:
    """The cluster's authentication mode, and whether access entries can work there."""
    check = "cluster.authentication-mode"
    try:
        description = eks.describe_cluster(name=cluster)["cluster"]
    except Exception as error:
        if _code(error) == "ResourceNotFoundException":
            return (
                Finding.problem(
                    check,
                    f"no EKS cluster {cluster} in {eks.meta.region_name}",
                    "the functions find the cluster's endpoint by its name (ClusterName): every drain fails",
                    "deploy the stack with the right ClusterName (sam deploy --parameter-overrides ClusterName=...)",
                ),
                None,
            )
        raise
    mode = (description.get("accessConfig") or {}).get("authenticationMode", "CONFIG_MAP")
    if mode in ACCESS_ENTRY_MODES:
        return Finding.ok(check, f"cluster {cluster}: authentication mode {mode} (access entries work)"), mode
    return (
        Finding.problem(
            check,
            f"cluster {cluster} authenticates through the aws-auth ConfigMap only (authentication mode {mode})",
            "EKS refuses access entries there: the stack's entries, which give the functions their Kubernetes "
            "groups, cannot be created (a deployment with CreateAccessEntries=true rolls back)",
            f"aws eks update-cluster-config --name {cluster} --access-config authenticationMode=API_AND_CONFIG_MAP "
            "(one way; aws-auth keeps working)",
        ),
        mode,
    )


def access_entries(
    eks: Any, cluster: str, roles: Mapping[str, str], group_prefix: str, *, stack_makes_them: bool
) -> tuple[list[Finding], list[Identity]]:
    """Each function role's access entry: present, and who it makes the function in the cluster (its own
    group, ``<KubernetesGroup>-<function>``, which deploy/rbac.yaml binds). ``stack_makes_them``: the stack's
    CreateAccessEntries, which tells an entry deleted outside the stack (a deploy does not make it again) from
    one the stack was told not to make."""
    findings, identities = [], []
    for function, role in roles.items():
        check = f"cluster.access-entry.{function}"
        kubernetes_group = f"{group_prefix}-{function}"
        try:
            entry = eks.describe_access_entry(clusterName=cluster, principalArn=role)["accessEntry"]
        except Exception as error:
            if _code(error) != "ResourceNotFoundException":
                raise
            create = (
                f"aws eks create-access-entry --cluster-name {cluster} --principal-arn {role} "
                f"--kubernetes-groups {kubernetes_group}"
            )
            refused = (
                f"the cluster does not know the {function} function: every call it makes is refused (401)"
            )
            findings.append(
                Finding.problem(
                    check,
                    f"the {function} function's role has no access entry on cluster {cluster} ({role})",
                    # the stack's own entry, deleted outside it: CloudFormation does not notice
                    f"{refused}. It was deleted outside the stack, and sam deploy does not bring it back"
                    if stack_makes_them
                    else refused,
                    create if stack_makes_them else f"{create} (or deploy with CreateAccessEntries=true)",
                )
            )
            continue
        groups = tuple(entry.get("kubernetesGroups") or ())
        identities.append(Identity(function, str(entry.get("username") or role), groups))
        if kubernetes_group not in groups:
            findings.append(
                Finding.problem(
                    check,
                    f"the {function} function's role maps to the groups {', '.join(groups) or '(none)'}, "
                    f"not {kubernetes_group}",
                    f"deploy/rbac.yaml grants the {function} function's calls to the group {kubernetes_group} only",
                    f"aws eks update-access-entry --cluster-name {cluster} --principal-arn {role} "
                    f"--kubernetes-groups {kubernetes_group}",
                )
            )
            continue
        findings.append(
            Finding.ok(check, f"the {function} function's role maps to the group {kubernetes_group}")
        )
    return findings, identities


def permissions(
    api_client: Any,
    identities: Sequence[Identity],
    namespace: str,
    budget_exists: bool | None,
    group_prefix: str,
) -> list[Finding]:
    """A SubjectAccessReview of every call each function makes."""
    findings = []
    for identity in identities:
        check = f"cluster.permissions.{identity.function}"
        needs: tuple[Need, ...] = NEEDS.get(identity.function, ())
        try:
            refused = denied(api_client, identity, needs, namespace)
        except ReviewUnavailable as why:
            findings.append(Finding.unchecked(check, f"what the {identity.function} function may do: {why}"))
            continue
        if refused:
            findings.append(
                Finding.problem(
                    check,
                    f"the {identity.function} function (groups {', '.join(identity.groups)}) may not "
                    + "; ".join(need.describe(namespace) for need in refused),
                    "those calls fail with 403 Forbidden: "
                    + "; ".join(f"{need.describe(namespace)}: {need.why}" for need in refused),
                    f"{rbac_command(namespace, group_prefix)} | kubectl apply -f - (and check that the access "
                    "entry's groups are the ones it binds)",
                )
            )
        else:
            findings.append(
                Finding.ok(check, f"the {identity.function} function may make its {len(needs)} kinds of call")
            )
    return findings


_RBAC_KINDS = {
    "ClusterRole": ("read_cluster_role", False),
    "ClusterRoleBinding": ("read_cluster_role_binding", False),
    "Role": ("read_namespaced_role", True),
    "RoleBinding": ("read_namespaced_role_binding", True),
}


def load_manifest(path: Path) -> list[dict[str, Any]]:
    import yaml

    with path.open(encoding="utf-8") as stream:
        return [doc for doc in yaml.safe_load_all(stream) if doc]


def rbac_applied(
    api_client: Any, manifest: Sequence[Mapping[str, Any]], source: str, namespace: str
) -> list[Finding]:
    """Each object of ``deploy/rbac.yaml`` exists in the cluster with the same rules, subjects and role."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    check = "cluster.rbac-applied"
    findings = _budget_namespace(manifest, source, namespace)
    rbac = client.RbacAuthorizationV1Api(api_client)
    missing, different = [], []
    for wanted in manifest:
        kind = wanted.get("kind", "")
        if kind not in _RBAC_KINDS:
            continue
        method, namespaced = _RBAC_KINDS[kind]
        meta = wanted.get("metadata") or {}
        label = (
            f"{kind} {meta.get('namespace')}/{meta.get('name')}"
            if namespaced
            else f"{kind} {meta.get('name')}"
        )
        try:
            args = (meta["name"], meta.get("namespace")) if namespaced else (meta["name"],)
            live = api_client.sanitize_for_serialization(getattr(rbac, method)(*args))
        except ApiException as error:
            if error.status == 404 and not_served(error):
                return [
                    *findings,
                    Finding.unchecked(check, "the API server does not serve rbac.authorization.k8s.io/v1"),
                ]
            if error.status == 404:
                missing.append(label)
                continue
            if error.status == 403:
                return [*findings, Finding.unchecked(check, f"you may not read {label} (403)")]
            raise
        if _essence(live) != _essence(wanted):
            different.append(label)
    if missing or different:
        what = "; ".join(
            part
            for part in (
                f"missing from the cluster: {', '.join(missing)}" if missing else "",
                f"different in the cluster: {', '.join(different)}" if different else "",
            )
            if part
        )
        findings.append(
            Finding.problem(
                check,
                f"{source} is not applied as it is: {what}",
                "the functions' groups get their permissions from these objects only",
                f"{source} | kubectl apply -f -"
                if source.startswith("nodecycle rbac")
                else f"kubectl apply -f {source}",
            )
        )
    else:
        findings.append(
            Finding.ok(check, f"{source} is applied: its {len(manifest)} objects are in the cluster")
        )
    return findings


def not_served(error: Any) -> bool:
    """A 404 for a path the API server does not serve at all (its body names no object), not for a missing
    object (whose Status names it in ``details``)."""
    import json

    try:
        body = json.loads(error.body or "")
    except (TypeError, ValueError):
        return True  # "404 page not found", in plain text
    return not (isinstance(body, dict) and (body.get("details") or {}).get("name"))


def _essence(obj: Mapping[str, Any]) -> dict[str, Any]:
    """What makes an RBAC object grant what it grants (rules, role, subjects), order and defaults aside."""

    def rule(r: Mapping[str, Any]) -> tuple[Any, ...]:
        return tuple(sorted(r.get(key) or []) for key in ("apiGroups", "resources", "resourceNames", "verbs"))

    ref = obj.get("roleRef") or {}
    return {
        "rules": sorted(rule(r) for r in obj.get("rules") or []),
        "roleRef": (ref.get("kind"), ref.get("name")),
        "subjects": sorted(
            (s.get("kind"), s.get("name"), s.get("namespace")) for s in obj.get("subjects") or []
        ),
    }


def _budget_namespace(manifest: Sequence[Mapping[str, Any]], source: str, namespace: str) -> list[Finding]:
    """A Role that grants the budget ConfigMap must be in the stack's BudgetNamespace."""
    elsewhere = sorted(
        {
            str((obj.get("metadata") or {}).get("namespace"))
            for obj in manifest
            if obj.get("kind") == "Role"
            and any(BUDGET_NAME in (r.get("resourceNames") or []) for r in obj.get("rules") or [])
            and (obj.get("metadata") or {}).get("namespace") != namespace
        }
    )
    if not elsewhere:
        return []
    return [
        Finding.problem(
            "cluster.rbac-namespace",
            f"{source} grants the budget ConfigMap in {', '.join(elsewhere)}, but the stack keeps it in {namespace} "
            "(BudgetNamespace)",
            "every budget read and write is refused (403): no drain can take a slot",
            f"set the namespace of the budget Role and RoleBinding in {source} to {namespace}, then "
            f"kubectl apply -f {source}",
        )
    ]


def budget_configmap(api_client: Any, namespace: str, group_prefix: str) -> tuple[Finding, bool | None]:
    """The budget ConfigMap reads and parses as a budget document (or does not exist yet)."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    from nodecycle.adapters.kube.budget import DATA_KEY, ConfigMapBudgetStore
    from nodecycle.domain.budget.document import BudgetFormatError
    from nodecycle.domain.budget.rules import prune

    check = "cluster.budget"
    core = client.CoreV1Api(api_client)
    store = ConfigMapBudgetStore(lambda: core, namespace)
    where = f"{namespace}/{BUDGET_NAME}"
    try:
        document = store.read()
    except BudgetFormatError as error:
        return (
            Finding.problem(
                check,
                f"ConfigMap {where} is not a budget document: {error}",
                "every drain and every sweep reads it first and fails: no node can take a slot",
                # The document's key only: a replace --force of the rendered manifest deleted the Namespace (and
                # all it held) and the functions' roles. A budget without its document is seeded again, at the
                # next write, from the drains in progress the nodes show
                f"kubectl -n {namespace} get configmap {BUDGET_NAME} -o yaml; if it is not nodecycle's, move it "
                f"away; if it is: kubectl -n {namespace} patch configmap {BUDGET_NAME} --type json -p "
                f"""'[{{"op": "remove", "path": "/data/{DATA_KEY}"}}]'""",
            ),
            True,
        )
    except ApiException as error:
        if error.status == 403:
            return Finding.unchecked(check, f"you may not read ConfigMap {where} (403)"), None
        raise
    if document is None:
        return (
            Finding.problem(
                check,
                f"ConfigMap {where} does not exist",
                "nodecycle does not create it (that would take a create permission it must not have): every "
                "drain stops at its first budget read, with an error naming it",
                f"{rbac_command(namespace, group_prefix)} | kubectl apply -f -",
            ),
            False,
        )
    # the entries that count, as budget show counts them: an expired one stays in the document until the next
    # write, and limits no one
    live = prune(document, datetime.now(UTC))
    expired = len(document.holders) + len(document.waiters) - len(live.holders) - len(live.waiters)
    gone = (
        f" (and {expired} expired entr{'y' if expired == 1 else 'ies'}, counted by no one)" if expired else ""
    )
    return (
        Finding.ok(
            check,
            f"ConfigMap {where} is a budget document: {len(live.holders)} holders, {len(live.waiters)} waiters"
            + gone,
        ),
        True,
    )
