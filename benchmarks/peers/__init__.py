"""agentrt's pause -> persisted -> resume cycle beside its peers' interrupt/approval cycles.

Run with ``make bench-peers``: it installs LangGraph (with its SQLite
checkpointer) and the OpenAI Agents SDK into their own virtualenv,
``.venv-peers``, from ``benchmarks/peers/constraints.txt``, together with
agentrt itself (editable), and runs ``python -m benchmarks.peers`` there. The
peers never become dependencies of agentrt, and the project's own virtualenv
does not have them.

All the cycles run in one process, in rotating order, so that every system
meets the same machine at the same moments.
"""
