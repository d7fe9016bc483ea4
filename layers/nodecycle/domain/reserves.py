"""What a sweep keeps of its invocation's time (see sweep/sweep_time.py), kept out of the sweep package: the settings
read it to reckon how far into its run a sweep may reach an action, and intake, which checks a hook's heartbeat
timeout against that, imports no part of the sweeper (its cold start: tests/functions/test_cold_imports.py)."""

from __future__ import annotations

from datetime import timedelta

# Of the sweeper's 300 s: one item's calls (a heartbeat, a record write, a message: up to three), each retried
# when throttled (botocore's standard mode backs off for up to about 15 s over its attempts), and the flush of
# the metrics after the last part.
SWEEP_RESERVE = timedelta(seconds=45)
