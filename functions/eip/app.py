"""eip: Elastic IP work from the EIP queue (SQS, in batches): assign at launch, take back at terminate.

Each record is one work message of one lifecycle. The step engine runs the step (or a few inline), commits
the record and sends the next message, to this queue or the drain queue. A record whose body is not a work
message is logged and dropped; a record that raises fails alone (partial batch response), and SQS retries
it, then dead-letters it. This function never imports the Kubernetes client (cold start).
"""

from __future__ import annotations

from nodecycle.entrypoints import work_queue_handler
from nodecycle.wiring.eip import engine, shared

handler = work_queue_handler(engine, lambda: shared().metrics)
