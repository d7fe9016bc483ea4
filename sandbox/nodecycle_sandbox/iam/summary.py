"""Every permission a deployment grants, one line each: the functions' roles (every branch of the
template's conditions taken: groups by name and by tag, a VPC), the hook notification role's trust, the
EKS access entries and the cluster RBAC of ``deploy/rbac.yaml``.

``tests/sandbox/iam/permissions.yaml`` holds the reviewed summary: a test fails on any difference, so a new
``*`` resource, a new action or verb, or a lost condition is seen and reviewed. Print the current summary
with ``python -m nodecycle_sandbox.iam.summary [ROOT]``.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from nodecycle_sandbox.iam.template import StaticResources, access_entries, offline_roles
from nodecycle_sandbox.runner.cfn_yaml import load_template
from nodecycle_sandbox.runner.intrinsics import Intrinsics

# Every conditional statement of the template is in force with these.
EVERY_BRANCH = {
    "ClusterName": "prod",
    "ManagedGroups": "nodes-a,nodes-b",
    "ManagedByTag": "true",
    "RetiringGroups": "nodes-old",
    "SubnetIds": "subnet-1,subnet-2",
    "SecurityGroupIds": "sg-1",
}


def summarize(root: Path) -> dict[str, Any]:
    template = load_template(root / "template.yaml")
    roles = offline_roles(template, EVERY_BRANCH)
    aws = {
        logical_id: {
            "trust": [_statement(s) for s in _statements(role["trust"])],
            "policies": [
                _statement(s) for policy in role["policies"] for s in _statements(policy["document"])
            ],
        }
        for logical_id, role in sorted(roles.items())
    }
    resources = StaticResources(template, stack_name="nodecycle", region="eu-west-1", account="123456789012")
    resources.intrinsics = Intrinsics(
        template,
        resources=resources,
        stack_name="nodecycle",
        region="eu-west-1",
        account="123456789012",
        parameters=EVERY_BRANCH,
    )
    entries = {
        entry["principal_arn"].rsplit("/", 1)[-1]: sorted(entry["groups"])
        for entry in access_entries(template, resources.intrinsics, resources)
    }
    return {"aws": aws, "access_entries": entries, "kubernetes": _rbac(root / "deploy" / "rbac.yaml")}


def _statements(document: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    if not document:
        return []
    raw = document["Statement"]
    return [raw] if isinstance(raw, Mapping) else list(raw)


def _list(value: Any) -> list[str]:
    return sorted([value] if isinstance(value, str) else value)


def _statement(statement: Mapping[str, Any]) -> str:
    parts = [str(statement["Effect"])]
    if "Principal" in statement:
        principal = statement["Principal"]
        parts.append(
            "principal "
            + (
                principal
                if isinstance(principal, str)
                else yaml.safe_dump(principal, default_flow_style=True).strip()
            )
        )
    key = "NotAction" if "NotAction" in statement else "Action"
    parts.append(("not " if key == "NotAction" else "") + ",".join(_list(statement[key])))
    for key in ("Resource", "NotResource"):
        if key in statement:
            parts.append(("on not " if key == "NotResource" else "on ") + " ".join(_list(statement[key])))
    for operator, keys in sorted((statement.get("Condition") or {}).items()):
        for name, values in sorted(keys.items()):
            parts.append(
                f"if {operator} {name}={','.join(_list(values if isinstance(values, list) else str(values)))}"
            )
    return " ".join(parts)


def _rbac(path: Path) -> dict[str, list[str]]:
    """What each subject may do: ``<scope> <apiGroups> <resources>[ names] <verbs>``, per binding."""
    documents = [d for d in yaml.safe_load_all(path.read_text()) if d]
    roles = {
        (d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]): d
        for d in documents
        if d["kind"] in ("Role", "ClusterRole")
    }
    grants: dict[str, list[str]] = {}
    for binding in documents:
        if binding["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        namespace = binding["metadata"].get("namespace", "")
        ref = binding["roleRef"]
        role = roles[(ref["kind"], namespace if ref["kind"] == "Role" else "", ref["name"])]
        scope = f"namespace {namespace}" if binding["kind"] == "RoleBinding" else "cluster"
        for subject in binding.get("subjects") or []:
            lines = grants.setdefault(f"{subject['kind']} {subject['name']}", [])
            for rule in role.get("rules") or []:
                names = (
                    f" names={','.join(sorted(rule['resourceNames']))}" if rule.get("resourceNames") else ""
                )
                groups = ",".join(f'"{g}"' for g in sorted(rule.get("apiGroups") or []))
                resources = ",".join(sorted(rule.get("resources") or rule.get("nonResourceURLs") or []))
                lines.append(f"{scope} {groups} {resources}{names} {','.join(sorted(rule['verbs']))}")
    others = sorted(
        f"{d['kind']} {d['metadata'].get('namespace', '')}/{d['metadata']['name']}".replace(" /", " ")
        for d in documents
        if d["kind"] not in ("Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding")
    )
    return {**{k: sorted(v) for k, v in sorted(grants.items())}, "objects": others}


def dump(summary: Mapping[str, Any]) -> str:
    return yaml.safe_dump(dict(summary), sort_keys=False, width=200)


if __name__ == "__main__":
    sys.stdout.write(dump(summarize(Path(sys.argv[1]) if len(sys.argv) > 1 else Path.cwd())))
