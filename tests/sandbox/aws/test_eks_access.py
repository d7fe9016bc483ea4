"""EKS cluster access as EKS answers it: the authentication mode, and access entries only where it allows."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from nodecycle_sandbox.aws import install

REGION = "eu-west-1"
ROLE = "arn:aws:iam::123456789012:role/nodecycle-DrainFunctionRole"


@pytest.fixture
def eks() -> Iterator[Any]:
    install()
    with mock_aws():
        yield boto3.client("eks", region_name=REGION)


def cluster(eks: Any, name: str, mode: str | None = None) -> None:
    extra = {"accessConfig": {"authenticationMode": mode}} if mode else {}
    eks.create_cluster(
        name=name, roleArn="arn:aws:iam::123456789012:role/cluster", resourcesVpcConfig={}, **extra
    )


def error_of(call: Any, **kwargs: Any) -> tuple[str, str]:
    with pytest.raises(ClientError) as raised:
        call(**kwargs)
    return raised.value.response["Error"]["Code"], raised.value.response["Error"]["Message"]


def test_a_cluster_created_through_the_api_without_access_config_is_in_config_map_mode(eks: Any) -> None:
    cluster(eks, "legacy")
    assert (
        eks.describe_cluster(name="legacy")["cluster"]["accessConfig"]["authenticationMode"] == "CONFIG_MAP"
    )


def test_access_entries_are_refused_on_a_config_map_cluster(eks: Any) -> None:
    cluster(eks, "legacy")
    code, message = error_of(eks.create_access_entry, clusterName="legacy", principalArn=ROLE)
    assert code == "InvalidRequestException"
    assert "[API, API_AND_CONFIG_MAP]" in message
    assert error_of(eks.list_access_entries, clusterName="legacy")[0] == "InvalidRequestException"


def test_an_access_entry_maps_a_role_to_its_groups_and_a_session_username(eks: Any) -> None:
    # Given a cluster that takes access entries
    cluster(eks, "prod", "API_AND_CONFIG_MAP")

    # When a role gets an entry with a group
    eks.create_access_entry(clusterName="prod", principalArn=ROLE, kubernetesGroups=["nodecycle"])

    # Then it is listed and described with its groups and the username EKS gives a role's sessions
    assert eks.list_access_entries(clusterName="prod")["accessEntries"] == [ROLE]
    entry = eks.describe_access_entry(clusterName="prod", principalArn=ROLE)["accessEntry"]
    assert entry["kubernetesGroups"] == ["nodecycle"]
    assert entry["type"] == "STANDARD"
    assert entry["username"] == (
        "arn:aws:sts::123456789012:assumed-role/nodecycle-DrainFunctionRole/{{SessionName}}"
    )


def test_access_entries_refuse_duplicates_unknown_principals_and_system_groups(eks: Any) -> None:
    cluster(eks, "prod", "API")
    eks.create_access_entry(clusterName="prod", principalArn=ROLE, kubernetesGroups=["nodecycle"])

    assert (
        error_of(eks.create_access_entry, clusterName="prod", principalArn=ROLE)[0]
        == "ResourceInUseException"
    )
    other = ROLE.replace("Drain", "Sweeper")
    assert error_of(eks.describe_access_entry, clusterName="prod", principalArn=other)[0] == (
        "ResourceNotFoundException"
    )
    code, message = error_of(
        eks.create_access_entry, clusterName="prod", principalArn=other, kubernetesGroups=["system:masters"]
    )
    assert (code, "system:masters" in message) == ("InvalidParameterException", True)
    assert error_of(eks.list_access_entries, clusterName="nope")[0] == "ResourceNotFoundException"


def test_an_access_entry_can_be_updated_and_deleted(eks: Any) -> None:
    cluster(eks, "prod", "API")
    eks.create_access_entry(clusterName="prod", principalArn=ROLE, kubernetesGroups=["nodecycle"])

    eks.update_access_entry(clusterName="prod", principalArn=ROLE, kubernetesGroups=["nodecycle-drain"])
    assert eks.describe_access_entry(clusterName="prod", principalArn=ROLE)["accessEntry"][
        "kubernetesGroups"
    ] == ["nodecycle-drain"]
    eks.delete_access_entry(clusterName="prod", principalArn=ROLE)
    assert eks.list_access_entries(clusterName="prod")["accessEntries"] == []


def test_the_authentication_mode_moves_forward_only(eks: Any) -> None:
    # Given a cluster in CONFIG_MAP mode
    cluster(eks, "legacy")

    # When it moves to API_AND_CONFIG_MAP, then tries to go back
    update = eks.update_cluster_config(
        name="legacy", accessConfig={"authenticationMode": "API_AND_CONFIG_MAP"}
    )
    code, message = error_of(
        eks.update_cluster_config, name="legacy", accessConfig={"authenticationMode": "CONFIG_MAP"}
    )

    # Then the first move took and the way back is refused, as EKS does
    assert update["update"]["type"] == "AccessConfigUpdate"
    assert eks.describe_cluster(name="legacy")["cluster"]["accessConfig"]["authenticationMode"] == (
        "API_AND_CONFIG_MAP"
    )
    assert code == "InvalidParameterException"
    assert "from API_AND_CONFIG_MAP to CONFIG_MAP" in message
