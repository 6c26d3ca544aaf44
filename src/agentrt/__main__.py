"""`python -m agentrt` is the `agentrt` command."""

from .apps.cli import console_main

console_main()
