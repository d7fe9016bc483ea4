"""The inline invoker's environment: each invocation sees its function's variables in ``os.environ``, and only those
are put back afterwards. The invocation runs on a runner thread while the test process goes on (pytest sets and
pops ``PYTEST_CURRENT_TEST`` at each phase of each test): clearing the whole environment and writing back a copy
taken before removed what the process set meanwhile, and pytest's pop at a teardown met a KeyError (CI at 0bfa0d6..
e5cd518: test_dead_letters, an earlier test's retried intake invocation still running)."""

from __future__ import annotations

import os

import pytest

from nodecycle_sandbox.runner.invokers import _environ


def test_an_invocation_puts_back_its_own_variables_and_leaves_what_the_process_set_meanwhile(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a variable of the process the function's environment overrides, and one it adds
    monkeypatch.setenv("NODECYCLE_TEST_SHARED", "process")
    monkeypatch.delenv("NODECYCLE_TEST_ADDED", raising=False)
    monkeypatch.delenv("NODECYCLE_TEST_MEANWHILE", raising=False)

    # When an invocation runs with them while the process sets another variable
    with _environ({"NODECYCLE_TEST_SHARED": "function", "NODECYCLE_TEST_ADDED": "function"}):
        assert os.environ["NODECYCLE_TEST_SHARED"] == "function"
        assert os.environ["NODECYCLE_TEST_ADDED"] == "function"
        os.environ["NODECYCLE_TEST_MEANWHILE"] = "process"

    # Then the function's variables are as before it, and the process's own is still there
    assert os.environ["NODECYCLE_TEST_SHARED"] == "process"
    assert "NODECYCLE_TEST_ADDED" not in os.environ
    assert os.environ.pop("NODECYCLE_TEST_MEANWHILE") == "process"
