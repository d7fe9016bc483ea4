"""What this stack manages, and the hook facts it needs: looked up once and cached per container."""

from __future__ import annotations

import logging
import re
from collections import OrderedDict
from collections.abc import Callable
from datetime import datetime, timedelta

from nodecycle.domain.errors import TransientError
from nodecycle.domain.ports.lifecycle import Autoscaling, Hook, WaitingInstance
from nodecycle.domain.ports.runtime import Clock

log = logging.getLogger(__name__)

OWNER_TAG = "nodecycle:owner"
# The most names of groups Auto Scaling does not have that a container remembers (the oldest are forgotten
# first): anyone allowed to send to the intake queue can name as many as they like, and each would otherwise
# stay for the container's life. Far above what real events ask (a group deleted while its events drain).
MAX_ABSENT_GROUPS = 1000
# How many names no answer here covers (new names, or names Auto Scaling did not have when last asked) a container
# asks Auto Scaling about: a burst of LOOKUP_BURST, then one per LOOKUP_EVERY. The answers above bound the calls
# for names told again, but not for names each told once: a flood of them (a misconfigured forwarder, thousands
# a minute) cost a DescribeAutoScalingGroups each and throttled the account's Auto Scaling API, which the drains'
# heartbeats and completions share. Past the bound, a name is answered by the listing of the groups tagged for
# this owner (one DescribeAutoScalingGroups for every name, read again at most once per LOOKUP_EVERY), and one it
# does not have is not managed and not remembered. Answered "not managed" without a call (before), the flood's
# names kept a group of this stack's that the container had not seen (a new group, a cold container) from its
# actions' events: each dropped, left to the sweeper's adoption minutes later. A listing is trusted for the ttl of
# an answer by name, no longer (one that keeps failing is not), and read again at most once per LIST_EVERY; while
# none answers (it failed: throttled, refused), such a name's event is retried, not dropped as unmanaged (a
# refusal that stays ends each in the dead-letter queue, one listing asked per LIST_EVERY). Names in the settings
# are not bounded (few, and only a read by name tells one tagged for another stack). Groups already known are read
# again after the ttl whatever the bound (one read per group and ttl). The burst is what a cold container may need at once (the events
# of up to 50 groups scaling together); the rate, what a flood costs past it (20 DescribeAutoScalingGroups a minute
# per container and two listings, not thousands).
LOOKUP_BURST = 50
LOOKUP_EVERY = timedelta(seconds=3)
# How often a container reads the listing of the groups tagged for this owner again at most (one
# DescribeAutoScalingGroups per page of 50 groups). Read again every LOOKUP_EVERY while a flood asked, it cost a
# container 20 listings a minute (600 DescribeAutoScalingGroups a minute at 150 groups and a concurrency of 10).
# A listing is final for an action that started before it was read (a group exists, with its tags, before its
# instances' actions start); an action that started since, of a group it does not have, may be of a group created
# since: retried until a listing read after its start answers it, never dropped (LIST_EVERY is well under the
# intake queue's 180 s redelivery, which so finds one). A flood's names, dated now, are each retried once so.
LIST_EVERY = timedelta(seconds=30)
# How many names of hooks their groups do not have a container remembers (see LifecycleHooks.get).
MAX_ABSENT_HOOKS = 1000
# An Auto Scaling group's name as Auto Scaling accepts it (ResourceName: 1 to 255 characters, no control
# character but tab, CR, LF): another cannot be a group, and Auto Scaling would refuse to describe it.
_GROUP_NAME = re.compile(r"[^\x00-\x08\x0b\x0c\x0e-\x1f]{1,255}")


def _again[E: BaseException](error: E) -> E:
    """An exception like ``error`` (its type, words and attributes: a retry_after, a refused call's code) to raise
    anew. One object raised again and again keeps the frames of every raise in its traceback: the listing's failure,
    raised again for each name of a flood within LIST_EVERY (hundreds), would keep thousands of frames and their
    locals, and a refusal's traceback, logged at each, would grow with each."""
    again = type(error).__new__(type(error), *error.args)
    again.__dict__.update(error.__dict__)
    return again


