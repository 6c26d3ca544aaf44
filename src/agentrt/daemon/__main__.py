"""``python -m agentrt.daemon``: the same as ``agentrt daemon``."""

import sys

from . import main

sys.exit(main())
