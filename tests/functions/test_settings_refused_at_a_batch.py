"""A work function whose settings are refused reads them at its first record, not at its cold start (the drain
function defers them to keep its cold start short). Taken for that record's failure, the refusal became
``BatchFailed: all 1 records of the batch failed``: Lambda's error for the invocation named no setting (the
settings' message only in a traceback of the log), and whoever watches invocations for a settings error (the
sandbox's wait for launches) waited out every redelivery. It fails the invocation itself now, naming the setting:
SQS delivers the batch again as it would after any failed invocation."""

from __future__ import annotations

from types import ModuleType

import pytest

from nodecycle.domain.model import Step
from nodecycle.domain.ports.lifecycle import WorkMessage
from nodecycle.settings import SettingsError
from tests.support.events import sqs_event
from tests.support.functions import LambdaContext, load_function
from tests.support.stack import Stack


@pytest.fixture
def drain_fn(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    # a selector the template takes (it has no pattern for it) and the drain function's settings refuse
    monkeypatch.setenv("NODECYCLE_BUDGET_NODE_SELECTOR", "tier in (a")
    return load_function("drain")


def test_a_drain_function_whose_settings_are_refused_fails_its_invocation_naming_the_setting(
    drain_fn: ModuleType,
) -> None:
    # Given a work message of a lifecycle
    body = WorkMessage(record_id="i-0aaaaaaaaaaaaaaa1/terminate/token", seq=0, step=Step.ACQUIRE_SLOT)

    # When the drain function takes it, its settings refused
    with pytest.raises(SettingsError) as refused:
        drain_fn.handler(sqs_event(body.model_dump_json()), LambdaContext())

    # Then the invocation fails with the settings' error, which names the setting and what is wrong with it
    assert str(refused.value) == (
        "invalid nodecycle settings: NODECYCLE_BUDGET_NODE_SELECTOR: not a label selector the API server would "
        "accept: 'tier in (a'"
    )
