"""``python -m nodecycle_cli``: the ``nodecycle`` command where its script is not on PATH (a virtualenv that is
not activated, ``pip install --user``)."""

import sys

from nodecycle_cli.main import main

sys.exit(main())
