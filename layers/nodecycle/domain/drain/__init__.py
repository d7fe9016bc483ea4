"""Draining a terminating node, and the launch readiness gate: the steps that talk to Kubernetes."""
