"""moto's first request to each service, paid once per AWS zygote rather than once per sandbox.

The first request a moto server takes for a service imports the service's backend, makes its Flask app (and, to
read the app's routes, a backend of another region) and loads botocore's model of the service (several MB of
JSON for EC2): about a CPU-second in all for the dozen services a sandbox calls, in every AWS process, on the way
to the sandbox being up. The AWS zygote (``zygote.AWS_PRELOAD``) imports this module, which does all that once:
each AWS process forked from it starts with the apps made (``server.backend_app``) and the models loaded (moto's
``get_service_model`` keeps them). Nothing here holds a sandbox's state: the backends the sandbox's account and
region use are made by its own requests, in its own process.
"""

from __future__ import annotations

from moto.core.utils import get_service_model

from nodecycle_sandbox.aws.server import backend_app, prepare

# The services the sandbox serves, as moto names their apps and as botocore names their models
SERVICES = {
    "autoscaling": "autoscaling",
    "awslambda": "lambda",
    "cloudformation": "cloudformation",
    "dynamodb": "dynamodb",
    "ec2": "ec2",
    "eks": "eks",
    "events": "events",
    "iam": "iam",
    "logs": "logs",
    "sns": "sns",
    "sqs": "sqs",
    "sts": "sts",
}


def warm() -> None:
    prepare()  # (the settings first: EC2's backend made without them would build moto's stock images)
    for app, model in SERVICES.items():
        backend_app(app)
        get_service_model(model)


warm()  # (on import: the zygote imports what it preloads)
