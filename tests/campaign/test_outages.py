"""The outages the campaign draws (faults.OUTAGE_KINDS: a mapping disabled, a role without its policy, a third
writer of the budget ConfigMap, work replayed hours later): drawn last, each from a stream of its own, so that every
seed keeps the stories and faults it drew; and the judges excuse what they hold up only where the real thing does."""

from __future__ import annotations

import dataclasses
import time
from types import SimpleNamespace
from typing import Any

from nodecycle_sandbox.chaos.invariants import DRAIN_TIMEOUT, OUTAGE_RECOVERY, _forced_from
from nodecycle_sandbox.chaos.outages import Outages, oldest_work
from nodecycle_sandbox.chaos.plan import (
    BUDGET_CONTENDED_LONGEST,
    BUDGET_RECREATED_LONGEST,
    IAM_DETACHED_LONGEST,
    MAPPING_PAUSED_LONGEST,
    OUTAGE_LATEST,
    REPLAY_EARLIEST,
    REPLAY_LATEST,
    THIRD_WRITER_LONGEST,
    draw,
)
from nodecycle_sandbox.faults import OUTAGE_KINDS, Fault, Firing
from nodecycle_sandbox.iam.identities import Identities
from nodecycle_sandbox.runner.journal import Invocation
from tests.campaign.test_invariants import NODE, T0, _budget_holding, _judged, _node, _observation, _terminate
from tests.campaign.test_plan import PINNED_SEEDS

LONGEST = {
    "mapping-paused": MAPPING_PAUSED_LONGEST,
    "iam-detached": IAM_DETACHED_LONGEST,
    "budget-third-writer": THIRD_WRITER_LONGEST,
    "kube-budget-contended": BUDGET_CONTENDED_LONGEST,
    "budget-recreated": BUDGET_RECREATED_LONGEST,
}


def test_the_outages_are_drawn_last_of_all_each_from_a_stream_of_its_own_and_within_their_bounds() -> None:
    for seed in PINNED_SEEDS:
        for index in range(30):
            for lag, forge in ((False, False), (True, True)):
                scenario = draw(seed, index, lag=lag, forge=forge)
                outages = [f for f in scenario.faults if f.kind in OUTAGE_KINDS]

                # Then they come after every other fault, numbered on, at most one of each kind
                assert scenario.faults[len(scenario.faults) - len(outages) :] == tuple(outages)
                assert [f.id for f in scenario.faults] == [
                    f"f{n}" for n in range(1, len(scenario.faults) + 1)
                ]
                assert len({f.kind for f in outages}) == len(outages)
                # each the same whether lag or forgeries are asked for (their streams are their own)
                plain = [f for f in draw(seed, index).faults if f.kind in OUTAGE_KINDS]
                assert [(f.kind, f.target, f.start, f.stop, f.value) for f in outages] == [
                    (f.kind, f.target, f.start, f.stop, f.value) for f in plain
                ]
                # a timed one within the story and its kind's longest, a replay hours later
                for fault in outages:
                    if fault.kind == "work-replay":
                        assert REPLAY_EARLIEST <= fault.value <= REPLAY_LATEST
                        assert fault.limit
                    else:
                        assert fault.stop is not None
                        assert 0.0 <= fault.start <= OUTAGE_LATEST
                        assert 0.0 < fault.stop - fault.start <= LONGEST[fault.kind] + 0.1
                # and none without faults
                assert not any(
                    f.kind in OUTAGE_KINDS for f in draw(seed, index, faults=False, lag=lag).faults
                )


def test_each_outage_is_drawn_in_a_share_of_the_scenarios() -> None:
    scenarios = [draw(41, index) for index in range(200)]
    for kind in OUTAGE_KINDS:
        drawn = [s for s in scenarios if any(f.kind == kind for f in s.faults)]
        assert 0.15 * len(scenarios) < len(drawn) < 0.5 * len(scenarios), kind


def _stalled(kind: str, function: str, owner: str, start: float, stop: float) -> tuple[Fault, Firing]:
    fault = Fault("f9", kind, function, start=start, stop=stop, limit=1)
    return fault, Firing(start, "f9", kind, f"{function} {owner} set")


