"""A moto server and tiny throwaway templates and handlers for the runner."""

from __future__ import annotations

import textwrap
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Literal

import pytest

from nodecycle_sandbox.aws.server import MotoServer
from nodecycle_sandbox.runner import Runner

REGION = "eu-west-1"

MakeRunner = Callable[..., Runner]


@pytest.fixture(scope="session")
def moto_url() -> Iterator[str]:
    server = MotoServer()
    yield server.start()
    server.stop()


@pytest.fixture
def make_runner(moto_url: str, tmp_path: Path) -> Iterator[MakeRunner]:
    """Write a template and handler files into tmp_path, start a runner on them; stopped after the test."""
    runners: list[Runner] = []

    def make(
        template: str,
        handlers: dict[str, str],
        *,
        mode: Literal["process", "inline"] = "inline",
        **options: object,
    ) -> Runner:
        (tmp_path / "template.yaml").write_text(textwrap.dedent(template))
        for name, code in handlers.items():
            folder = tmp_path / "functions" / name
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "app.py").write_text(textwrap.dedent(code))
        # (these templates compress time: queues whose visibility timeout is shorter than their function's
        # timeout, which Lambda refuses (aws/lambda_mappings.py) and a compressed sandbox allows; a test of what
        # the strict one refuses says min_values=True)
        options.setdefault("min_values", False)
        runner = Runner(
            template=tmp_path / "template.yaml",
            endpoint_url=moto_url,
            region=REGION,
            stack_name="t",
            mode=mode,
            **options,  # type: ignore[arg-type]
        )
        runners.append(runner)
        return runner.start()

    yield make
    for runner in runners:
        runner.stop()
    urllib.request.urlopen(urllib.request.Request(f"{moto_url}/moto-api/reset", method="POST")).close()
