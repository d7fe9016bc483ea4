"""drain: one step at a time of the lifecycles on the drain queue (terminate drains, launch readiness gates,
completions). Each SQS record is one work message; a record that fails alone is reported to SQS (partial
batch response), retried, and dead-lettered at last. The template's WakeFunction runs this same handler on
the wake queue (budget wake-ups): its engine is the drain worker's, so what it sends next goes to the drain
queue."""

from __future__ import annotations

from nodecycle.entrypoints import work_queue_handler
from nodecycle.wiring.drain import engine, shared

handler = work_queue_handler(engine, lambda: shared().metrics)
