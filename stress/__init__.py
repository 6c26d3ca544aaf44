"""Long proof suites: crash, disconnect, fuzz, isolation, secrets and load. Run ``python -m stress``."""
