"""Fixtures every test can use: a clean AWS-like environment, moto with the stack's resources, settings."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from pathlib import Path

import botocore.loaders
import botocore.session
import pytest
from moto import mock_aws

from nodecycle.observability import logger, metrics
from tests.support import durations
from tests.support.stack import Stack, create_stack

REGION = "eu-west-1"
TESTS = Path(__file__).resolve().parent
# Each folder is one level of the suite (tests/README.md): its marker selects it (`pytest -m unit`).
LEVELS = ("unit", "contracts", "functions", "integration", "sandbox", "campaign", "benchmarks")


# Each file's time in the last whole run: the files go out longest first (tests/support/durations.py)
DURATIONS = TESTS / "durations.json"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--record-durations",
        action="store_true",
        help=f"write each test file's time in this run into {DURATIONS.relative_to(TESTS.parent)} (make durations)",
    )
    parser.addoption(
        "--kill-points",
        choices=("sample", "all"),
        default="sample",
        help="the crash tests' kill points: a sample (each kind of call's first, each kind of write's last too) "
        "or every call a lifecycle makes (make test-crash)",
    )


def pytest_configure(config: pytest.Config) -> None:
    # pytest-xdist (3.x) hands out `--dist loadfile`'s files by their number of tests, most first, unless told
    # not to: the one-test files, the longest of the suite among them (the crash recovery's, the lost intake's,
    # the stalled queue's), went out among the last 35 of 184, and the run ended with one worker alone on them.
    # The order below is the one wanted.
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False
    if config.getoption("record_durations") and not hasattr(config, "workerinput"):
        config.pluginmanager.register(durations.Recorder(DURATIONS, TESTS), "nodecycle-durations")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        level = item.path.relative_to(TESTS).parts[0]
        if level in LEVELS:
            item.add_marker(level)
    # The longest files first: `pytest -n N --dist loadfile` hands files out in this order, and a long file handed
    # out last runs alone at the end while the other workers idle (3 minutes of a whole-suite run's 12 when the
    # files went out as collected). A stable sort: each file's tests keep their order.
    names = {item.path: item.path.relative_to(TESTS).as_posix() for item in items}
    slow = {names[item.path] for item in items if item.get_closest_marker("slow")}
    expected = durations.estimates(set(names.values()), durations.load(DURATIONS), slow)
    items.sort(key=lambda item: -expected[names[item.path]])


# botocore parses a service's model (JSON: 4 MB for EC2) once per session, and moto starts each test with a new
# default session (boto3.DEFAULT_SESSION = None), as the wiring's cache, cleared after each test, makes new clients:
# every test parsed the models of every service it touched again. One loader serves every session of the run;
# the models are data, and credentials, regions and clients stay each session's own.
_LOADER = botocore.loaders.create_loader()


def _shared_loader(search_path_string: str | None = None) -> botocore.loaders.Loader:
    return botocore.loaders.create_loader(search_path_string) if search_path_string else _LOADER


botocore.session.create_loader = _shared_loader


class _CurrentStdout:
    """Powertools' log handler keeps the stream it was created with; tests capture a new one each time."""

    def write(self, text: str) -> int:
        return sys.stdout.write(text)

    def flush(self) -> None:
        sys.stdout.flush()


handler = logger.registered_handler
assert isinstance(handler, logging.StreamHandler)
handler.setStream(_CurrentStdout())

BASE_SETTINGS = {
    "NODECYCLE_OWNER_ID": "stack-a",
    "NODECYCLE_CLUSTER_NAME": "sandbox",
    "NODECYCLE_MANAGED_GROUPS": "nodes-general",
}


@pytest.fixture(autouse=True)
def no_metrics_of_other_tests() -> None:
    """Powertools keeps the metrics added outside a handler (a test that drives the domain or the wiring
    directly) until a handler flushes them: the next test's handler would print them as its own. In Lambda
    every metric is added inside the handler, which flushes them all."""
    metrics.clear_metrics()


@pytest.fixture(autouse=True)
def aws_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fake credentials and a region, never a real endpoint; powertools quiet and without X-Ray."""
    for name in ("AWS_ENDPOINT_URL", "AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_REGION", REGION)
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "true")
    monkeypatch.setenv("POWERTOOLS_SERVICE_NAME", "nodecycle")
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", "NodeCycle")
    # moto builds some 130,000 stock AMIs with each EC2 backend (at every mock_aws start and reset): most of the
    # functions tests' CPU. No test needs them: EC2 accepts any image id (moto validates none by default).
    monkeypatch.setenv("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")


@pytest.fixture
def stack(monkeypatch: pytest.MonkeyPatch) -> Iterator[Stack]:
    """moto with the lifecycle table and the queues, and settings pointing at them."""
    with mock_aws():
        created = create_stack()
        for name, value in {**BASE_SETTINGS, **created.env()}.items():
            monkeypatch.setenv(name, value)
        yield created


@pytest.fixture(autouse=True)
def fresh_containers() -> Iterator[None]:
    """Every test starts like a cold Lambda container: settings and services are built again."""
    yield
    for name, module in list(sys.modules.items()):
        if name.startswith("nodecycle.wiring"):
            for value in vars(module).values():
                if callable(getattr(value, "cache_clear", None)) and getattr(value, "__module__", "") == name:
                    value.cache_clear()
