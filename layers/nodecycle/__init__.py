"""nodecycle: EC2 Auto Scaling lifecycle hooks for Kubernetes nodes and Elastic IP fleets."""
