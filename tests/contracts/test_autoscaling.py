"""Auto Scaling's lifecycle actions: FakeAutoscaling (the unit tests') and AutoscalingActions on moto with the
sandbox's lifecycle emulation (what moto lacks, as AWS answers it) answer alike.

What the domain relies on: an active action takes heartbeats and one completion; any other call finds no
active action (False, never an error): a token Auto Scaling never issued, or issued for another instance, hook
or group, an action completed, or timed out (its heartbeat timeout after its start or last heartbeat, never
past its global timeout); an adopted lifecycle names its action by instance alone, and a completion too (it
settles the action the hook named holds for the instance, whatever the token). A confirmation is a
heartbeat and a look at where the instance is: True only while it waits in the state its action's transition
holds it in, a TransientError while the state read still lags that wait state, False otherwise. A hook, a
group's hooks and tags of a group Auto Scaling does not know are none; the instances hooks hold are listed by
group name and by owner tag.

The emulation's clock moves only as a test moves it (``Side.advance``), so that a case does not depend on how
long the machine takes between two calls."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import pytest
from moto import mock_aws

from nodecycle.adapters.aws.autoscaling import AutoscalingActions
from nodecycle.domain.catalog import OWNER_TAG
from nodecycle.domain.errors import TransientError
from nodecycle.domain.model import WARM_POOL, ActionRef, Transition, adopted_token
from nodecycle.domain.policy import ActionResult
from nodecycle.domain.ports.lifecycle import Autoscaling, Hook, WaitingInstance
from nodecycle_sandbox.aws import AwsControl, install, lifecycle
from nodecycle_sandbox.aws.group import AutoScalingGroup, GroupSpec, HookSpec
from tests.contracts.conftest import REGION, aws
from tests.sandbox.aws.conftest import FakeNodes, RecordingBus
from tests.support.fakes import FakeAutoscaling, FakeClock

HEARTBEAT = 300  # seconds: the hooks' heartbeat timeout
GLOBAL = 100 * HEARTBEAT  # Auto Scaling's global timeout: 100 heartbeat timeouts (at most 48 hours)
OWNER = "stack-a"
TERMINATING = Transition.TERMINATING


@dataclass
class Held:
    """An action a hook holds, and what a test names wrongly beside it."""

    action: ActionRef
    other_instance: str  # an instance of the group no hook holds
    other_hook: ActionRef  # the instance's action under the group's other terminate hook


class Side(Protocol):
    port: Autoscaling
    group: str

    def hold(self) -> Held: ...

    def advance(self, seconds: float) -> None: ...

    def now(self) -> datetime: ...

    def lag(self, instance_id: str) -> None:
        """DescribeAutoScalingInstances still says the instance is ``Terminating``, not yet in the wait state
        Auto Scaling announced it in (a read that lags the notification)."""
        ...


class FakeSide(Side):
    def __init__(self, heartbeat: int = HEARTBEAT) -> None:
        self.clock = FakeClock()
        self.fake = FakeAutoscaling(issued={}, clock=self.clock, action_timeout=heartbeat)
        self.port = self.fake
        self.group = "workers"
        for name in ("drain", "eip"):
            self.fake.hooks[(self.group, name)] = Hook(Transition.TERMINATING, heartbeat)
        self.fake.tags[self.group] = {OWNER_TAG: OWNER}
        self._instances = (f"i-{n:017x}" for n in range(1, 100))

    def hold(self) -> Held:
        victim, other = next(self._instances), next(self._instances)
        actions = []
        for hook in ("drain", "eip"):
            token = str(uuid.uuid4())
            self.fake.issue(token, victim, at=self.clock.now(), hook=(self.group, hook))
            actions.append(
                ActionRef(
                    group=self.group, hook=hook, instance_id=victim, token=token, transition=TERMINATING
                )
            )
        self.fake.waiting.append(
            WaitingInstance(
                group=self.group,
                group_tags={OWNER_TAG: OWNER},
                instance_id=victim,
                transition=Transition.TERMINATING,
                origin=None,
                destination=None,
            )
        )
        return Held(actions[0], other, actions[1])

    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    def now(self) -> datetime:
        return self.clock.now()

    def lag(self, instance_id: str) -> None:
        self.fake.states[instance_id] = "Terminating"


class Emulation(Side):
    """The lifecycle emulation, its clock moved by the test alone (as its own tests do: no timer fires
    meanwhile, and no time passes between two calls however long the machine takes over them)."""

    def __init__(
        self,
        control: AwsControl,
        bus: RecordingBus,
        monkeypatch: pytest.MonkeyPatch,
        heartbeat: int = HEARTBEAT,
    ) -> None:
        self.control = control
        self.seconds = time.time()
        monkeypatch.setattr(lifecycle, "time", self)
        self.autoscaling = aws("autoscaling")
        self.group = f"workers-{uuid.uuid4().hex[:8]}"
        self.asg = AutoScalingGroup(
            autoscaling=self.autoscaling, ec2=aws("ec2"), control=control, region=REGION, name=self.group
        )
        hooks = tuple(
            HookSpec(name, "autoscaling:EC2_INSTANCE_TERMINATING", heartbeat, "CONTINUE")
            for name in ("drain", "eip")
        )
        self.asg.create(GroupSpec(name=self.group, size=0, hooks=hooks, tags={OWNER_TAG: OWNER}))
        self.port = AutoscalingActions(self.autoscaling)
        self.bus = bus

    def time(self) -> float:
        return self.seconds

    def hold(self) -> Held:
        self.asg.set_desired(len(self.asg.instances()) + 2)
        victim, other = sorted(self.asg.in_state("InService"))[-2:]
        self.asg.terminate(victim)
        tokens = {a.hook: a.token for a in self.asg.actions() if a.instance_id == victim}
        named = [
            ActionRef(
                group=self.group, hook=hook, instance_id=victim, token=tokens[hook], transition=TERMINATING
            )
            for hook in ("drain", "eip")
        ]
        return Held(named[0], other, named[1])

    def advance(self, seconds: float) -> None:
        self.seconds += seconds

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.seconds, UTC)

    def lag(self, instance_id: str) -> None:
        found = self.control.emulator.find_state(instance_id)
        assert found is not None
        found[1].lifecycle_state = "Terminating"


@pytest.fixture(scope="module")
def emulation() -> Iterator[tuple[AwsControl, RecordingBus]]:
    install()
    with mock_aws():
        control = AwsControl(region=REGION)
        bus = RecordingBus()
        control.connect(events=bus, nodes=FakeNodes())
        yield control, bus
        control.close()


@pytest.fixture(params=["fake", "emulation"])
def side(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Side:
    return make_side(request, monkeypatch)


@pytest.fixture(params=["fake", "emulation"])
def side_of_an_hour(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Side:
    """A side whose hooks' heartbeat timeout is an hour: 100 of them pass Auto Scaling's 48-hour cap."""
    return make_side(request, monkeypatch, heartbeat=3600)


def make_side(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, heartbeat: int = HEARTBEAT
) -> Side:
    if request.param == "fake":
        return FakeSide(heartbeat)
    control, bus = request.getfixturevalue("emulation")
    return Emulation(control, bus, monkeypatch, heartbeat)


def named(action: ActionRef, **changes: Any) -> ActionRef:
    return action.model_copy(update=changes)


# -- the action's life ----------------------------------------------------------------------------------


def test_an_active_action_takes_heartbeats_and_one_completion(side: Side) -> None:
    held = side.hold()
    assert side.port.heartbeat(held.action)
    assert side.port.heartbeat(held.action)
    assert side.port.complete(held.action, ActionResult.CONTINUE)
    # completed: no active action any more, for a completion (its own retry included) or a heartbeat
    assert not side.port.complete(held.action, ActionResult.CONTINUE)
    assert not side.port.complete(held.action, ActionResult.ABANDON)
    assert not side.port.heartbeat(held.action)


def test_the_other_hooks_action_of_the_instance_is_its_own(side: Side) -> None:
    held = side.hold()
    assert side.port.complete(held.action, ActionResult.CONTINUE)
    assert side.port.heartbeat(held.other_hook)  # still active: another hook's action
    assert side.port.complete(held.other_hook, ActionResult.ABANDON)


def test_a_termination_abandoned_ends_the_other_hooks_action_of_the_instance(side: Side) -> None:
    # Given an instance two terminate hooks hold
    held = side.hold()

    # When one hook's action is completed with ABANDON
    assert side.port.complete(held.action, ActionResult.ABANDON)

    # Then the instance goes at once: "ABANDON ... stops any remaining actions, such as other lifecycle hooks"
    # (AWS), so the other hook's action is over too
    assert not side.port.heartbeat(held.other_hook)
    assert not side.port.complete(held.other_hook, ActionResult.CONTINUE)


def _named_wrongly(held: Held, wrong: str) -> ActionRef:
    return {
        "token": named(held.action, token=str(uuid.uuid4())),
        "instance": named(held.action, instance_id=held.other_instance),
        "hook": named(held.action, hook="no-such-hook"),
        "group": named(held.action, group="no-such-group"),
        "hook-of-the-other-action": named(held.action, hook=held.other_hook.hook),
    }[wrong]


@pytest.mark.parametrize("wrong", ["token", "instance", "hook", "group", "hook-of-the-other-action"])
def test_an_action_named_wrongly_is_no_active_action(side: Side, wrong: str) -> None:
    held = side.hold()
    action = _named_wrongly(held, wrong)

    assert not side.port.heartbeat(action)
    if wrong in ("instance", "hook", "group"):  # (what a completion names: the next test for the others)
        assert not side.port.complete(action, ActionResult.CONTINUE)
    assert side.port.heartbeat(held.action)  # which left the real one active


@pytest.mark.parametrize("wrong", ["token", "hook-of-the-other-action"])
def test_a_completion_settles_the_action_the_hook_named_holds_for_the_instance_whatever_the_token(
    side: Side, wrong: str
) -> None:
    # (a completion names the instance alone, so that the action settled is the instance's whatever the token
    # is: see AutoscalingActions.complete)
    held = side.hold()
    action = _named_wrongly(held, wrong)
    settled, left = (held.action, held.other_hook) if wrong == "token" else (held.other_hook, held.action)

    assert side.port.complete(action, ActionResult.CONTINUE)
    assert not side.port.heartbeat(settled)
    assert side.port.heartbeat(left)


def test_an_adopted_lifecycle_names_its_action_by_instance(side: Side) -> None:
    held = side.hold()
    adopted = named(held.action, token=adopted_token(held.action.hook))
    assert side.port.heartbeat(adopted)
    assert not side.port.heartbeat(named(adopted, instance_id=held.other_instance))
    assert side.port.complete(adopted, ActionResult.CONTINUE)
    assert not side.port.heartbeat(held.action)  # the action it named is the one completed
    assert not side.port.complete(adopted, ActionResult.CONTINUE)


# -- confirmation: the action, and where its instance is ----------------------------------------------------


def test_an_action_that_holds_its_instance_is_confirmed_by_a_heartbeat(side: Side) -> None:
    held = side.hold()
    side.advance(HEARTBEAT - 10)
    assert side.port.confirm(held.action)
    side.advance(HEARTBEAT - 10)  # (past its first heartbeat timeout: the confirmation renewed it)
    assert side.port.confirm(named(held.action, token=adopted_token(held.action.hook)))
    assert side.port.complete(held.action, ActionResult.CONTINUE)
    assert not side.port.confirm(held.action)  # completed


@pytest.mark.parametrize(
    "claims",
    [
        {"transition": Transition.LAUNCHING},
        {"transition": Transition.LAUNCHING, "destination": WARM_POOL},
        {"origin": WARM_POOL, "destination": "EC2"},
        {"origin": "AutoScalingGroup", "destination": WARM_POOL},
    ],
    ids=["a-launch", "a-launch-into-the-pool", "a-termination-from-the-pool", "a-scale-in-to-the-pool"],
)
def test_an_action_named_with_a_move_its_instance_is_not_held_for_is_not_confirmed(
    side: Side, claims: dict[str, Any]
) -> None:
    # Given a terminating instance's action, named by a message that says another move of it (its token, its
    # hook, its instance: Auto Scaling takes the heartbeat, as no call names the transition)
    held = side.hold()
    forged = named(held.action, **claims)
    assert side.port.heartbeat(forged)

    # Then it is not confirmed: the instance waits in Terminating:Wait, not where such an action holds it
    assert not side.port.confirm(forged)
    assert side.port.confirm(held.action)


def test_an_action_whose_instance_state_still_lags_its_wait_state_is_retried_not_refused(side: Side) -> None:
    # Given an action whose instance DescribeAutoScalingInstances still shows Terminating
    held = side.hold()
    side.advance(HEARTBEAT - 10)
    side.lag(held.action.instance_id)

    # Then its confirmation is a TransientError (the step is retried), not False (nothing disrupted, ever)
    with pytest.raises(TransientError, match="Terminating"):
        side.port.confirm(held.action)
    # And the action was renewed all the same (its heartbeat came first): active past its first timeout
    side.advance(HEARTBEAT - 10)
    assert side.port.heartbeat(held.action)


# -- timeouts --------------------------------------------------------------------------------------------


def test_an_action_times_out_its_heartbeat_timeout_after_its_start(side: Side) -> None:
    held = side.hold()
    side.advance(HEARTBEAT - 1)
    assert side.port.heartbeat(held.other_hook)  # (renews the other hook's action only)
    side.advance(1)
    # at the deadline itself the action is over
    assert not side.port.heartbeat(held.action)
    assert not side.port.complete(held.action, ActionResult.CONTINUE)
    assert side.port.heartbeat(held.other_hook)


def test_a_heartbeat_renews_the_action_for_another_heartbeat_timeout(side: Side) -> None:
    held = side.hold()
    side.advance(HEARTBEAT - 10)
    assert side.port.heartbeat(held.action)
    side.advance(HEARTBEAT - 10)
    assert side.port.complete(held.action, ActionResult.CONTINUE)


def test_heartbeats_never_keep_an_action_past_its_global_timeout(side: Side) -> None:
    held = side.hold()
    beats = 0
    while True:
        side.advance(HEARTBEAT - 1)
        if not side.port.heartbeat(held.action):
            break
        beats += 1
    # 100 heartbeat timeouts after its start: the last heartbeat that found it came before that
    assert beats == GLOBAL // (HEARTBEAT - 1)
    assert not side.port.complete(held.action, ActionResult.CONTINUE)


def test_the_global_timeout_is_48_hours_at_most(side_of_an_hour: Side) -> None:
    side = side_of_an_hour
    held = side.hold()
    beats = 0
    while side.port.heartbeat(held.action):  # every 50 minutes
        beats += 1
        side.advance(3000)
    # 48 hours after its start (not 100 heartbeat timeouts): the last heartbeat that found it came before that
    assert beats == 48 * 3600 // 3000 + 1
    assert not side.port.complete(held.action, ActionResult.CONTINUE)


# -- reading hooks, tags, the held instances ----------------------------------------------------------


def test_the_group_dates_what_it_does_with_a_held_instance(side: Side) -> None:
    # Given an instance the terminate hooks hold, and one in service
    since = side.now() - timedelta(seconds=GLOBAL)
    held = side.hold()
    began = side.port.activity_started(side.group, held.action.instance_id, since)

    # Then the group's activity that holds the first began no later than its action (now); nothing is under way for
    # the one in service, nor anything begun after the bound asked
    assert began is not None
    assert since <= began <= side.now()
    side.advance(60)
    assert side.port.activity_started(side.group, held.other_instance, since) is None
    assert side.port.activity_started(side.group, held.action.instance_id, side.now()) is None
    # ... and once its actions are over, nothing is under way for it either
    assert side.port.complete(held.action, ActionResult.CONTINUE)
    assert side.port.complete(held.other_hook, ActionResult.CONTINUE)
    assert side.port.activity_started(side.group, held.action.instance_id, since) is None


def test_a_group_of_many_activities_is_read_only_as_far_as_those_in_progress(
    emulation: tuple[AwsControl, RecordingBus], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an instance the hooks hold, in a group that went through hundreds of activities over since (a refresh)
    side = Emulation(*emulation, monkeypatch)
    held = side.hold()
    (begun,) = [
        a
        for a in side.control.emulator.activities
        if a.instance_id == held.action.instance_id and a.status is None
    ]
    side.control.emulator.activities += [
        replace(
            begun,
            activity_id=str(uuid.uuid4()),
            instance_id=f"i-{n:017x}",
            ended_at=side.seconds,
            status="Successful",
        )
        for n in range(250)
    ]
    calls: list[str] = []
    side.autoscaling.meta.events.register(
        "before-call.autoscaling.DescribeScalingActivities", lambda **_: calls.append("call")
    )

    # When the activity that holds it is read
    began = side.port.activity_started(side.group, held.action.instance_id, side.now() - timedelta(hours=1))

    # Then it is found on the first page (those in progress come first), without reading the pages of those over
    assert began == datetime.fromtimestamp(begun.started_at, UTC)
    assert calls == ["call"]


def test_hooks_and_tags_of_a_known_group(side: Side) -> None:
    assert side.port.hook(side.group, "drain") == Hook(Transition.TERMINATING, HEARTBEAT)
    assert side.port.hooks_of(side.group) == {
        "drain": Hook(Transition.TERMINATING, HEARTBEAT),
        "eip": Hook(Transition.TERMINATING, HEARTBEAT),
    }
    assert (side.port.group_tags(side.group) or {}).get(OWNER_TAG) == OWNER


def test_a_hook_or_group_auto_scaling_does_not_know_is_none(side: Side) -> None:
    assert side.port.hook(side.group, "no-such-hook") is None
    assert side.port.hook("no-such-group", "drain") is None
    assert side.port.hooks_of("no-such-group") == {}
    assert side.port.group_tags("no-such-group") is None
    assert side.port.lifecycle_state("i-0000000000000dead") is None


def test_the_instances_hooks_hold_by_group_name_and_by_owner_tag(side: Side) -> None:
    held = side.hold()

    def listed(names: tuple[str, ...], owner: str | None) -> set[tuple[str, str, Transition]]:
        return {(w.group, w.instance_id, w.transition) for w in side.port.waiting_instances(names, owner)}

    expected = {(side.group, held.action.instance_id, Transition.TERMINATING)}
    assert listed((side.group,), None) == expected
    assert listed((), OWNER) >= expected
    assert listed((side.group,), OWNER) >= expected  # once, though named and tagged
    assert len(side.port.waiting_instances((side.group,), OWNER)) == len(listed((side.group,), OWNER))
    assert listed(("no-such-group",), None) == set()
    assert listed((), "stack-b") == set()
