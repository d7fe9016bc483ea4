"""The permissions a deployment grants, read from template.yaml and deploy/rbac.yaml: exactly the reviewed
ones (tests/sandbox/iam/permissions.yaml), none added by SAM, and no nodecycle identity that can create
anything in the cluster but evictions."""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from nodecycle_cli.rbac import render
from nodecycle_sandbox.iam.policy import PolicyError
from nodecycle_sandbox.iam.summary import dump, summarize

ROOT = Path(__file__).resolve().parents[3]
REVIEWED = Path(__file__).with_name("permissions.yaml")


def test_the_permissions_are_exactly_the_reviewed_ones() -> None:
    # A new "*" resource, a new action or verb, a lost condition: any difference fails here. After a review,
    # write the new summary with: python -m nodecycle_sandbox.iam.summary > tests/sandbox/iam/permissions.yaml
    current = dump(summarize(ROOT))
    reviewed = REVIEWED.read_text()
    diff = "\n".join(
        difflib.unified_diff(reviewed.splitlines(), current.splitlines(), "reviewed", "template")
    )
    assert current == reviewed, f"the deployment's permissions changed:\n{diff}"


def test_the_summary_sees_a_widened_permission() -> None:
    # Given the template with one resource widened to "*" and one condition dropped
    summary = summarize(ROOT)
    text = (ROOT / "template.yaml").read_text()
    widened = text.replace(
        'Resource: !Sub "arn:${AWS::Partition}:eks:${AWS::Region}:${AWS::AccountId}:cluster/${ClusterName}"',
        'Resource: "*"',
        1,
    )
    unconditioned = text.replace("                    ec2:CreateAction: AllocateAddress\n", "", 1)
    assert text not in (widened, unconditioned)

    # Then each summary differs from the reviewed one where the permission grew
    drain = summarize_text(widened)["aws"]["DrainFunctionRole"]["policies"]
    assert "Allow eks:DescribeCluster on *" in drain
    assert drain != summary["aws"]["DrainFunctionRole"]["policies"]
    eip = summarize_text(unconditioned)["aws"]["EipFunctionRole"]["policies"]
    assert set(eip) - set(summary["aws"]["EipFunctionRole"]["policies"]) == {
        "Allow ec2:CreateTags on arn:aws:ec2:eu-west-1:123456789012:elastic-ip/* "
        "if StringEquals aws:RequestTag/nodecycle:owner=nodecycle"
    }


def summarize_text(template: str) -> dict[str, Any]:
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        (root / "deploy").mkdir()
        (root / "template.yaml").write_text(template)
        (root / "deploy" / "rbac.yaml").write_text((ROOT / "deploy" / "rbac.yaml").read_text())
        return summarize(root)


def test_sam_adds_no_role_or_policy_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    from samtranslator.translator.transform import transform  # type: ignore[import-untyped]
    from samtranslator.yaml_helper import yaml_parse  # type: ignore[import-untyped]

    # Given the template as SAM transforms it for CloudFormation (code locations made S3-like)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    text = re.sub(
        r"CodeUri: functions/\w+/", "CodeUri: s3://bucket/code", (ROOT / "template.yaml").read_text()
    )
    text = text.replace("ContentUri: layers/", "ContentUri: s3://bucket/layer")

    class NoManagedPolicies:
        def load(self) -> dict[str, str]:
            return {}

    resources = transform(yaml_parse(text), {}, NoManagedPolicies())["Resources"]

    # Then the IAM resources are the template's own, with no managed policy attached anywhere
    iam = {name: r for name, r in resources.items() if r["Type"].startswith("AWS::IAM::")}
    declared = yaml.safe_load(re.sub(r"!\w+", "", (ROOT / "template.yaml").read_text()))["Resources"]
    assert set(iam) == {name for name, r in declared.items() if r["Type"].startswith("AWS::IAM::")}
    assert not [name for name, r in iam.items() if r["Properties"].get("ManagedPolicyArns")]
    functions = [r for r in resources.values() if r["Type"] == "AWS::Lambda::Function"]
    assert all("Fn::GetAtt" in f["Properties"]["Role"] for f in functions)


