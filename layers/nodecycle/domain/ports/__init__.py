"""The ports the domain talks through, one module per kind of thing on the other side:

- :mod:`.runtime`: the clock and metrics;
- :mod:`.lifecycle`: lifecycle records, the work queues and their messages, Auto Scaling;
- :mod:`.cluster`: Kubernetes nodes and pods as a drain sees them, and EC2 instances' names;
- :mod:`.budget`: where the disruption budget's document lives, the nodes in its scope, and the budget as
  the drain steps and the sweeper use it;
- :mod:`.addresses`: Elastic IPs.

Adapters implement them with boto3 and the Kubernetes client; unit tests with fakes.
"""
