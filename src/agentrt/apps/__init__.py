"""The applications: the `agentrt` command, the lab, and the daemon process."""
