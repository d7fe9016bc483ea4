"""The headers by which the runner asks the sandbox's SQS for a second receive of one given message (an
``sqs-duplicate`` delivery: SQS's duplicate is a receive of its own, with a new handle), and by which the answer
tells the new handle and receive count. No SQS API receives one given message, so the runner sends a
ChangeMessageVisibility of the handle in hand carrying RECEIVE_AGAIN_HEADER (``aws/sqs_receipts.py`` answers it).

Apart from ``aws/sqs_receipts.py`` because the runner's fault hooks run in every container (a worker process),
which must not import moto: a layer that ships its own copy of a library moto imports (yaml) would get moto's
instead, and every container would pay for moto's import."""

RECEIVE_AGAIN_HEADER = "x-nodecycle-sandbox-receive-again"
RECEIPT_HANDLE_HEADER = "x-nodecycle-sandbox-receipt-handle"
RECEIVE_COUNT_HEADER = "x-nodecycle-sandbox-receive-count"
