"""The agent loop and its tools: model rounds, tool calls, their processes and sandbox."""
