"""Auto Scaling: completing and heartbeating lifecycle actions, and reading hooks and group tags."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from nodecycle.adapters.aws.clients import (
    LazyClient,
    answer_lost,
    answered_at,
    error_code,
    transient_errors,
)
from nodecycle.adapters.aws.instances import Ec2Instances
from nodecycle.domain.catalog import OWNER_TAG
from nodecycle.domain.errors import AccessRefused, NotYetHeld
from nodecycle.domain.model import GROUP, WARM_POOL, ActionRef, Transition
from nodecycle.domain.policy import ActionResult
from nodecycle.domain.ports.lifecycle import Hook, Membership, WaitingInstance

if TYPE_CHECKING:
    from mypy_boto3_autoscaling import AutoScalingClient
    from mypy_boto3_ec2 import EC2Client

log = logging.getLogger(__name__)

# The lifecycle states in which hooks hold an instance, and what may hold it in each: (transition, origin,
# destination) as the action's event would say them, where the state tells (a warm pool's own: a launch into
# the pool is completed at once, a termination from it has no node to drain). Warmed:Pending:Wait is both a
# launch into the pool and, in a group whose pool takes instances back on scale in (ReuseOnScaleIn), a
# termination into it, held by the group's terminating hook: the state cannot tell, so both are listed and
# the hooks of each transition are probed (only the one that holds the instance accepts a heartbeat).
# ReplacingRootVolume:Wait is an instance refresh's root volume replacement, held by the group's terminating hooks
# ("When a lifecycle hook is configured for the autoscaling:EC2_INSTANCE_TERMINATING lifecycle action, an instance
# about to undergo root volume replacement pauses ... when it reaches the ReplacingRootVolume:Wait state": "Use
# lifecycle hooks with replace root volume", Amazon EC2 Auto Scaling user guide), its event's Origin and
# Destination both the group. Missing here, its action was refused as a forgery at its confirmation and never
# adopted: the instance rebooted on its new root volume with its node undrained at the hook's timeout.
_RETURNING_TO_POOL = GROUP  # the origin of an instance scaled in to its warm pool
_HELD: dict[str, tuple[tuple[Transition, str | None, str | None], ...]] = {
    "Pending:Wait": ((Transition.LAUNCHING, None, None),),
    "Terminating:Wait": ((Transition.TERMINATING, None, None),),
    "ReplacingRootVolume:Wait": ((Transition.TERMINATING, GROUP, GROUP),),
    "Warmed:Pending:Wait": (
        (Transition.LAUNCHING, None, WARM_POOL),
        (Transition.TERMINATING, _RETURNING_TO_POOL, WARM_POOL),
    ),
    "Warmed:Terminating:Wait": ((Transition.TERMINATING, WARM_POOL, "EC2"),),
}
_HOOK_TRANSITIONS = (Transition.LAUNCHING, Transition.TERMINATING)

_NAMES_PER_CALL = 50  # DescribeAutoScalingGroups' limit on AutoScalingGroupNames


def _naming(action: ActionRef) -> dict[str, str]:
    """The parameters that name an action to heartbeat it: its token when known; an adopted one's by its
    instance alone (the hook holds at most one action of an instance)."""
    named = _by_instance(action)
    if action.token_known:
        named["LifecycleActionToken"] = action.token
    return named


def _by_instance(action: ActionRef) -> dict[str, str]:
    """The parameters that name the action the hook holds for the action's instance, whatever its token: a
    completion's (see ``AutoscalingActions.complete``)."""
    return {
        "AutoScalingGroupName": action.group,
        "LifecycleHookName": action.hook,
        "InstanceId": action.instance_id,
    }


