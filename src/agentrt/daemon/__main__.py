"""``python -m agentrt.daemon``: the same as ``agentrt daemon``."""

import sys

from ._main import main

sys.exit(main())
