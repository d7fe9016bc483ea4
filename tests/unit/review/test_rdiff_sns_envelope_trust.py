"""An SNS envelope on the intake queue carries nothing its message alone could not (invariant 8): what it wraps is
taken in as come by the queue, whatever its topic says. An EventBridge event in it (a Spot interruption, a lifecycle
action) is not taken for one EventBridge delivered (only AWS can put those there; anyone allowed to send to the queue
can write an envelope), so what EC2 or Auto Scaling does not confirm disrupts nothing; and its topic's account does
not vouch for the message: the message's own account is checked. (Both held when written: no defect; the TopicArn's
account is left unchecked on purpose, a hook may notify a topic of another account.)"""

from __future__ import annotations

import json

import pytest

from nodecycle.contracts.events import Home, from_sqs_body
from nodecycle.contracts.lifecycle_events import InvalidLifecycleEvent
from tests.functions.intake.test_rintake_sns import sns_wrapped
from tests.support.events import load_event

HOME = Home(account="123456789012", region="eu-west-1")


@pytest.mark.parametrize("name", ["eventbridge-spot-interruption.json", "eventbridge-terminate.json"])
def test_an_eventbridge_event_in_an_envelope_is_taken_in_as_come_by_the_queue(name: str) -> None:
    event = load_event(name)
    taken = from_sqs_body(json.dumps(sns_wrapped(event)), HOME)
    assert isinstance(taken, list)
    (received,) = taken
    assert received.delivery != "eventbridge"
    assert received.instance_id == event["detail"].get("instance-id", event["detail"].get("EC2InstanceId"))


def test_an_envelope_of_this_accounts_topic_does_not_vouch_for_another_accounts_event() -> None:
    event = {**load_event("eventbridge-terminate.json"), "account": "210987654321"}
    with pytest.raises(InvalidLifecycleEvent) as raised:
        from_sqs_body(json.dumps(sns_wrapped(event)), HOME)
    assert raised.value.reason == "wrong-account"