def test_a_slot_held_while_its_own_stacks_completers_were_stalled_is_excused_the_overlap_only() -> None:
    # Given a node cordoned at 2 s whose action completes at 62 s: 60 s held, the limit is 20 + 2 + 20 s
    history = [_node(T0 + 2, owner="chaos-a", cordoned=True)]

    def judged(kind: str, function: str, owner: str, start: float, stop: float) -> set[str]:
        fault, firing = _stalled(kind, function, owner, start, stop)
        scenario = draw(1, 0, faults=False).with_faults((fault,))
        actions = [_terminate(T0 + 62)]
        return _judged(_observation(history, scenario=scenario, actions=actions, firings=[firing]))

    for kind in ("mapping-paused", "iam-detached"):
        # When its own stack's drain function was stalled for 20 s of its span: excused (60 < 42 + 20 + recovery)
        assert "slot-held" not in judged(kind, "DrainFunction", "chaos-a", 10, 30), kind
        assert "slot-held" not in judged(kind, "EipFunction", "chaos-a", 10, 30), kind
        # When for 5 s only, the other stack's, intake's (no step of a drain), or after its action completed: not
        assert "slot-held" in judged(kind, "DrainFunction", "chaos-a", 10, 15), kind
        assert "slot-held" in judged(kind, "DrainFunction", "chaos-b", 10, 30), kind
        assert "slot-held" in judged(kind, "IntakeFunction", "chaos-a", 10, 30), kind
        assert "slot-held" in judged(kind, "DrainFunction", "chaos-a", 63, 90), kind
    assert OUTAGE_RECOVERY < 60 - 42 - 5.5  # (what the 5 s case relies on)


def test_a_third_writers_storm_between_a_grant_and_its_cordon_may_begin_the_drain_at_the_grant() -> None:
    # Given a node granted its slot at 3 s and cordoned at 8 s: its cordon step renews the budget document first,
    # and the product's drain time runs since the step began
    history = [_budget_holding(T0 + 3, NODE), _node(T0 + 8, owner="chaos-a", cordoned=True)]

    def forced_from(start: float, stop: float) -> float:
        fault = Fault("f9", "budget-third-writer", "configmaps", start=start, stop=stop, value=0.1)
        scenario = draw(1, 0, faults=False).with_faults((fault,))
        firing = Firing(start, "f9", "budget-third-writer", "configmaps nodecycle-budget")
        return _forced_from(_observation(history, scenario=scenario, firings=[firing]))[NODE]

    # Then a storm over that window lets the force act a drain timeout after the grant, or after the storm began
    assert forced_from(1, 30) == T0 + 3 + DRAIN_TIMEOUT
    assert forced_from(5, 30) == T0 + 5 + DRAIN_TIMEOUT
    # and a storm that ended before the grant or began after the cordon changes nothing
    assert forced_from(0.5, 2) == T0 + 8 + DRAIN_TIMEOUT
    assert forced_from(9, 30) == T0 + 8 + DRAIN_TIMEOUT


class _Journal:
    def __init__(self, invocations: list[Invocation]) -> None:
        self._invocations = invocations

    def invocations(self, function: str) -> list[Invocation]:
        return [i for i in self._invocations if i.function == function]


def _delivered(at: float, function: str, source: str, *bodies: str) -> Invocation:
    event = {"Records": [{"messageId": f"m-{b}", "body": b} for b in bodies]}
    return Invocation(function, source, f"r-{at}", at, at + 1, True, event, None, None)


def test_a_replay_takes_the_oldest_distinct_messages_its_function_had_from_its_work_queue() -> None:
    # Given the drain function's deliveries in two stacks: a duplicate, and one not from its work queue
    runners = {
        "a": SimpleNamespace(
            journal=_Journal(
                [
                    _delivered(3.0, "DrainFunction", "sqs:DrainQueue", "second", "third"),
                    _delivered(1.0, "DrainFunction", "sqs:DrainQueue", "first"),
                    _delivered(2.0, "DrainFunction", "sqs:DrainQueue", "first"),
                    _delivered(0.5, "DrainFunction", "direct", "not-work"),
                    _delivered(0.2, "EipFunction", "sqs:EipQueue", "another function's"),
                ]
            )
        ),
        "b": SimpleNamespace(journal=_Journal([_delivered(2.5, "DrainFunction", "sqs:DrainQueue", "first")])),
    }

    # Then the oldest come first, each (stack, body) once, from the stacks asked for
    chosen = oldest_work(runners, ("a", "b"), "DrainFunction", 3)  # type: ignore[arg-type]
    assert chosen == [("a", "first"), ("b", "first"), ("a", "second")]
    assert oldest_work(runners, ("a",), "DrainFunction", 5) == [  # type: ignore[arg-type]
        ("a", "first"),
        ("a", "second"),
        ("a", "third"),
    ]


