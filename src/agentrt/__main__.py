"""`python -m agentrt` is the `agentrt` command."""

import sys

from .cli import main

sys.exit(main())
