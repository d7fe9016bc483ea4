"""The sweepers' schedule runs while a scenario's groups launch, as it runs in AWS whatever else happens: a launch
whose event reaches intake late (EventBridge's retries, a backlog) is kept alive and adopted by a sweep. Without it
(seed 73 scenario 1, under a load of 56 on 2 cores: intake had the launch events 55 s late), the sweeper kept four
launches alive once, from a sweep left over from the warm-up, and none came after to adopt them: Auto Scaling ended
them by their heartbeat timeout, judged a global-timeout violation of a world that had no schedule then."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from nodecycle_sandbox.chaos import world
from nodecycle_sandbox.chaos.plan import draw
from nodecycle_sandbox.chaos.world import ScenarioRun


class _Group:
    """A group whose instances come in service only once a sweep ran (the sweeper adopted their launches)."""

    def __init__(self, name: str, size: int, swept: list[str]) -> None:
        self.name = name
        self._size = size
        self._swept = swept

    def in_state(self, state: str) -> list[str]:
        return [f"i-{n}" for n in range(self._size)] if state == "InService" and self._swept else []


def test_the_sweepers_schedule_runs_while_the_groups_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a world whose sweepers' schedule is fast, and a scenario of one group
    monkeypatch.setattr(world, "SWEEP_INTERVAL", 0.05)
    monkeypatch.setattr(world, "QUIESCENCE_TIMEOUT", 3.0)
    swept: list[str] = []
    scenario = draw(73, 1)
    runners = {stack: SimpleNamespace(fire_schedule=swept.append) for stack in ("a", "b")}
    box = SimpleNamespace(
        client=lambda _service: None,
        add_group=lambda spec: _Group(spec.name, spec.size, swept),
    )
    fake_world: Any = SimpleNamespace(sandbox=box, runners=runners, runs=0)
    run = ScenarioRun(fake_world, scenario, lambda _: None)

    # When its groups launch: they come in service (no TimeoutError), because the schedule ran meanwhile
    run._launch(scenario.size)

    # Then the sweepers of the scenario's stacks were fired
    assert set(swept) == {"SweeperFunction"}
