"""``nodecycle rbac``: the cluster side of a deployment, rendered for its ``BudgetNamespace`` and
``KubernetesGroup`` (``deploy/rbac.yaml`` is this with the template's defaults).

Why a renderer and not a static file: the budget Role, its binding, the namespace and the shipped
ConfigMap must all name the namespace the functions are configured with, and each function's group is
derived from one prefix; a hand edit that misses one of them turns into a 403 at the first drain. The
output is plain YAML for ``kubectl apply -f -`` (or a GitOps repository), no kustomize needed.
"""

from __future__ import annotations

import argparse
import re
import string
from typing import Any

DEFAULT_NAMESPACE = "nodecycle"  # the default of the BudgetNamespace stack parameter
DEFAULT_GROUP_PREFIX = "nodecycle"  # the default of the KubernetesGroup stack parameter
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")

TEMPLATE = string.Template("""\
# What nodecycle's functions may do in the cluster, and nothing more: one Kubernetes group per function.
# Rendered by `nodecycle rbac --namespace ${namespace} --group-prefix ${prefix}` (the stack parameters
# BudgetNamespace and KubernetesGroup); apply it once per cluster, before the first drain:
#   kubectl apply -f deploy/rbac.yaml                                   # the defaults
#   nodecycle rbac --namespace NS --group-prefix P | kubectl apply -f -   # anything else
# The stack's EKS access entries (or your aws-auth mapping) put the drain function's role in the group
# ${prefix}-drain and the sweeper's in ${prefix}-sweeper. No rule lets either create anything but evictions
# and Events: the budget ConfigMap is shipped here, empty, and the functions may only read and replace that
# one object (a ConfigMap create in kube-system would let them write aws-auth and map any role to
# system:masters).
apiVersion: v1
kind: Namespace
metadata:
  name: ${namespace}
  labels: {app.kubernetes.io/name: nodecycle}
---
# The disruption budget shared by every nodecycle stack on the cluster. No data: the functions fill it,
# and re-applying this file leaves what they wrote alone.
apiVersion: v1
kind: ConfigMap
metadata:
  name: nodecycle-budget
  namespace: ${namespace}
  labels: {app.kubernetes.io/name: nodecycle, app.kubernetes.io/managed-by: nodecycle}
---
# The drain function: cordon and annotate a node, evict its pods, force-delete what is left after the
# drain timeout (TimeoutPolicy=force), clear the annotations; tell each decision as an Event.
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: ${prefix}-drain
  labels: {app.kubernetes.io/name: nodecycle}
rules:
  - apiGroups: [""]
    resources: [nodes]
    verbs: [get, list, patch] # find a node by name or provider id, cordon + annotate, release
  - apiGroups: [""]
    resources: [pods]
    verbs: [list, delete] # the pods of one node (field selector); delete: the "force" timeout policy
  - apiGroups: [""]
    resources: [pods/eviction]
    verbs: [create] # evictions respect PodDisruptionBudgets
  - apiGroups: [""]
    resources: [events]
    verbs: [create] # on the node (namespace default) and on a pod whose eviction is blocked
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: ${prefix}-drain
  labels: {app.kubernetes.io/name: nodecycle}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: ${prefix}-drain}
subjects:
  - {apiGroup: rbac.authorization.k8s.io, kind: Group, name: ${prefix}-drain}
---
# The drain function's launch readiness gate reads a node's Lease, by name: its kubelet renews it every 10 s,
# while a node object stays Ready for 40-50 s after its instance stopped (an instance back from a warm pool
# at once would otherwise go in service before its kubelet runs). So do the watches that lift a cordon after a
# reboot (scheduled maintenance, a Spot stop, a root volume replacement), on the boot id from before it. Nothing
# else in kube-node-lease.
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: ${prefix}-drain-node-leases
  namespace: kube-node-lease
  labels: {app.kubernetes.io/name: nodecycle}
rules:
  - apiGroups: [coordination.k8s.io]
    resources: [leases]
    verbs: [get]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: ${prefix}-drain-node-leases
  namespace: kube-node-lease
  labels: {app.kubernetes.io/name: nodecycle}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: ${prefix}-drain-node-leases}
subjects:
  - {apiGroup: rbac.authorization.k8s.io, kind: Group, name: ${prefix}-drain}
---
# The sweeper: list the nodes (stale budget entries, leftover annotations) and clear its own leftover
# annotations. No pods, no evictions.
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: ${prefix}-sweeper
  labels: {app.kubernetes.io/name: nodecycle}
rules:
  - apiGroups: [""]
    resources: [nodes]
    verbs: [list, patch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: ${prefix}-sweeper
  labels: {app.kubernetes.io/name: nodecycle}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: ${prefix}-sweeper}
subjects:
  - {apiGroup: rbac.authorization.k8s.io, kind: Group, name: ${prefix}-sweeper}
---
# Both read and replace the budget (with its resourceVersion); neither may create it or touch any other
# ConfigMap.
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: nodecycle-budget
  namespace: ${namespace}
  labels: {app.kubernetes.io/name: nodecycle}
rules:
  - apiGroups: [""]
    resources: [configmaps]
    resourceNames: [nodecycle-budget]
    verbs: [get, update]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: nodecycle-budget
  namespace: ${namespace}
  labels: {app.kubernetes.io/name: nodecycle}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: nodecycle-budget}
subjects:
  - {apiGroup: rbac.authorization.k8s.io, kind: Group, name: ${prefix}-drain}
  - {apiGroup: rbac.authorization.k8s.io, kind: Group, name: ${prefix}-sweeper}
""")


def documents(manifest: str) -> list[dict[str, Any]]:
    """The objects of a rendered manifest."""
    import yaml

    return [doc for doc in yaml.safe_load_all(manifest) if doc]


def render(namespace: str = DEFAULT_NAMESPACE, group_prefix: str = DEFAULT_GROUP_PREFIX) -> str:
    """The manifest for a stack with these BudgetNamespace and KubernetesGroup values."""
    if not _DNS_LABEL.match(namespace):
        raise ValueError(f"--namespace {namespace!r} is not a valid namespace name (a DNS label)")
    if not re.match(r"^[a-z0-9]([-a-z0-9.]{0,50}[a-z0-9])?$", group_prefix):
        raise ValueError(f"--group-prefix {group_prefix!r}: lower-case letters, digits, '-' and '.' only")
    return TEMPLATE.substitute(namespace=namespace, prefix=group_prefix)


def command(namespace: str, group_prefix: str) -> str:
    """This command for a stack's BudgetNamespace and KubernetesGroup, as a fix tells it: without
    ``--group-prefix`` it binds the default groups (nodecycle-drain, nodecycle-sweeper), not the ones the stack's
    access entries give its functions, which stay refused after the operator applied it."""
    return f"nodecycle rbac --namespace {namespace} --group-prefix {group_prefix}"


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "rbac",
        help="the cluster roles, the budget namespace and ConfigMap, for kubectl apply -f -",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--namespace",
        default=DEFAULT_NAMESPACE,
        help=f"the stack's BudgetNamespace parameter (default: {DEFAULT_NAMESPACE})",
    )
    parser.add_argument(
        "--group-prefix",
        default=DEFAULT_GROUP_PREFIX,
        help=f"the stack's KubernetesGroup parameter (default: {DEFAULT_GROUP_PREFIX})",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from nodecycle_cli.failures import CommandError

    try:
        manifest = render(args.namespace, args.group_prefix)
    except ValueError as error:
        raise CommandError(str(error)) from None  # exit status 2, one line: a command that could not run
    print(manifest, end="")
    return 0
