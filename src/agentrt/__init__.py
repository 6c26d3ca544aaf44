"""agentrt: a Trio runtime for LLM agents that stop to ask a human."""