def _holding_state(action: ActionRef) -> str:
    """The lifecycle state in which ``action``'s hook holds its instance (the inverse of ``_HELD``)."""
    if action.transition is Transition.LAUNCHING:
        return "Warmed:Pending:Wait" if action.destination == WARM_POOL else "Pending:Wait"
    if action.origin == WARM_POOL:
        return "Warmed:Terminating:Wait"
    if action.replaces_root_volume:
        return "ReplacingRootVolume:Wait"
    return "Warmed:Pending:Wait" if action.destination == WARM_POOL else "Terminating:Wait"


def _unknown_group(error: ClientError, group: str) -> None:
    """Tell a ValidationError, Auto Scaling's answer about a group (or its warm pool) it does not know; raise
    any other error."""
    if error_code(error) != "ValidationError":
        raise error
    log.warning(
        "Auto Scaling does not know group %s: %s", group, error.response.get("Error", {}).get("Message", "")
    )


def _names(description: str, instance_id: str) -> bool:
    """Whether an activity's Description ("Terminating EC2 instance: i-...") names the instance: the id after its
    colon, whole (an id may begin with another, shorter one)."""
    _, _, named = description.partition(": ")
    return named.split(" ", 1)[0] == instance_id


def _hook(described: Any) -> Hook:
    return Hook(
        transition=Transition(described["LifecycleTransition"]),
        heartbeat_timeout=int(described.get("HeartbeatTimeout", 3600)),
    )


