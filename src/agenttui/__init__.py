"""agenttui: the terminal client of the agentrt daemon."""
