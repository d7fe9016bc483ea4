"""``nodecycle budget``: look at the shared disruption budget, and free a slot by hand.

    nodecycle budget show [--stack NAME] [--json]
    nodecycle budget release NODE [--stack NAME] [--yes]

Both talk to the cluster of the current kubeconfig (``--kubeconfig``, ``--context``), a real one or the
sandbox's, and read the ``nodecycle-budget`` ConfigMap of ``--namespace``. With ``--stack``, the namespace
is the stack's ``BudgetNamespace``, and the kubeconfig's server is compared with the stack's EKS cluster
(a mismatch is said on stderr: the budget shown would be another cluster's, and ``show`` exits 1, with
``--json`` the error object instead of it; ``release`` refuses to free a slot there, and with ``--yes`` where the
two cannot be compared). ``release`` frees the slot of any owner,
after a question that names it; with ``--stack``, a slot another owner holds is freed only when the question
is answered (``--yes`` refuses it: a stack never frees what another owner holds).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from nodecycle_cli import json_errors, rbac
from nodecycle_cli.cluster import add_kubeconfig_arguments, api_client, mismatch
from nodecycle_cli.deployment import add_stack_arguments, find, session, stack_named_by
from nodecycle_cli.failures import CommandError, explain
from nodecycle_cli.output import age, table

if TYPE_CHECKING:
    from nodecycle.adapters.kube.budget import ConfigMapBudgetStore
    from nodecycle.domain.budget import BudgetDocument, BudgetView, Holder
    from nodecycle.domain.budget.view import HolderView, WaiterView

DEFAULT_NAMESPACE = "nodecycle"  # the default of the BudgetNamespace stack parameter
DEFAULT_NAME = "nodecycle-budget"

SHOW = (
    "The disruption budget every nodecycle stack on the cluster shares: the slots held (node, zone, owner, since "
    "when, last renewed, forced or not), the nodes waiting in line and which is next, and the limits each stack "
    "resolved, cluster-wide and per zone. Read-only."
)
RELEASE = (
    "Free the budget slot NODE holds, for a drain that is stuck (a node waiting in line holds none: nothing is "
    "released for it). Asks first, naming the slot's owner; with its input closed it releases nothing. With "
    "--stack, another owner's slot is freed only when the question is answered, never with --yes. A slot that is "
    "not renewed frees itself after BudgetHolderTtlSeconds: this is for not waiting that long. A slot its drain "
    "renewed within the last third of that is a drain still running: the question says so (with --yes, a warning "
    "after the release)."
)


def register(commands: Any) -> None:
    """Add ``budget show`` and ``budget release`` to ``commands`` (an ``add_subparsers()`` result)."""
    cluster = argparse.ArgumentParser(add_help=False)
    add_kubeconfig_arguments(cluster)
    add_stack_arguments(cluster)
    cluster.add_argument(
        "--namespace",
        help=f"namespace of the budget (default: the stack's BudgetNamespace, else {DEFAULT_NAMESPACE})",
    )
    cluster.add_argument(
        "--name", default=DEFAULT_NAME, help=f"name of the ConfigMap (default: {DEFAULT_NAME})"
    )

    budget = commands.add_parser(
        "budget",
        help="show the disruption budget, or release a slot by hand",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = budget.add_subparsers(dest="budget_command", required=True, metavar="ACTION")

    show = actions.add_parser(
        "show",
        parents=[cluster],
        help="holders, waiters and limits, per zone, with their ages",
        description=SHOW,
    )
    show.add_argument(
        "-o", "--output", choices=("table", "json"), default="table", help="how to print it (default: table)"
    )
    show.add_argument("--json", dest="output", action="store_const", const="json", help="same as -o json")
    show.set_defaults(run=show_budget)

    release = actions.add_parser(
        "release",
        parents=[cluster],
        help="free the slot a node holds, whatever stack holds it, after asking (for a drain that is stuck)",
        description=RELEASE,
    )
    release.add_argument("node", metavar="NODE", help="the node's name, or its instance's id")
    release.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
    release.set_defaults(run=release_slot, stack_owner=None)


def show_budget(args: argparse.Namespace) -> int:
    from nodecycle.domain.budget import view_of

    store = _store(args)
    elsewhere = getattr(args, "elsewhere", None)
    if elsewhere is not None and args.output == "json":
        # A script reads stdout as the stack's budget: another cluster's would say, in an incident, that the
        # stack's drains hold no slot. The error object instead (the warning is on stderr already)
        json_errors.write("budget show", f"{elsewhere}: nothing shown", 1)
        return 1
    with _readable(store):
        doc = store.read()
    if doc is None:
        note = _no_budget(args)
        if args.output == "json":
            # the error object of every command asked for JSON (a bare null reads as an empty budget to `jq`)
            json_errors.write("budget show", note, 1)
        print(note, file=sys.stderr if args.output == "json" else sys.stdout)
        return 1
    view = view_of(doc, datetime.now(UTC))
    if args.output == "json":
        print(view.model_dump_json(indent=2))
    else:
        print(render(view, f"{args.namespace}/{args.name}"))
    # (shown, for a person, under the warning: but not the stack's budget, which the exit status says)
    return 0 if elsewhere is None else 1


def release_slot(args: argparse.Namespace) -> int:
    from nodecycle.adapters.kube.budget import BudgetContention
    from nodecycle.domain.budget.rules import force_release
    from nodecycle.domain.errors import TransientError
    from nodecycle.domain.ports.cluster import Refused

    store = _store(args)
    with _readable(store):
        doc = store.read()
    if doc is None:
        # a namespace without the budget (often not the stack's: no --stack nor --namespace) is not a node
        # that holds nothing
        print(f"{_no_budget(args)} Nothing released.")
        return 1
    # by the node's name, or by its instance's id (what an alarm and the logs give: their instance_id)
    holder = doc.holder(args.node) or next((h for h in doc.holders if h.instance_id == args.node), None)
    if holder is None:
        waiter = doc.waiter(args.node) or next((w for w in doc.waiters if w.instance_id == args.node), None)
        where = "" if waiter is None else f" (it is waiting, for owner {waiter.owner})"
        print(f"{args.node} holds no budget slot{where}. Nothing released.")
        return 1
    # the node the slot is held for, as every line below names it (with the instance id it was asked by)
    named = holder.node if holder.node == args.node else f"{holder.node} (instance {args.node})"
    acting_for = args.stack_owner
    another = (
        "" if acting_for in (None, holder.owner) else f", not by stack {args.stack} (owner {acting_for})"
    )
    running = _running(holder, datetime.now(UTC))
    if another and args.yes:
        # A stack never frees what another owner holds (invariant 3): nor does its operator without being asked
        raise CommandError(
            # (never "without --stack": with --yes kept, that frees any owner's slot with no question at all)
            f"the budget slot of {named} is held by owner {holder.owner}{another}: nothing released "
            "(to free it all the same, run the command again without --yes and answer the question, which names "
            "its owner)"
        )
    if not args.yes:
        try:
            answer = input(
                f"Release the budget slot of {named} held by {holder.owner}{another}"
                f"{f' ({running})' if running else ''}? [y/N] "
            )
        except EOFError:
            # input closed (a script, a pipe): no answer is not a yes
            # (--yes is no way out for another owner's slot: that one is freed only when the question is answered)
            how = (
                "answer it at a terminal" if another else f"pass --yes to release the slot of {named} unasked"
            )
            raise CommandError(
                f"no answer to the question (the input is closed): nothing released; {how}"
            ) from None
        if answer.strip().lower() not in ("y", "yes"):
            print("Nothing released.")
            return 1

    def remove(current: BudgetDocument | None) -> tuple[BudgetDocument | None, Holder | None]:
        # the holder confirmed, not whatever holds the node by now
        still = None if current is None else current.holder(holder.node)
        if current is None or still is None or still.record_id != holder.record_id:
            return current, None
        return force_release(current, still, datetime.now(UTC)), still

    with _readable(store):
        try:
            removed = store.update(remove)
        except BudgetContention as error:
            # each write lost to another writer (drains renewing, waiters queueing): none of them was applied
            raise CommandError(f"{error}: nothing released; run the command again") from None
        except Refused as error:
            # the API server's 403 (or 401) to the read or the replace: nothing was written, as for the others
            raise CommandError(f"{explain(error) or error}: nothing released") from None
        except TransientError as error:
            # The write's answer was lost (a timeout, a connection closed): it may have landed. What the budget
            # holds now says what is true, not the error
            return _released_or_not(store, holder, error)
    if removed is None:
        print(
            f"The slot of {named} changed meanwhile (released, or taken by another lifecycle): nothing released."
        )
        return 1
    held = age((datetime.now(UTC) - removed.acquired_at).total_seconds())
    print(
        f"Released the budget slot of {removed.node}: owner {removed.owner}, instance {removed.instance_id}, "
        f"lifecycle {removed.record_id}, held for {held}.\n"
        "Waiting nodes take it at their next retry. If that drain is still running, it takes a slot again at "
        "its next step when there is room, and otherwise pauses until there is."
    )
    if running and args.yes:
        # unasked, what the question would have said, for the log of whatever ran it (after the write: a
        # command that fails says its one line alone)
        print(f"warning: the slot of {named} was held by owner {holder.owner}: {running}", file=sys.stderr)
    return 0


def _running(holder: Holder, now: datetime) -> str:
    """What to tell before freeing the slot of a drain that is still running ('' for one that looks stuck).

    A running drain renews its slot every third of its TTL (rules.RENEWALS_PER_TTL): one renewed within that is
    alive, held up maybe by a PodDisruptionBudget, not stuck. Freed, its slot goes to the next waiter, whose drain
    starts evicting while this one still does: one node more disrupted than the limits allow, until this drain's
    next step finds its slot gone and pauses. A seeded holder's stamp is its seeding's, not its drain's: not told.
    """
    from nodecycle.domain.budget.rules import RENEWALS_PER_TTL

    renewed = now - holder.renewed_at
    if holder.seeded or renewed >= timedelta(seconds=holder.ttl_seconds) / RENEWALS_PER_TTL:
        return ""
    every = age(holder.ttl_seconds / RENEWALS_PER_TTL)
    return (
        f"its drain renewed it {age(renewed.total_seconds())} ago, as it does every {every}: it is running, not "
        "stuck; freed, the slot goes to a waiting node whose drain starts beside it, past the limits"
    )


def _released_or_not(store: ConfigMapBudgetStore, holder: Holder, error: Exception) -> int:
    """After a release whose answer was lost: whether the lifecycle confirmed still holds the node's slot."""
    from nodecycle.domain.errors import TransientError

    try:
        doc = store.read()
    except TransientError as again:
        raise CommandError(
            f"{error}; the budget cannot be read to know whether the slot of {holder.node} was released ({again}):"
            " look with nodecycle budget show before running the command again"
        ) from None
    still = None if doc is None else doc.holder(holder.node)
    if still is not None and still.record_id == holder.record_id:
        raise CommandError(f"{error}: nothing released; run the command again") from None
    print(
        f"The answer to the release was lost ({error}), but the slot of {holder.node} is no longer held by lifecycle "
        f"{holder.record_id}: released (by this command, or meanwhile by that lifecycle or another)."
    )
    return 0