class AutoscalingActions:
    def __init__(self, autoscaling: AutoScalingClient | None = None, ec2: EC2Client | None = None) -> None:
        # (a completion whose answer was lost is told from one another caller settled: see complete)
        self._asg: LazyClient[AutoScalingClient] = LazyClient(
            "autoscaling", autoscaling, telling_lost_answers=("CompleteLifecycleAction",)
        )
        self._instances = Ec2Instances(ec2)  # (its client made only at its first call: ``membership``'s)
        # Auto Scaling's time of its answer to the last heartbeat it accepted (see ``renewed_at``)
        self._renewed_at: datetime | None = None

    def complete(self, action: ActionRef, result: ActionResult) -> bool:
        """Complete the action the hook holds for ``action``'s instance, named by the instance alone, never by
        the token: a completion settles the action of the instance its lifecycle confirmed waiting and drained
        (or gave its address), whatever the token says.

        Auto Scaling documents both calls as acting "for the specified token or instance", not that it refuses a
        token named with another instance than its action's, and no API tells a token's instance. Two instances
        held by the same hook (a scale-in of two), a message on the intake queue naming the first with the
        second's token is confirmed (the first waits where its action holds it, the token is live): named by the
        token, its completion would settle the second's action, its node terminated undrained (invariant 8).
        Named by the instance, it settles the first's, drained by then, as its own lifecycle would.

        The token still names the heartbeats, the confirmation's among them: a token must be live for its
        lifecycle to be confirmed and to go on, so a replay of an older lifecycle of the instance (a warm-pool
        instance held again by the same hook, in the same state) confirms nothing, and a lifecycle whose action
        ended is told so at its next heartbeat (the engine's ahead of the heartbeat deadline, the sweeper's when
        the engine stalls, a confirmation again before a disruptive step past it). What naming by the instance
        gives up: a completion after its own action ended unknown to its lifecycle (settled by hand, or timed out
        while nothing heartbeated it) settles the next action of the instance under the same hook, if there is one
        by then, in whatever state. After an action into the warm pool that next one comes with none between (the
        launch out of the pool on a scale out, ``Pending:Wait``; the pool's shrinking, ``Warmed:Terminating:Wait``):
        such a completion asks its token first unless its run confirmed it (``CompleteAction``: a call each). After
        any other, a whole terminating action comes between (a launch's next is after a scale-in back to the pool;
        a termination out of it ends the instance): a launch's completion asks first only when it may have been
        called before (a retry at the engine's backoff, minutes later, or a claim taken over: time enough for the
        instance to go through the pool and back), not at its first call, nor a termination's ever, where an
        adopted action's completion looks where its instance is (``_still_held``): that would cost a call per
        lifecycle and still leave the moment after it."""
        if not self._still_held(action):
            return False
        try:
            with transient_errors("completing a lifecycle action"):
                self._asg().complete_lifecycle_action(
                    **_by_instance(action), LifecycleActionResult=result.value
                )
        except ClientError as error:
            if error_code(error) == "ValidationError" and answer_lost(error):
                # botocore sent the call again after an attempt whose answer was lost (a 5xx, a read timeout; not
                # one Auto Scaling refused, a throttle or a ResourceContention, which did nothing: see
                # clients._note_lost_answer): that attempt completed the action, and the retry found it settled.
                # The completion is this caller's, with its result: counted and recorded as its own, not as someone
                # else's. (An action that timed out in the same seconds would be taken for it: the earlier attempt
                # reached Auto Scaling, and nothing tells the two apart.)
                log.warning(
                    "completed the lifecycle action of %s: the retry of a completion whose answer was lost found "
                    "it settled",
                    action.instance_id,
                )
                return True
            return self._settled(action, error)
        except AccessRefused as refused:
            return self._gone_with_its_group(action, refused)
        return True

    def heartbeat(self, action: ActionRef) -> bool:
        # (not looked at as a completion is: a heartbeat that lands on a newer action of the instance only
        # extends it, and the orphans' keep-alive heartbeats by instance id at every sweep: no call per item)
        self._renewed_at = None
        try:
            with transient_errors("recording a lifecycle heartbeat"):
                answer = self._asg().record_lifecycle_action_heartbeat(**_naming(action))
        except ClientError as error:
            return self._settled(action, error)
        except AccessRefused as refused:
            return self._gone_with_its_group(action, refused)
        self._renewed_at = answered_at(answer)
        return True

    def renewed_at(self, now: datetime) -> datetime:
        """``now``, or the Date of Auto Scaling's answer to the heartbeat just accepted when that is earlier: a caller
        whose clock runs ahead of Auto Scaling's records the renewal on Auto Scaling's clock (the Date is to the
        second and stamped before the answer left: never after the renewal). A clock on time or behind records its
        own ``now``, read before the call, as before."""
        return now if self._renewed_at is None else min(now, self._renewed_at)

    def _gone_with_its_group(self, action: ActionRef, refused: AccessRefused) -> bool:
        """Whether a heartbeat or completion IAM refused named an action gone with its group (False), else the
        refusal raised as it is.

        A role granted the lifecycle calls by the groups' tag (``ManagedByTag``) is refused them on a group that no
        longer exists: IAM reads the grant's tag condition on a resource that has no tags any more, where a role
        granted them by name hears Auto Scaling's "No active Lifecycle Action" (a group force-deleted ends its
        actions with it). Only where the instance is tells the two apart: one Auto Scaling no longer lists in the
        action's group (nor at all) has no action of that group, settled as the ValidationError settles it; one it
        still lists there (a group that lost its tag, a policy denying the call; or the moments after a deletion,
        while Auto Scaling still lists its instances: retried, as any refusal) is a refusal, which stays loud (its
        alarm, the dead-letter queue in the end). A look refused as well tells nothing: the call's own refusal is
        raised; a throttled one is a TransientError, retried. One call, on a refusal only."""
        try:
            group, _ = self._listed(action.instance_id, "reading an instance's group after a refused call")
        except AccessRefused as look:
            log.warning(
                "could not tell whether the action of %s went with its group: %s", action.instance_id, look
            )
            raise refused from refused.__cause__
        if group == action.group:
            raise refused
        log.warning(
            "%s: instance %s is no longer in group %s (%s): its action went with the group",
            refused,
            action.instance_id,
            action.group,
            f"in group {group}" if group is not None else "in no group",
        )
        return False

    def confirm(self, action: ActionRef) -> bool:
        """A look at where the instance is, then a heartbeat: the engine's confirmation of an action before it
        disrupts anything for it.

        Both calls name the action by its group, hook, token *and* instance, and AWS documents them as acting "for
        the specified token or instance", without saying that a token named with another instance than its
        action's, or with another group, is refused. A message on the intake queue pairing an instance in service
        with the live token of another instance's action (read from the queue, its dead letters, a log) could then
        be confirmed, and the instance in service drained, its address released, and the other action completed
        with this lifecycle's result; one naming this stack's group with the instance and token of an action of
        another group (another stack's, in the same account) would have this stack heartbeat that action, drain
        its node and complete it under the other stack's drain. An instance is in the wait state of its transition
        (``_holding_state``) in the group that lists it exactly while an action of that group holds it there: one
        that is not, or is another group's, has no such action of the group named, whatever the token. So the
        look comes first, and an action it does not place in the group named is not heartbeated either (one on
        its way into that state there is: see ``_held_in_its_group``). Two calls per lifecycle (at its first
        confirmation); an adopted action is named by its instance alone, and its heartbeat itself finds the action
        the hook holds for it.

        What neither call can tell is an instance the hook holds named with the live token of another instance the
        same hook holds: both wait where their actions hold them, and no API tells a token's instance. Such a pair
        is confirmed, and its lifecycle drains the instance it names, which its own action holds for a drain; the
        completion names that instance alone (see ``complete``), so it settles that instance's action, not the
        token's."""
        if not action.token_known:
            return self.heartbeat(action)
        if self._held_in_its_group(action):
            return self.heartbeat(action)
        return False

    def _held_in_its_group(self, action: ActionRef) -> bool:
        """Whether ``action``'s instance waits, in the group the action names, in the state its action holds it in.
        NotYetHeld (a TransientError) while it is still on its way into that state."""
        group, state = self._listed(action.instance_id, "reading an instance's group and lifecycle state")
        holding = _holding_state(action)
        if group == action.group and state == holding:
            return True
        if group == action.group and state == holding.removesuffix(":Wait"):
            # (Auto Scaling sends the notification once the instance waits: a state read that lags it, not
            # an action of another instance; the step is retried, the action renewed meanwhile when it is this
            # token's: the group's own instance, on its way into the state its action holds it in)
            self.heartbeat(action)
            raise NotYetHeld(
                f"instance {action.instance_id} is {state}, not yet {holding} where its action holds it"
            )
        log.warning(
            "instance %s is %s in %s, not where an action of hook %s of group %s holding it would (%s): the token "
            "is not its action's",
            action.instance_id,
            state or "in no state",
            f"group {group}" if group is not None else "no group",
            action.hook,
            action.group,
            holding,
        )
        return False

    def _still_held(self, action: ActionRef) -> bool:
        """Whether an adopted action (named by instance id alone at each call, its token unknown) may still be the
        one the hook holds.

        Auto Scaling completes by instance id whatever action the hook holds for the instance
        *now*: a completion of ours retried after its answer was lost (or one asked after the action timed
        out) would settle a newer action of the instance under the same hook, undrained or without its address
        (a warm-pool instance launched into the pool, then taken out of it at once: the same launch hook). The
        instance moves on to another state when its action ends, so only while it is in the state this action
        holds it in is the call made; otherwise the action is over. (The same state again needs a whole round
        of other actions in between: out of the pool and back into it through the terminating hook.) An action
        whose token is known needs no such look: its lifecycle's heartbeats name the token, and one that finds
        it ended ends the lifecycle before its completion (see ``complete``)."""
        if action.token_known:
            return True
        state = self.lifecycle_state(action.instance_id)
        if state == _holding_state(action):
            return True
        log.warning(
            "instance %s is %s, not where the adopted action of hook %s held it: that action is over",
            action.instance_id,
            state or "gone from its group",
            action.hook,
        )
        return False

    def _settled(self, action: ActionRef, error: ClientError) -> bool:
        """A ValidationError naming our own action means Auto Scaling no longer has it active.

        AWS answers "No active Lifecycle Action found" for an action completed before (by a delivery that died
        before recording it), timed out, or gone with its group; the instance's state cannot tell, since
        another hook may keep it waiting. Every other parameter of these calls comes from the action itself.
        """
        if error_code(error) != "ValidationError":
            raise error
        log.warning(
            "Auto Scaling has no active lifecycle action for %s any more: %s",
            action.instance_id,
            error.response.get("Error", {}).get("Message", ""),
        )
        return False

    def hook(self, group: str, name: str) -> Hook | None:
        hooks = self._described_hooks(group, "reading a lifecycle hook", LifecycleHookNames=[name])
        if not hooks:
            return None
        return _hook(hooks[0])

    def hooks_of(self, group: str) -> dict[str, Hook]:
        return {
            hook["LifecycleHookName"]: _hook(hook)
            for hook in self._described_hooks(group, "reading a group's lifecycle hooks")
            if hook.get("LifecycleTransition") in _HOOK_TRANSITIONS
        }

    def _described_hooks(self, group: str, doing: str, **names: list[str]) -> list[Any]:
        """DescribeLifecycleHooks of ``group``; none for a group Auto Scaling does not know."""
        try:
            with transient_errors(doing):
                found = self._asg().describe_lifecycle_hooks(AutoScalingGroupName=group, **names)
        except ClientError as error:
            # Auto Scaling answers a ValidationError for a group it does not know: one deleted since it sent
            # the action (ForceDelete ends the actions with it), or a name no group has. Its hook is as gone as
            # a deleted hook's; asking again would fail the same way until the dead-letter queue.
            _unknown_group(error, group)
            return []
        return list(found.get("LifecycleHooks", []))

    def waiting_instances(self, names: tuple[str, ...], owner: str | None) -> list[WaitingInstance]:
        queries: list[dict[str, Any]] = [
            {"AutoScalingGroupNames": list(names[i : i + _NAMES_PER_CALL])}
            for i in range(0, len(names), _NAMES_PER_CALL)
        ]
        if owner is not None:
            queries.append({"Filters": [{"Name": f"tag:{OWNER_TAG}", "Values": [owner]}]})
        groups: dict[str, Any] = {}  # a group both named and tagged: once
        waiting: list[WaitingInstance] = []
        with transient_errors("listing the instances lifecycle hooks hold"):
            paginator = self._asg().get_paginator("describe_auto_scaling_groups")
            for query in queries:
                for page in paginator.paginate(**query):
                    groups.update(
                        (group["AutoScalingGroupName"], group) for group in page["AutoScalingGroups"]
                    )
            for name, group in groups.items():
                tags = {tag["Key"]: tag.get("Value", "") for tag in group.get("Tags", [])}
                # (by id: an instance listed by both calls, as it moved between the group and its pool, once)
                instances = {instance["InstanceId"]: instance for instance in group.get("Instances", [])}
                if "WarmPoolConfiguration" in group:
                    instances |= {instance["InstanceId"]: instance for instance in self._warm_pool(name)}
                waiting += [
                    WaitingInstance(
                        group=name,
                        group_tags=tags,
                        instance_id=instance["InstanceId"],
                        transition=transition,
                        origin=origin,
                        destination=destination,
                    )
                    for instance in instances.values()
                    for transition, origin, destination in _HELD.get(instance.get("LifecycleState", ""), ())
                ]
        return waiting

    def _warm_pool(self, group: str) -> list[Any]:
        """The instances of ``group``'s warm pool: AWS lists them (Warmed:*) only in DescribeWarmPool, never
        among the group's own. None for a group, or a pool, Auto Scaling no longer knows (deleted since the
        listing: a ValidationError)."""
        try:
            paginator = self._asg().get_paginator("describe_warm_pool")
            return [
                instance
                for page in paginator.paginate(AutoScalingGroupName=group)
                for instance in page.get("Instances", [])
            ]
        except ClientError as error:
            _unknown_group(error, group)
            return []

    def group_tags(self, group: str) -> dict[str, str] | None:
        with transient_errors("reading a group's tags"):
            found = self._asg().describe_auto_scaling_groups(AutoScalingGroupNames=[group])
        groups = found.get("AutoScalingGroups", [])
        if not groups:
            return None
        return {tag["Key"]: tag.get("Value", "") for tag in groups[0].get("Tags", [])}

    def groups_tagged(self, owner: str) -> frozenset[str]:
        """The names of the groups tagged ``nodecycle:owner=<owner>``: one DescribeAutoScalingGroups per page
        of them, whatever names intake is told."""
        with transient_errors("listing the groups tagged for this owner"):
            pages = (
                self._asg()
                .get_paginator("describe_auto_scaling_groups")
                .paginate(Filters=[{"Name": f"tag:{OWNER_TAG}", "Values": [owner]}])
            )
            return frozenset(
                group["AutoScalingGroupName"] for page in pages for group in page["AutoScalingGroups"]
            )

    def activity_started(self, group: str, instance_id: str, since: datetime) -> datetime | None:
        """DescribeScalingActivities of ``group`` begun since ``since`` (its StartTimeLowerBound filter), in pages of
        up to 100: the StartTime of the latest one still in progress (no EndTime) whose Description names the
        instance ("Terminating EC2 instance: i-..." for a termination: "Verify a scaling activity for an Auto Scaling
        group", Amazon EC2 Auto Scaling user guide). Any activity naming it, not a termination's wording alone: a
        root volume replacement's is not documented. The activity begins before the hooks hold the instance, so its
        start is no later than the action's (an action's own start is told by its event alone). Activities are
        kept six weeks, longer than any action lives; a group Auto Scaling no longer knows lists none.

        "Activities still in progress are described first" (the same guide): the pages stop at the first one that
        lists an activity over, so a group that went through a refresh of hundreds costs a call or two, not one per
        hundred activities of the last two days."""
        starts: list[datetime] = []
        with transient_errors("reading when a group began what it does with an instance"):
            pages = (
                self._asg()
                .get_paginator("describe_scaling_activities")
                .paginate(
                    AutoScalingGroupName=group,
                    Filters=[{"Name": "StartTimeLowerBound", "Values": [since.isoformat()]}],
                )
            )
            for page in pages:
                activities = page.get("Activities", [])
                starts += [
                    activity["StartTime"]
                    for activity in activities
                    if "EndTime" not in activity and _names(activity.get("Description", ""), instance_id)
                ]
                if any("EndTime" in activity for activity in activities):
                    break
        return max(starts) if starts else None

    def _listed(self, instance_id: str, doing: str) -> tuple[str | None, str | None]:
        """The group that lists the instance and its lifecycle state there (DescribeAutoScalingInstances); None
        and None when no group does."""
        with transient_errors(doing):
            found = self._asg().describe_auto_scaling_instances(InstanceIds=[instance_id])
        listed = found.get("AutoScalingInstances", [])
        if not listed:
            return None, None
        return str(listed[0]["AutoScalingGroupName"]), str(listed[0]["LifecycleState"])

    def lifecycle_state(self, instance_id: str) -> str | None:
        return self._listed(instance_id, "reading an instance's lifecycle state")[1]

    def membership(self, instance_id: str) -> Membership:
        group, state = self._listed(instance_id, "reading an instance's group and lifecycle state")
        if group is not None and state is not None:
            return Membership(group=group, lifecycle_state=state)
        # No group lists it: Auto Scaling forgets an instance once it is terminated (and never knew one of no
        # group). EC2 still describes a terminated instance for a while (about an hour), with the group's name
        # in the tag Auto Scaling gave it at launch; and it answers nothing for an id it does not know.
        facts = self._instances.facts(instance_id)
        if facts is None:
            return Membership(group=None, lifecycle_state=None)
        return Membership(group=facts.group, lifecycle_state=None, ec2_state=facts.state)
