"""``python -m tfthroughput.cli``: the ``tfthroughput`` command."""

from __future__ import annotations

import sys

from tfthroughput.cli import main

sys.exit(main())
