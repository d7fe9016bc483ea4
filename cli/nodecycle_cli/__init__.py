"""The nodecycle command line: the local sandbox, the demo, the disruption budget, lifecycle status."""