class ManagedGroups:
    """Decides whether an Auto Scaling group belongs to this stack.

    A group is managed when it is named in the settings, or (when enabled) when it carries the tag
    ``nodecycle:owner=<owner id>``; never when that tag names another owner (named here by mistake, it is
    that stack's: two stacks taking one action would each drain, and one complete it under the other's
    drain). Tag answers are cached for ``ttl`` so that a burst of events of one group costs one
    DescribeAutoScalingGroups, and a newly tagged group is picked up within minutes. Names Auto Scaling does
    not have (a forged notification's) are remembered apart, at most ``MAX_ABSENT_GROUPS`` of them, so that a
    flood of invented names neither grows a warm container for ever nor pushes out the groups that exist; and
    with ``bounded_lookups``, names not known here are looked up at most ``LOOKUP_BURST`` at once and one per
    ``LOOKUP_EVERY`` after.

    The ttl's trade-off: a group created or tagged for this stack after its name was asked about (its first
    events came before the group, or before its tag) is found only once the ttl is over, its actions' events
    meanwhile ignored (and adopted by the sweeper); a shorter ttl finds it sooner but costs one more read per
    ttl of every name told again, invented ones included (5 minutes: a sweep interval, within which the sweeper
    adopts what intake ignored anyway).
    """

    def __init__(
        self,
        *,
        owner: str,
        names: tuple[str, ...],
        by_tag: bool,
        hooks: tuple[str, ...],
        autoscaling: Autoscaling,
        clock: Clock,
        ttl: timedelta = timedelta(minutes=5),
        bounded_lookups: bool = False,
        tagged: Callable[[str], frozenset[str]] | None = None,
    ) -> None:
        """``tagged``: the names of the groups tagged for an owner (one listing), asked past the bound of
        ``bounded_lookups`` (None: a name past it is taken for unmanaged)."""
        self._owner = owner
        self._names = frozenset(names)
        self._by_tag = by_tag
        self._hooks = None if "*" in hooks else frozenset(hooks)  # None: every hook
        self._autoscaling = autoscaling
        self._clock = clock
        self._ttl = ttl
        self._tagged: dict[str, tuple[str | None, datetime]] = {}  # group -> its owner tag, when read
        self._absent: OrderedDict[str, datetime] = OrderedDict()  # names no group has -> when read
        self._bounded_lookups = bounded_lookups  # (the functions' wiring bounds them: see LOOKUP_BURST)
        self._lookups = Lookups()  # of names not known here
        self._unasked = 0  # names taken for unmanaged without a lookup since the last warning
        self._list_tagged = tagged
        self._listed: tuple[frozenset[str], datetime] | None = None  # the last listing, and when it was read
        self._listing_asked_at: datetime | None = None  # the last attempt, read or refused
        self._listing_failed: TransientError | None = None  # how the last attempt failed, if it did

    def manages(self, group: str, hook: str, *, started: datetime | None = None) -> bool:
        """``started``: when the action told of started (the listing past the bound answers it only once read
        since). Raises TransientError when Auto Scaling does not answer now (AccessRefused when it refuses)."""
        if not self.takes_hook(hook):
            return False
        return self.manages_group(group, started=started)

    def takes_hook(self, hook: str) -> bool:
        return self._hooks is None or hook in self._hooks

    def manages_group(self, group: str, *, started: datetime | None = None) -> bool:
        if group not in self._names and not self._by_tag:
            return False
        return self._owns(group, self._owner_tag(group, started))

    def waiting_instances(self) -> list[WaitingInstance]:
        """The instances that hooks hold in this stack's groups: one listing (in pages) for all of them."""
        found = self._autoscaling.waiting_instances(
            tuple(sorted(self._names)), self._owner if self._by_tag else None
        )
        return [w for w in found if self._owns(w.group, w.group_tags.get(OWNER_TAG))]

    def _owns(self, group: str, owner: str | None) -> bool:
        """Whether ``group``, whose owner tag says ``owner``, is this stack's (named here or tagged for it)."""
        if group in self._names and owner not in (None, self._owner):
            log.error(
                "group %s is named in this stack's managed groups but tagged %s=%s: left to that stack",
                group,
                OWNER_TAG,
                owner,
            )
            return False
        return group in self._names or (self._by_tag and owner == self._owner)

    def _owner_tag(self, group: str, started: datetime | None) -> str | None:
        now = self._clock.now()
        cached = self._tagged.get(group)
        if cached and now - cached[1] < self._ttl:
            return cached[0]
        absent = self._absent.get(group)
        if (absent and now - absent < self._ttl) or not _GROUP_NAME.fullmatch(group):
            return None
        # (the names in the settings are not bounded: there are few, each read once per ttl, and only a read by
        # name tells whether one is tagged for another stack, which the listing of this owner's cannot)
        if (
            cached is None
            and group not in self._names
            and self._bounded_lookups
            and not self._may_look_up(group, now)
        ):
            return self._listed_owner(group, now, started)
        tags = self._autoscaling.group_tags(group)
        self._absent.pop(group, None)
        if tags is None:
            self._tagged.pop(group, None)
            self._absent[group] = now
            if len(self._absent) > MAX_ABSENT_GROUPS:
                self._absent.popitem(last=False)
            return None
        owner = tags.get(OWNER_TAG)
        self._tagged[group] = (owner, now)
        return owner

    def _listed_owner(self, group: str, now: datetime, started: datetime | None) -> str | None:
        """The owner tag of a name the bound left no lookup for, as the listing of the groups tagged for this owner
        tells it: this owner, or None (not remembered) when the listing does not have the name. One listing answers
        every such name, of every record and invocation of the container, for the ttl of an answer by name; for an
        action that ``started`` after it was read, a name it does not have may be a group created since (an action
        starts once its instance has launched, seconds after its group was created with its tags): the listing is
        read again, at most once per LIST_EVERY, and meanwhile the event is retried (TransientError), not dropped.
        While the listing fails (throttled, refused) and none answers, the event is retried with that failure.
        A group tagged for this owner long after its creation is found as one tagged after its name was asked
        about is (its next events, the sweeper's adoption)."""
        if self._list_tagged is None:
            return None
        names, read_at = self._listing(
            self._list_tagged, group, now, None if started is None else min(started, now)
        )
        if group not in names:
            return None
        self._tagged[group] = (self._owner, read_at)
        return self._owner

    def _listing(
        self,
        list_tagged: Callable[[str], frozenset[str]],
        group: str,
        now: datetime,
        started: datetime | None,
    ) -> tuple[frozenset[str], datetime]:
        """A listing that answers about ``group`` for an action that ``started`` then: one within the ttl that has
        it, or read since (None: any listing within the ttl)."""
        listed = self._listed
        if (
            listed is not None
            and now - listed[1] < self._ttl
            and (group in listed[0] or started is None or listed[1] >= started)
        ):
            return listed
        if self._listing_asked_at is not None and now - self._listing_asked_at < LIST_EVERY:
            # (at most one listing per LIST_EVERY: the names that follow a failed or recent one are retried)
            if self._listing_failed is not None:
                raise _again(self._listing_failed)
            raise TransientError(
                f"group {group} is not in the listing of the groups tagged for {self._owner}, read before its action "
                f"started and read again at most once per {LIST_EVERY.total_seconds():.0f} s: retried",
                # (its retry comes once the listing may be read again: sooner, it would find the same answer)
                retry_after=(LIST_EVERY - (now - self._listing_asked_at)).total_seconds(),
            )
        # (the attempt stamped before the call: one refused or throttled is not asked again by each name that follows
        # it within LIST_EVERY, which are retried with its failure meanwhile)
        self._listing_asked_at = now
        try:
            self._listed = (list_tagged(self._owner), now)
        except TransientError as error:
            self._listing_failed = error
            raise
        self._listing_failed = None
        return self._listed

    def _may_look_up(self, group: str, now: datetime) -> bool:
        if self._lookups.take(now):
            if self._unasked:
                log.warning(
                    "%d names of groups not known here answered by the listing of this owner's groups, not asked "
                    "about one by one (more than %d at once, then one per %.0f s: forged or broken messages?)",
                    self._unasked,
                    LOOKUP_BURST,
                    LOOKUP_EVERY.total_seconds(),
                )
                self._unasked = 0
            return True
        if not self._unasked:  # (once per run of them: a flood's names are not logged one by one)
            log.warning("group %s not looked up: too many names of groups not known here at once", group)
        self._unasked += 1
        return False


