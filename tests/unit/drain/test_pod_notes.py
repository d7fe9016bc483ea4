"""What a drain keeps of its pods between passes: one entry a pod, and what a drain under way when its function
was updated had kept under the keys before it."""

from __future__ import annotations

from datetime import timedelta

from nodecycle.domain.drain.pod_notes import BLOCKED, DELETION, FAILING, PODS, PodNotes
from tests.support.fakes import T0
from tests.unit.drain.test_drain_steps import NODE, FakeCluster, draining, evict, node, pod


def test_a_pod_is_written_once_with_only_what_is_kept_of_it() -> None:
    # Given notes of three pods: one told blocked, one whose evictions fail since T0 and were told so, one whose
    # forced delete was refused and told, and whose call failed after the second's
    notes = PodNotes({"polls": 3})
    notes.tell("a", BLOCKED)
    notes.failed("b")
    assert notes.stalled_since("b", T0) == T0
    notes.tell("b", FAILING)
    notes.failed("c")
    notes.tell("c", DELETION)

    # When they are written into the record's extra
    extra = notes.into({"polls": 3})

    # Then each pod is one entry, its trailing empty fields left out, and they read back as written
    assert extra == {"polls": 3, PODS: {"a": ["b"], "b": ["f", 1, T0.isoformat()], "c": ["d", 2]}}
    again = PodNotes(extra)
    assert again.failure_order(["a", "b", "c"]) == {"b": 1, "c": 2}
    assert again.stalled_since("b", T0 + timedelta(seconds=40)) == T0
    assert [again.told(uid, what) for uid, what in (("a", BLOCKED), ("a", FAILING), ("c", DELETION))] == [
        True,
        False,
        True,
    ]


def test_what_a_drain_kept_under_the_keys_before_is_read_and_written_as_notes() -> None:
    # Given a drain's extra as the version before kept it
    before = {
        "polls": 7,
        "failed_pods": ["b", "c"],  # oldest failure first
        "blocked_reported": ["a", "b/EvictionFailing"],
        "evictions_failing": {"b": T0.isoformat()},
        "deletion_refused": ["c"],
    }

    # When it is read and written again
    notes = PodNotes(before)
    extra = notes.into(before)

    # Then the same is known: the failures' order, the pods told of and what, since when evictions fail
    assert notes.failure_order(["a", "b", "c"]) == {"b": 1, "c": 2}
    told = [(uid, what) for uid in "abc" for what in (BLOCKED, FAILING, DELETION) if notes.told(uid, what)]
    assert told == [("a", BLOCKED), ("b", FAILING), ("c", DELETION)]
    assert notes.stalled_since("b", T0 + timedelta(seconds=40)) == T0
    # and the keys before are gone
    assert extra == {"polls": 7, PODS: {"a": ["b"], "b": ["f", 1, T0.isoformat()], "c": ["d", 2]}}


# A drain's extra as the evict step before one entry a pod (5c90e1d^) wrote it, on the unit FakeCluster: five pods
# (blocked, refused, two whose calls failed at every try, one blocked whose forced delete was then refused), eight
# polls, then the force's two passes past the timeout (node_seen and graces left out), and the key of a pod told
# its evictions failing, as a later poll writes it
WRITTEN_BEFORE = {
    "polls": 8,
    "blocked_reported": ["uid-blk", "uid-ref", "uid-undel", "uid-fail1/EvictionFailing"],
    "evictions_failing": {"uid-fail1": T0.isoformat(), "uid-fail2": T0.isoformat()},
    "deletion_refused": ["uid-undel"],
    "failed_pods": ["uid-fail1", "uid-fail2"],
}


def _known(notes: PodNotes) -> list[tuple[str, str]]:
    uids = ("uid-blk", "uid-ref", "uid-undel", "uid-fail1", "uid-fail2")
    return [(uid, what) for uid in uids for what in (BLOCKED, FAILING, DELETION) if notes.told(uid, what)]


def test_a_record_the_version_before_wrote_is_read_whole() -> None:
    # When a record the version before wrote is read
    notes = PodNotes(WRITTEN_BEFORE)

    # Then what it told, the failures' order and since when evictions fail are known
    assert _known(notes) == [
        ("uid-blk", BLOCKED),
        ("uid-ref", BLOCKED),
        ("uid-undel", BLOCKED),
        ("uid-undel", DELETION),
        ("uid-fail1", FAILING),
    ]
    assert notes.failure_order(["uid-fail2", "uid-fail1", "uid-blk"]) == {"uid-fail1": 1, "uid-fail2": 2}
    assert notes.stalled_since("uid-fail2", T0 + timedelta(seconds=40)) == T0


def test_what_the_version_before_wrote_after_this_one_is_not_lost() -> None:
    # Given a record this version wrote (one pod told blocked), then written by the version before (a function
    # update's old instances still answer for a while, and keep the keys they do not know): it told of more pods,
    # one's evictions failing since T0
    record = {
        PODS: {"uid-blk": ["b"]},
        **WRITTEN_BEFORE,
    }

    # When this version reads it
    notes = PodNotes(record)

    # Then what both told is known (each told once per drain), and since when evictions fail, and the failures
    assert _known(notes) == _known(PodNotes(WRITTEN_BEFORE))
    assert notes.stalled_since("uid-fail1", T0 + timedelta(seconds=40)) == T0
    assert notes.failure_order(["uid-fail1", "uid-fail2"]) == {"uid-fail1": 1, "uid-fail2": 2}
    # and the keys before are gone once written
    assert set(notes.into(record)) == {"polls", PODS}


def test_what_is_kept_of_pods_gone_from_the_node_goes_with_them() -> None:
    # Given a drain whose node keeps getting new pods that a budget blocks, each replacing the last (a controller
    # whose pods tolerate the cordon, in a rollout): each is told blocked once
    cluster = FakeCluster(nodes={NODE: node()}, pods=[pod("web-0")], blocked={"web-0"})
    step = evict(cluster)
    record = draining()
    for n in range(1, 40):
        record = record.model_copy(update=dict(step(record, T0 + timedelta(seconds=n)).changes))
        cluster.pods = [pod(f"web-{n}")]
        cluster.blocked = {f"web-{n}"}

    # Then the record keeps notes of the pods still there only: its size does not grow with every pod told of
    assert list(record.extra[PODS]) == ["uid-web-38"]