def _no_budget(args: argparse.Namespace) -> str:
    prefix = getattr(args, "group_prefix", None)  # known with --stack only
    install = (
        f"nodecycle rbac --namespace {args.namespace}"
        if prefix is None
        else rbac.command(args.namespace, prefix)
    )
    return (
        f"No budget: ConfigMap {args.namespace}/{args.name} does not exist, and nodecycle does not create it."
        f" Apply it with the RBAC: {install} | kubectl apply -f -"
    )


def render(view: BudgetView, where: str) -> str:
    """The view as tables, for people."""
    lines = [f"Disruption budget {where} (format {view.format_version})", ""]
    lines += table(
        "LIMITS",
        ["OWNER", "MAX-UNAVAILABLE", "PER-ZONE", "NODES", "COUNTS-UNAVAILABLE", "UPDATED"],
        [
            [
                lim.owner,
                f"{lim.max_unavailable} (={lim.total})"
                if lim.max_unavailable != str(lim.total)
                else str(lim.total),
                lim.max_unavailable_per_zone or "-",
                "-" if lim.nodes_in_scope is None else str(lim.nodes_in_scope),
                f"yes ({len(lim.unavailable)} now)" if lim.count_unavailable else "no",
                f"{age(lim.updated_seconds_ago)} ago",
            ]
            for lim in view.limits
        ],
    )
    counted_by: dict[str, list[str]] = {}
    for lim in view.limits:
        for node in lim.unavailable:
            counted_by.setdefault(node, []).append(lim.owner)
    if counted_by:
        lines += table(
            "UNAVAILABLE FOR OTHER REASONS (cordoned or NotReady, held by no one)",
            ["NODE", "COUNTED-BY"],
            [[node, ", ".join(owners)] for node, owners in sorted(counted_by.items())],
        )
    lines += table(
        "ZONES",
        ["ZONE", "HOLDERS", "WAITING", "LIMIT"],
        [
            [
                z.zone or "(unknown: counts in every zone)",
                str(z.holders),
                str(z.waiters),
                ", ".join(f"{owner}: {limit}" for owner, limit in z.limits.items()) or "-",
            ]
            for z in view.zones
        ],
    )
    lines += table(
        f"HOLDERS {_count(view.holders)}",
        ["NODE", "INSTANCE", "ZONE", "OWNER", "HELD", "RENEWED", "EXPIRES", "FORCED", "SEEDED"],
        [
            [
                h.node,
                h.instance_id,
                h.zone or "-",
                h.owner,
                age(h.held_seconds),
                f"{age(h.renewed_seconds_ago)} ago",
                _expiry(h.expires_in_seconds),
                # taken without room (the runbook's Budget exceeded looks for these)
                "forced" if h.forced else "",
                # from the nodes' annotations into a ConfigMap created again; its drain has not asked since
                "seeded" if h.seeded else "",
            ]
            for h in view.holders
        ],
    )
    lines += table(
        f"WAITERS {_count(view.waiters)}",
        ["#", "NODE", "ZONE", "OWNER", "WAITING", "EXPIRES", "NEXT"],
        [
            [
                str(w.position),
                w.node,
                w.zone or "-",
                w.owner,
                age(w.waiting_seconds),
                _expiry(w.expires_in_seconds),
                "yes" if w.eligible else "",
            ]
            for w in view.waiters
        ],
    )
    return "\n".join(lines).rstrip()