class _ReplayWorld:
    """Stack a's runner and the sandbox of a replay: its DrainQueue holds ``waiting`` messages for its first reads, then
    none; the events say what was read (and whether the clocks were moved then), armed, sent and disarmed."""

    def __init__(self, waiting: list[int]) -> None:
        self.events: list[Any] = []
        self._waiting = waiting
        self._armed = False
        self.runner = SimpleNamespace(
            journal=_Journal([_delivered(time.time() - 60, "DrainFunction", "sqs:DrainQueue", "first")]),
            queue=lambda queue_id: SimpleNamespace(url=f"url:{queue_id}"),
        )
        self.box = SimpleNamespace(runner_faults=self, client=lambda service: self)

    def arm(self, faults: list[Fault], seed: int) -> None:
        self._armed = True
        self.events.append(("armed", tuple((f.kind, f.target, f.value) for f in faults)))

    def disarm(self) -> None:
        self._armed = False
        self.events.append("disarmed")

    def get_queue_attributes(self, QueueUrl: str, AttributeNames: list[str]) -> dict[str, Any]:
        count = 0
        if QueueUrl == "url:DrainQueue":
            count = self._waiting.pop(0) if self._waiting else 0
            self.events.append(("read", count, self._armed))
        return {"Attributes": {"ApproximateNumberOfMessagesDelayed": str(count)}}

    def send_message(self, QueueUrl: str, MessageBody: str) -> None:
        self.events.append(("sent", MessageBody))
        # (handled at once: the journal tells of its delivery)
        delivered = _delivered(time.time() + 0.001, "DrainFunction", "sqs:DrainQueue", MessageBody)
        self.runner.journal._invocations.append(dataclasses.replace(delivered, records=(f"m-{MessageBody}",)))


def test_the_clocks_move_for_a_replay_only_once_the_work_under_way_has_settled_on_the_present_one() -> None:
    # Given stack a's DrainQueue holding a message for the first two looks (a completer's claim watched until its
    # invocation may have ended, or an invocation under way on the present clock), then none
    replay = _ReplayWorld([1, 1, 0])
    outages = Outages(
        box=replay.box,  # type: ignore[arg-type]
        runners={"a": replay.runner},  # type: ignore[dict-item]
        owners={"a": "chaos-a"},
        stacks=("a",),
        faults=(Fault("r1", "work-replay", "DrainFunction", limit=1, value=3600.0),),
        armed=time.monotonic(),
        budget=("nodecycle", "nodecycle-budget", "budget.json"),
    )

    # When the replay is sent
    left = outages.replay()

    # Then the clocks moved only once that work was over (hours later it would be: a message still waiting out its
    # delay is none of the replay's, and an invocation begun before the move would run on the present clock and meet
    # what the moved ones changed), and the replay settled
    assert replay.events[:4] == [
        ("read", 1, False),
        ("read", 1, False),
        ("read", 0, False),
        ("armed", (("time-travel", "*", 3600.0),)),
    ]
    assert ("sent", "first") in replay.events
    assert replay.events[-1] == "disarmed"
    assert left == []


def _key(function: str) -> str:
    """A well-formed access key id of the function (20 upper-case alphanumerics, as the sandbox's IAM takes)."""
    return f"AKIA{function.upper()[:16]:X<16}"


