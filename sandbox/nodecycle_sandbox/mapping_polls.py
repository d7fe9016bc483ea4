"""The headers by which an event source mapping's poller (the runner's, ``runner/sqs_source.py``) says whose its
long polls are, and by which the runner ends them (``aws/sqs_mapping_polls.py`` answers them).

Lambda's pollers long-poll an SQS queue for up to 20 seconds, and a disabled mapping stops receiving. The
sandbox's SQS knows, from these headers, which mapping a long poll is for (``MAPPING_HEADER``: its UUID in the
sandbox's Lambda) and which set of pollers sent it (``POLLER_HEADER``: a token of one ``SqsEventSource``); a
ReceiveMessage carrying ``END_POLLS_HEADER`` as well ends that set's long polls under way, and receives nothing.

Apart from ``aws/sqs_mapping_polls.py`` for the reason ``sqs_receive_again.py`` is: the runner must not import moto.
"""

MAPPING_HEADER = "x-nodecycle-sandbox-mapping"
POLLER_HEADER = "x-nodecycle-sandbox-poller"
END_POLLS_HEADER = "x-nodecycle-sandbox-end-polls"
