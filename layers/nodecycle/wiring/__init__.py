"""Composition roots: build each function's services from the validated settings, once per container.

Each function imports only its own module here, so a function that does not talk to Kubernetes never
imports the Kubernetes client.
"""
