"""nodecycle's benchmarks: the real product end to end on the local sandbox, each figure set side by side with
an ideal or a baseline measured in the same run. Run ``python -m benchmarks`` (``--help`` for sizes).

Every figure comes from what the sandbox recorded (the API server's write history and request counters, the
emulated lifecycle actions, the runner's journal of invocations and their AWS calls), never from nodecycle's
own logs or metrics.
"""
