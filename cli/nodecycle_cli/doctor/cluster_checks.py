"""The doctor's checks of cluster access: the EKS authentication mode, the functions' access entries and what
they may do (SubjectAccessReview), ``deploy/rbac.yaml`` applied, the budget ConfigMap readable."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
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
AWS_AUTH = "kube-system/aws-auth"


@dataclass(frozen=True)
class AwsAuth:
    """The roles kube-system/aws-auth maps (role ARN -> user name and groups), or why it could not be read."""

    roles: Mapping[str, tuple[str, tuple[str, ...]]] = field(default_factory=dict)
    unreadable: str = ""

    def mapping(self, role: str) -> tuple[str, tuple[str, ...]] | None:
        # (aws-auth takes a role's ARN without its path: arn:aws:iam::<account>:role/<name>)
        prefix, _, name = role.partition(":role/")
        return self.roles.get(role) or self.roles.get(f"{prefix}:role/{name.rsplit('/', 1)[-1]}")


def read_aws_auth(api_client: Any) -> AwsAuth:
    """kube-system/aws-auth's mapRoles (none if it does not exist: nothing is mapped there)."""
    import yaml
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    try:
        config_map = client.CoreV1Api(api_client).read_namespaced_config_map("aws-auth", "kube-system")
    except ApiException as error:
        if error.status == 404:
            return AwsAuth({})
        return AwsAuth({}, unreadable=f"you may not read ConfigMap {AWS_AUTH} ({error.status})")
    try:
        mappings = yaml.safe_load((config_map.data or {}).get("mapRoles") or "[]") or []
    except yaml.YAMLError as error:
        return AwsAuth({}, unreadable=f"ConfigMap {AWS_AUTH}'s mapRoles is not YAML ({error})")
    roles = {
        str(m["rolearn"]): (str(m.get("username") or m["rolearn"]), tuple(m.get("groups") or ()))
        for m in mappings
        if isinstance(m, dict) and m.get("rolearn")
    }
    return AwsAuth(roles)


def error_code(error: Exception) -> str:
    response = getattr(error, "response", None) or {}
    return str(response.get("Error", {}).get("Code", ""))


def authentication_mode(eks: Any, cluster: str) -> tuple[Finding, str | None]:
    """The cluster's authentication mode, and whether access entries can work there."""
    check = "cluster.authentication-mode"
    try:
        description = eks.describe_cluster(name=cluster)["cluster"]
    except Exception as error:
        if error_code(error) == "ResourceNotFoundException":
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
    eks: Any,
    cluster: str,
    roles: Mapping[str, str],
    group_prefix: str,
    *,
    stack_makes_them: bool,
    aws_auth: Callable[[], AwsAuth | None] = lambda: None,
    role_created: Callable[[str], datetime | None] = lambda role: None,
) -> tuple[list[Finding], list[Identity]]:
    """Each function role's access entry: present, and who it makes the function in the cluster (its own
    group, ``<KubernetesGroup>-<function>``, which deploy/rbac.yaml binds). ``stack_makes_them``: the stack's
    CreateAccessEntries, which tells an entry deleted outside the stack (a deploy does not make it again) from
    one the stack was told not to make. ``aws_auth``: kube-system/aws-auth's mappings, read when a role has no
    entry, on a cluster in API_AND_CONFIG_MAP mode (None in API mode, where EKS does not read aws-auth): EKS's
    authenticator maps a role without an entry by aws-auth there, and refuses it (401) only if aws-auth does not
    map it either. ``role_created``: when IAM says a role was created (None: not known), to tell an entry made
    for an earlier role of the same ARN, which EKS does not let the role in by (it keeps the role id)."""
    findings, identities = [], []
    read: list[AwsAuth | None] = []

    def mapped_by() -> AwsAuth | None:
        if not read:
            read.append(aws_auth())
        return read[0]

    for function, role in roles.items():
        check = f"cluster.access-entry.{function}"
        kubernetes_group = f"{group_prefix}-{function}"
        try:
            entry = eks.describe_access_entry(clusterName=cluster, principalArn=role)["accessEntry"]
        except Exception as error:
            if error_code(error) != "ResourceNotFoundException":
                raise
            create = (
                f"aws eks create-access-entry --cluster-name {cluster} --principal-arn {role} "
                f"--kubernetes-groups {kubernetes_group}"
            )
            # the stack's own entry, deleted outside it: CloudFormation does not notice
            deleted = ". It was deleted outside the stack, and sam deploy does not bring it back"
            fix = create if stack_makes_them else f"{create} (or deploy with CreateAccessEntries=true)"
            config_map = mapped_by()
            mapping = config_map.mapping(role) if config_map is not None else None
            if config_map is not None and mapping is not None:
                findings.append(_mapped_by_aws_auth(check, function, role, mapping, kubernetes_group, fix))
                if kubernetes_group in mapping[1]:
                    identities.append(Identity(function, mapping[0], mapping[1]))
                continue
            what = f"the {function} function's role has no access entry on cluster {cluster} ({role})"
            refused = (
                f"the cluster does not know the {function} function: every call it makes is refused (401)"
            )
            if config_map is not None and config_map.unreadable:
                what += f", and {AWS_AUTH} could not be read"
                refused = (
                    f"unless {AWS_AUTH} maps it (the cluster's authentication mode reads it too; "
                    f"{config_map.unreadable}), every call the {function} function makes is refused (401)"
                )
            elif config_map is not None:
                what += f" and no mapping in {AWS_AUTH}"
                refused = (
                    f"EKS knows the {function} function by neither (authentication mode API_AND_CONFIG_MAP): "
                    "every call it makes is refused (401 Unauthorized)"
                )
            findings.append(
                Finding.problem(check, what, f"{refused}{deleted}" if stack_makes_them else refused, fix)
            )
            continue
        groups = tuple(entry.get("kubernetesGroups") or ())
        stale = _made_for_an_earlier_role(check, function, cluster, role, entry, role_created(role))
        if stale is not None:
            findings.append(stale)
            continue
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


