"""A container of the sandbox whose environment compresses time sleeps that fraction of botocore's backoff between
retries, and nothing else changes: the same retries of the same attempts."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from botocore.retries.standard import ExponentialBackoff
from urllib3.connectionpool import HTTPConnectionPool

from nodecycle_sandbox.runner.faults import BACKOFF_SCALE_VARIABLE, WorkerFaults


@pytest.fixture
def backoff_restored(monkeypatch: pytest.MonkeyPatch) -> None:
    """(a container's hooks are installed for its whole process: put back after the test)"""
    monkeypatch.setattr(ExponentialBackoff, "delay_amount", ExponentialBackoff.delay_amount)
    monkeypatch.setattr(HTTPConnectionPool, "urlopen", HTTPConnectionPool.urlopen)


def longest_sleeps() -> list[float]:
    backoff = ExponentialBackoff(random=lambda: 1.0)
    return [backoff.delay_amount(SimpleNamespace(attempt_number=n)) for n in range(1, 5)]  # type: ignore[arg-type]


@pytest.mark.usefixtures("backoff_restored")
def test_a_container_told_a_scale_sleeps_that_fraction_of_each_backoff(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(BACKOFF_SCALE_VARIABLE, "0.05")
    WorkerFaults().install()
    assert longest_sleeps() == pytest.approx([0.05, 0.1, 0.2, 0.4])


@pytest.mark.usefixtures("backoff_restored")
def test_a_container_told_nothing_sleeps_botocores_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(BACKOFF_SCALE_VARIABLE, raising=False)
    WorkerFaults().install()
    assert longest_sleeps() == [1.0, 2.0, 4.0, 8.0]
