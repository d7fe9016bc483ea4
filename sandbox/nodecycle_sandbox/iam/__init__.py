"""IAM for the sandbox: the identity policies of the template's roles, evaluated on every AWS call.

- ``policy``: statements as parsed from a policy document (Action/NotAction, Resource/NotResource,
  Principal, Condition);
- ``conditions``: the condition operators the template uses, with AWS's semantics for missing keys,
  ``IfExists`` and the ``ForAllValues``/``ForAnyValue`` set operators;
- ``evaluate``: a request (action, resource, context keys) against a set of statements: an explicit Deny
  wins, else an Allow, else the implicit deny;
- ``template``: the policies of each function's role (and of the other roles) read from ``template.yaml``;
- ``identities``: which access key acts as which role (the AWS process's table) and the journal of every
  decision;
- ``requests`` and ``enforce``: moto's requests turned into IAM requests from moto's own state (resource
  ARNs, tags), and the hook that answers a denied call as AWS does;
- ``resource_policies``: a service principal's call judged by the resource's own policy (EventBridge sending to
  a rule target's dead-letter queue);
- ``summary`` and ``necessity``: every permission a deployment grants, one line each (the reviewed list),
  and which of them the recorded calls needed.
"""

from nodecycle_sandbox.iam.evaluate import Decision, Request, Verdict, evaluate
from nodecycle_sandbox.iam.policy import PolicyError, Statement, parse_policy

__all__ = ["Decision", "PolicyError", "Request", "Statement", "Verdict", "evaluate", "parse_policy"]