def _made_for_an_earlier_role(
    check: str, function: str, cluster: str, role: str, entry: Mapping[str, Any], created: datetime | None
) -> Finding | None:
    """The problem of an entry older than its role: made for a role of that ARN since deleted. EKS keeps the role
    id it found with the entry ("even if it has the same ARN, the access entry won't work": EKS API reference,
    AccessEntry), so the role made again is refused (401) until the entry is made again."""
    made = entry.get("createdAt")
    if created is None or not isinstance(made, datetime) or created <= made:
        return None
    groups = " ".join(entry.get("kubernetesGroups") or ())
    return Finding.problem(
        check,
        f"the {function} function's role {role} was created ({created:%Y-%m-%d %H:%M:%S}) after its access entry "
        f"on cluster {cluster} ({made:%Y-%m-%d %H:%M:%S}): the entry was made for an earlier role of that ARN",
        "EKS keeps the id of the role an entry was made for: a role deleted and made again under the same ARN is "
        f"not let in by it, and every call the {function} function makes is refused (401)",
        f"aws eks delete-access-entry --cluster-name {cluster} --principal-arn {role} && aws eks "
        f"create-access-entry --cluster-name {cluster} --principal-arn {role}"
        + (f" --kubernetes-groups {groups}" if groups else ""),
    )


def _mapped_by_aws_auth(
    check: str,
    function: str,
    role: str,
    mapping: tuple[str, tuple[str, ...]],
    kubernetes_group: str,
    fix: str,
) -> Finding:
    """A role without an access entry that aws-auth maps: it authenticates, as the groups aws-auth gives it."""
    username, groups = mapping
    what = (
        f"the {function} function's role has no access entry; {AWS_AUTH} maps it to {username}, groups "
        f"{', '.join(groups) or '(none)'}"
    )
    if kubernetes_group not in groups:
        return Finding.problem(
            check,
            what,
            f"deploy/rbac.yaml grants the {function} function's calls to the group {kubernetes_group} only: "
            "its calls are refused (403)",
            f"{fix} (an access entry wins over aws-auth for the same role)",
        )
    return Finding.warning(
        check,
        what,
        f"its calls are let in by {AWS_AUTH}, which EKS drops when the cluster moves to authentication mode "
        "API; access entries are what EKS recommends",
        fix,
    )


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
