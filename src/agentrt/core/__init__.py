"""The runtime's core: causes, the pending registry, the executor, policy and refusals."""