def _count(entries: Sequence[HolderView | WaiterView]) -> str:
    """How many entries a list shows, and, when some expired, how many of them count: the zones count only
    those (an expired entry is in the ConfigMap until the next write removes it, and limits no one)."""
    expired = sum(1 for e in entries if e.expires_in_seconds <= 0)
    if not expired:
        return f"({len(entries)})"
    return f"({len(entries)}: {len(entries) - expired} counted, {expired} expired and counted by no one)"


def _expiry(seconds: float) -> str:
    return "expired" if seconds <= 0 else f"in {age(seconds)}"


@contextmanager
def _readable(store: ConfigMapBudgetStore) -> Iterator[None]:
    """A budget document this version cannot read (another stack sharing the cluster was upgraded, or someone
    edited it by hand) is one line that names the ConfigMap; it is never rewritten."""
    from nodecycle.domain.budget import BudgetFormatError

    try:
        yield
    except BudgetFormatError as error:
        raise CommandError(
            f"ConfigMap {store.namespace}/{store.name} holds a budget this nodecycle cannot read ({error}): "
            "nothing changed; use the nodecycle version of the stacks that share the cluster"
        ) from None


def _store(args: argparse.Namespace) -> ConfigMapBudgetStore:
    from kubernetes import client

    from nodecycle.adapters.kube.budget import ConfigMapBudgetStore

    kube = api_client(args)
    if args.stack:
        aws = session(args)
        with stack_named_by(args):
            deployment = find(aws, args.stack)
        args.namespace = args.namespace or deployment.parameter("BudgetNamespace", DEFAULT_NAMESPACE)
        # the stack's functions' groups, for the command that installs a missing budget (see _no_budget)
        args.group_prefix = deployment.parameter("KubernetesGroup", rbac.DEFAULT_GROUP_PREFIX)
        if args.budget_command == "release":
            args.stack_owner = deployment.owner  # whose slots this operator frees without a second thought
        if deployment.cluster is not None and (wrong := mismatch(kube, aws, deployment.cluster)):
            if wrong.known and args.budget_command == "release":
                # a stack acts on its own cluster only: its owner id may hold slots elsewhere too (the
                # stack's name, where each account deploys the same stack)
                raise CommandError(f"{wrong.why}: nothing released")
            if args.budget_command == "release" and args.yes:
                # nor, unasked, where it cannot tell: the question names the slot's owner and node, for a person
                # who sees the warning
                raise CommandError(
                    f"{wrong.why}: nothing released unasked (run the command again without --yes, to be asked)"
                )
            if wrong.known:
                args.elsewhere = wrong.why  # another cluster's budget: no success for show (see show_budget)
            print(f"warning: {wrong.why}", file=sys.stderr)
    args.namespace = args.namespace or DEFAULT_NAMESPACE
    api = client.CoreV1Api(kube)
    return ConfigMapBudgetStore(lambda: api, args.namespace, args.name)
