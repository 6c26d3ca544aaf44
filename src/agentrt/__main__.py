"""`python -m agentrt` is the `agentrt` command."""

from .apps.entry import console_main

console_main()