def test_a_detached_policy_leaves_its_roles_functions_the_logging_policy_only_until_it_is_put_back() -> None:
    # Given a stack whose drain and wake functions share a role (its own policy and the logging one), and the
    # sweeper a role of its own, known to IAM
    def role(name: str, actions: list[str]) -> dict[str, Any]:
        def policy(source: str, action: list[str]) -> dict[str, Any]:
            document = {
                "Version": "2012-10-17",
                "Statement": [{"Effect": "Allow", "Action": action, "Resource": "*"}],
            }
            return {"source": source, "document": document}

        return {
            "arn": f"arn:aws:iam::123456789012:role/{name}",
            "policies": [policy(f"{name}/main", actions), policy(f"{name}/logs", ["logs:PutLogEvents"])],
        }

    roles = {"DrainRole": role("DrainRole", ["sqs:*"]), "SweeperRole": role("SweeperRole", ["dynamodb:*"])}
    function_roles = {
        "DrainFunction": "DrainRole",
        "WakeFunction": "DrainRole",
        "SweeperFunction": "SweeperRole",
    }
    runner = SimpleNamespace(
        roles=roles,
        function_roles=function_roles,
        access_key=_key,
        functions={f: SimpleNamespace(name=f"chaos-a-{f}") for f in function_roles},
        account="123456789012",
    )
    iam = Identities()
    iam.register(
        roles.values(),
        [
            {
                "access_key": _key(f),
                "role_arn": roles[r]["arn"],
                "session_name": f,
                "account": "123456789012",
            }
            for f, r in function_roles.items()
        ],
    )
    box = SimpleNamespace(
        aws=SimpleNamespace(register_identities=lambda *, roles, keys: iam.register(roles, keys))
    )
    outages = Outages(
        box=box,  # type: ignore[arg-type]
        runners={"a": runner},  # type: ignore[dict-item]
        owners={"a": "chaos-a"},
        stacks=("a",),
        faults=(),
        armed=0.0,
        budget=("nodecycle", "nodecycle-budget", "budget.json"),
    )

    def sources(function: str) -> set[str]:
        principal = iam.principal(_key(function))
        assert principal is not None
        return {s.source.rsplit("#", 1)[0].split("[")[0] for s in principal.role.statements}

    before = {f: sources(f) for f in function_roles}

    # When the drain function's role loses its policy
    detail, lift = outages._detach_policy(Fault("f1", "iam-detached", "DrainFunction", value=0))

    # Then both functions of that role keep only the logging policy, the sweeper all of its own
    assert detail == "DrainFunction chaos-a policy DrainRole/main detached"
    assert all(not any("DrainRole/main" in s for s in sources(f)) for f in ("DrainFunction", "WakeFunction"))
    assert all(any("DrainRole/logs" in s for s in sources(f)) for f in ("DrainFunction", "WakeFunction"))
    assert sources("SweeperFunction") == before["SweeperFunction"]
    # and put back, they have what they had
    lift()
    assert {f: sources(f) for f in function_roles} == before


def _refusing_outages(refusals: int) -> tuple[Outages, list[str]]:
    """Outages of one ``budget-recreated`` whose setting the API server refuses ``refusals`` times (a webhook of
    the ConfigMap down: a 500), then lets through; what was tried is listed."""
    tried: list[str] = []
    outages = Outages(
        box=None,  # type: ignore[arg-type]
        runners={},
        owners={"a": "chaos-a"},
        stacks=("a",),
        faults=(Fault("f1", "budget-recreated", "nodecycle/nodecycle-budget", start=0.0, stop=30.0),),
        armed=time.monotonic(),
        budget=("nodecycle", "nodecycle-budget", "budget.json"),
    )

    def setting(fault: Fault) -> tuple[str, Any]:
        tried.append(fault.id)
        if len(tried) <= refusals:
            raise RuntimeError("(500) Internal error occurred: failed calling webhook")
        return "the budget ConfigMap deleted and created again", lambda: None

    outages._set = setting  # type: ignore[method-assign]
    return outages, tried


def test_an_outage_whose_setting_was_refused_is_tried_again_at_the_next_looks_until_it_is_set() -> None:
    # Given a budget re-creation the API server refuses twice (its ConfigMap's webhook down for a while)
    outages, tried = _refusing_outages(refusals=2)

    # When the story runs long enough for a few looks
    with outages.timed():
        deadline = time.monotonic() + 10
        while not outages.firings and time.monotonic() < deadline:
            time.sleep(0.05)

    # Then it was tried again, as an operator reruns the command, and set at the third try
    assert tried == ["f1", "f1", "f1"]
    assert [f.kind for f in outages.firings] == ["budget-recreated"]
    assert outages.unset == []
    # and the refusal told once, not at every look
    assert sum("setting it failed" in note for note in outages.notes) == 1


def test_an_outage_never_set_before_the_story_ended_is_named_with_why_and_in_the_campaigns_summary() -> None:
    # Given a budget re-creation the API server refuses for the whole story
    outages, tried = _refusing_outages(refusals=1_000)

    # When the story ends after a few looks
    with outages.timed():
        time.sleep(1.0)

    # Then it was tried at each look, never fired, and named as never set with the last refusal
    assert len(tried) >= 2
    assert outages.firings == []
    assert outages.unset == [
        "f1 budget-recreated: RuntimeError: (500) Internal error occurred: failed calling webhook"
    ]
    assert any(note.startswith("outages never set: f1 budget-recreated") for note in outages.notes)
    # and the campaign's summary names it: a seed that drew it does not pass for having covered it
    from nodecycle_sandbox.chaos.campaign import CampaignReport

    report = CampaignReport(seed=712, unset=[f"s712-2: {what}" for what in outages.unset])
    assert "outages drawn but never set: 1" in report.summary()
    assert "s712-2: f1 budget-recreated: RuntimeError" in report.summary()
