"""Adapters: the ports of the domain implemented with boto3 and the Kubernetes client."""
