"""`python -m agentrt` is the `agentrt` command."""

from .cli import console_main

console_main()
