"""Kubernetes adapters: EKS cluster access and the cluster port, with the official client."""
