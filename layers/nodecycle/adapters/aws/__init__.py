"""AWS adapters: the domain's ports on boto3."""