class Lookups:
    """A token bucket of lookups: ``LOOKUP_BURST`` at once, then one per ``LOOKUP_EVERY`` (see LOOKUP_BURST)."""

    def __init__(self) -> None:
        self._left = float(LOOKUP_BURST)
        self._counted_at: datetime | None = None

    def take(self, now: datetime) -> bool:
        if self._counted_at is not None:
            refilled = max(now - self._counted_at, timedelta(0)) / LOOKUP_EVERY
            self._left = min(float(LOOKUP_BURST), self._left + refilled)
        self._counted_at = now
        if self._left < 1:
            return False
        self._left -= 1
        return True


class LifecycleHooks:
    """Lifecycle hooks as Auto Scaling describes them, read again once ``ttl`` has passed.

    A hook rarely changes, so a burst of actions costs one DescribeLifecycleHooks; but when an operator
    lowers its timeout, a warm container must not keep timing heartbeats by the old, longer value (the
    action would expire mid-drain): the answer is trusted for ``ttl`` only, on the wall clock.
    """

    def __init__(self, autoscaling: Autoscaling, clock: Clock, ttl: timedelta = timedelta(minutes=1)) -> None:
        self._autoscaling = autoscaling
        self._clock = clock
        self._ttl = ttl
        self._cache: dict[tuple[str, str], tuple[Hook, datetime]] = {}  # (group, hook) -> the hook, when read
        # (group, hook) the group does not have -> when read, oldest first (as ManagedGroups' absent names)
        self._absent: OrderedDict[tuple[str, str], datetime] = OrderedDict()
        self._fresh_reads = Lookups()  # within the ttl (an event's transition not its hook's)
        self._groups: dict[str, tuple[dict[str, Hook], datetime]] = {}

    def get(self, group: str, name: str, *, fresh: bool = False) -> Hook | None:
        """The hook; ``fresh``: read from Auto Scaling even within the ttl (before refusing on its answer), as
        often as ``LOOKUP_BURST`` allows.

        A hook the group does not have is remembered as such for the ttl too (at most ``MAX_ABSENT_HOOKS`` of
        them): each message naming one, or naming a hook with the other transition (a forged or broken one,
        thousands a minute from a misconfigured forwarder), cost a DescribeLifecycleHooks, on the Auto Scaling
        API the drains' heartbeats and completions share. The trade-off: a hook created since is found once
        the ttl is over, and one recreated for the other transition at once, unless a flood of such messages
        used the fresh reads up (then once the ttl is over); meanwhile intake retries an event whose action
        started after the answer was read (``read_before``) rather than dropping it."""
        key = (group, name)
        now = self._clock.now()
        cached = self._cache.get(key)
        read_at = cached[1] if cached is not None else self._absent.get(key)
        if read_at is not None and now - read_at < self._ttl and not (fresh and self._fresh_reads.take(now)):
            return cached[0] if cached is not None else None
        hook = self._autoscaling.hook(group, name)
        self._absent.pop(key, None)
        if hook is None:
            self._cache.pop(key, None)
            self._absent[key] = now
            if len(self._absent) > MAX_ABSENT_HOOKS:
                self._absent.popitem(last=False)
            return None
        self._cache[key] = (hook, now)
        return hook

    def read_again_in(self, group: str, name: str) -> float:
        """Seconds until the answer here about the hook is past its ttl, and read again (0: it is already)."""
        key = (group, name)
        cached = self._cache.get(key)
        read_at = cached[1] if cached is not None else self._absent.get(key)
        if read_at is None:
            return 0.0
        return max((self._ttl - (self._clock.now() - read_at)).total_seconds(), 0.0)

    def read_before(self, group: str, name: str, when: datetime) -> bool:
        """Whether the answer here about the hook (as ``get`` last gave it) was read before ``when``: an answer
        read since an action started tells the hook that holds it (a hook exists before its actions start); one
        read before may predate the hook's creation, or its recreation for the other transition."""
        key = (group, name)
        cached = self._cache.get(key)
        read_at = cached[1] if cached is not None else self._absent.get(key)
        return read_at is not None and read_at < when

    def forget_groups(self) -> None:
        """Read each group's hooks (``of``) again at its next use, whatever the ttl: once per sweep."""
        self._groups.clear()

    def of(self, group: str) -> dict[str, Hook]:
        """The group's hooks by name (one DescribeLifecycleHooks per group and ttl)."""
        now = self._clock.now()
        cached = self._groups.get(group)
        if cached is not None and now - cached[1] < self._ttl:
            return cached[0]
        hooks = self._autoscaling.hooks_of(group)
        self._groups[group] = (hooks, now)
        return hooks