def test_deploy_rbac_yaml_is_the_rendering_with_the_template_defaults() -> None:
    assert (ROOT / "deploy" / "rbac.yaml").read_text() == render()


def test_rendering_for_another_namespace_moves_every_namespaced_object() -> None:
    documents = [d for d in yaml.safe_load_all(render("platform", "nc")) if d]
    namespaced = [d for d in documents if d["kind"] in ("ConfigMap", "Role", "RoleBinding")]
    # (but the read of the kubelets' Leases, which live in kube-node-lease whatever the stack's namespace)
    leases = [d for d in namespaced if d["metadata"]["namespace"] == "kube-node-lease"]
    assert [(d["kind"], d["metadata"]["name"]) for d in leases] == [
        ("Role", "nc-drain-node-leases"),
        ("RoleBinding", "nc-drain-node-leases"),
    ]
    assert {d["metadata"]["namespace"] for d in namespaced if d not in leases} == {"platform"}
    assert [d["metadata"]["name"] for d in documents if d["kind"] == "Namespace"] == ["platform"]
    subjects = {s["name"] for d in documents for s in d.get("subjects") or []}
    assert subjects == {"nc-drain", "nc-sweeper"}
    with pytest.raises(ValueError, match="not a valid namespace"):
        render("Kube_System")


def test_no_nodecycle_identity_may_create_anything_but_evictions_and_events_nor_use_wildcards() -> None:
    for document in yaml.safe_load_all((ROOT / "deploy" / "rbac.yaml").read_text()):
        for rule in (document or {}).get("rules") or []:
            for field in ("apiGroups", "resources", "verbs", "resourceNames"):
                assert "*" not in (rule.get(field) or []), rule
            assert not {"escalate", "bind", "impersonate", "deletecollection"} & set(rule["verbs"]), rule
            if "create" in rule["verbs"]:  # Events: what kubectl describe shows of each decision
                assert rule["resources"] in (["pods/eviction"], ["events"]), rule


def test_every_function_role_trusts_only_lambda() -> None:
    for name, role in summarize(ROOT)["aws"].items():
        if name.endswith("FunctionRole"):
            assert role["trust"] == ["Allow principal {Service: lambda.amazonaws.com} sts:AssumeRole"]


@pytest.mark.parametrize(
    ("added", "refusal"),
    [
        (
            "      AccessPolicies:\n"
            "        - PolicyArn: arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy\n"
            "          AccessScope: { Type: cluster }\n",
            "access policies",
        ),
        ("      Type: EC2_LINUX\n", "type EC2_LINUX"),
    ],
    ids=["access-policy", "node-type"],
)
def test_what_an_access_entry_grants_outside_rbac_is_refused_not_ignored(added: str, refusal: str) -> None:
    # Given the drain function's access entry given an EKS access policy (AmazonEKSClusterAdminPolicy: cluster-admin,
    # whatever deploy/rbac.yaml says), or made a node's (EKS maps an EC2_LINUX entry to system:nodes, the node
    # authorizer's, whatever groups it names)
    text = (ROOT / "template.yaml").read_text()
    entry = '      KubernetesGroups: [!Sub "${KubernetesGroup}-drain"]\n      Type: STANDARD\n'
    assert text.count(entry) == 1
    granted = text.replace(
        entry, entry + added if "AccessPolicies" in added else entry.replace("      Type: STANDARD\n", added)
    )

    # Then the sandbox refuses to read it, as it refuses a managed policy: it neither evaluates access policies nor
    # shows them in the reviewed summary, so the drain role would reach what no test sees
    with pytest.raises(PolicyError, match=refusal):
        summarize_text(granted)
