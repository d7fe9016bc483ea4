"""A function role without an access entry on a cluster in API_AND_CONFIG_MAP mode: EKS's authenticator reads the
access entries first, then kube-system/aws-auth's mapRoles (access entries win for a role in both: EKS user guide,
"Migrating existing aws-auth ConfigMap entries to access entries"). So the role is refused (401) only when aws-auth
does not map it either; one aws-auth maps works with the groups aws-auth gives it. The doctor said "every call it
makes is refused (401)" of any role without an entry, whatever aws-auth said: a cluster still on aws-auth was told
it was broken, and one really broken was not told that aws-auth was the other place to look. And an entry made for
an earlier role of the same ARN (the role deleted and made again) does not let the role in either."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime, timedelta
from pathlib import Path

from botocore.exceptions import ClientError

from nodecycle_cli import cluster
from nodecycle_cli.doctor import cluster_checks
from nodecycle_cli.doctor.cluster_checks import AwsAuth
from nodecycle_cli.doctor.findings import Status
from nodecycle_sandbox.kube import KubeServer

ROLE = "arn:aws:iam::123456789012:role/nodecycle-DrainFunctionRole-X"
ROLES = {"drain": ROLE}


class NoAccessEntries:
    def describe_access_entry(self, clusterName: str, principalArn: str) -> dict[str, object]:
        raise ClientError(
            {
                "Error": {
                    "Code": "ResourceNotFoundException",
                    "Message": "The specified principalArn could not be found",
                }
            },
            "DescribeAccessEntry",
        )


def checked(aws_auth: AwsAuth | None) -> tuple[list[cluster_checks.Finding], list[cluster_checks.Identity]]:
    return cluster_checks.access_entries(
        NoAccessEntries(), "prod", ROLES, "nodecycle", stack_makes_them=True, aws_auth=lambda: aws_auth
    )


def test_a_role_aws_auth_maps_is_not_said_to_be_refused_and_its_mapping_is_checked() -> None:
    findings, identities = checked(AwsAuth({ROLE: ("drain-user", ("nodecycle-drain",))}))

    (finding,) = findings
    assert finding.status is Status.WARNING, finding
    assert "401" not in finding.why
    assert "aws-auth" in finding.what
    # (its permissions are then reviewed for the user and groups aws-auth gives it)
    assert [(i.username, i.groups) for i in identities] == [("drain-user", ("nodecycle-drain",))]


def test_a_role_aws_auth_maps_to_other_groups_is_a_problem_naming_them() -> None:
    findings, _ = checked(AwsAuth({ROLE: ("drain-user", ("system:nodes",))}))

    (finding,) = findings
    assert finding.status is Status.PROBLEM
    assert "system:nodes" in finding.what
    assert "aws-auth" in finding.what


def test_a_role_neither_an_entry_nor_aws_auth_maps_is_refused_and_both_are_named() -> None:
    findings, identities = checked(AwsAuth({}))

    (finding,) = findings
    assert finding.status is Status.PROBLEM
    assert "no access entry" in finding.what
    assert "aws-auth" in finding.what
    assert "401" in finding.why
    assert identities == []


def test_an_unreadable_aws_auth_is_named_as_what_the_401_depends_on() -> None:
    findings, _ = checked(AwsAuth({}, unreadable="you may not read ConfigMap kube-system/aws-auth (403)"))

    (finding,) = findings
    assert finding.status is Status.PROBLEM
    assert "unless" in finding.why
    assert "(403)" in finding.why


def test_in_api_mode_aws_auth_is_not_read_and_the_role_is_refused() -> None:
    findings, _ = checked(None)

    (finding,) = findings
    assert finding.status is Status.PROBLEM
    assert "401" in finding.why


def test_aws_auth_is_read_from_the_cluster(tmp_path: Path) -> None:
    config_map = f"""
apiVersion: v1
kind: ConfigMap
metadata: {{name: aws-auth, namespace: kube-system}}
data:
  mapRoles: |
    - rolearn: {ROLE}
      username: drain-user
      groups: [nodecycle-drain]
"""
    with KubeServer(tls=True) as server:
        kubeconfig = str(server.write_kubeconfig(tmp_path / "kubeconfig"))
        api_client = cluster.api_client(argparse.Namespace(kubeconfig=kubeconfig, context=None))
        assert cluster_checks.read_aws_auth(api_client) == AwsAuth({})
        server.apply(config_map)
        assert cluster_checks.read_aws_auth(api_client).roles == {ROLE: ("drain-user", ("nodecycle-drain",))}


class EntryOf:
    """EKS with the drain role's entry, made at ``made``."""

    def __init__(self, made: datetime) -> None:
        self.made = made

    def describe_access_entry(self, clusterName: str, principalArn: str) -> dict[str, object]:
        entry = {
            "principalArn": principalArn,
            "kubernetesGroups": ["nodecycle-drain"],
            "createdAt": self.made,
        }
        return {"accessEntry": entry}


def test_an_entry_made_for_an_earlier_role_of_the_same_arn_is_a_problem_made_again_by_its_fix() -> None:
    # Given the drain role's entry, made before the role was deleted and made again under the same ARN (EKS keeps
    # the earlier role's id with the entry: the role made again is refused, 401)
    made = datetime(2026, 12, 1, tzinfo=UTC)
    findings, identities = cluster_checks.access_entries(
        EntryOf(made),
        "prod",
        ROLES,
        "nodecycle",
        stack_makes_them=True,
        role_created=lambda role: made + timedelta(days=2),
    )

    # Then it is a problem, whose fix makes the entry again (with its groups); its permissions are not reviewed
    (finding,) = findings
    assert finding.status is Status.PROBLEM
    assert "401" in finding.why
    assert finding.fix == (
        f"aws eks delete-access-entry --cluster-name prod --principal-arn {ROLE} && aws eks create-access-entry "
        f"--cluster-name prod --principal-arn {ROLE} --kubernetes-groups nodecycle-drain"
    )
    assert identities == []

    # And a role older than its entry (as a deployment makes them) is fine
    findings, _ = cluster_checks.access_entries(
        EntryOf(made), "prod", ROLES, "nodecycle", stack_makes_them=True, role_created=lambda role: made
    )
    assert [f.status for f in findings] == [Status.OK]
