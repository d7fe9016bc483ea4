"""The sweeper function on moto, as the tests of this folder load it."""

from __future__ import annotations

from types import ModuleType

import pytest

from nodecycle_sandbox.aws.install import install
from tests.functions.intake.conftest import GROUP, make_group
from tests.support.functions import load_function
from tests.support.stack import Stack


@pytest.fixture
def sweeper(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    install()  # moto lacks CompleteLifecycleAction: the sandbox's emulation adds it
    monkeypatch.setenv("NODECYCLE_CLUSTER_NAME", "")  # an EIP fleet: no Kubernetes parts
    monkeypatch.setenv("NODECYCLE_EIP_MODE", "allocate")
    monkeypatch.setenv("NODECYCLE_RESUME_GRACE_SECONDS", "60")
    make_group(GROUP)
    return load_function("sweeper")
