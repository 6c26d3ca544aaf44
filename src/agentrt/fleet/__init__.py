"""The fleet: daemons sharing a PostgreSQL store, their leases and fencing."""
