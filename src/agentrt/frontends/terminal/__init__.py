"""The terminal front-end: the daemon's Unix-socket server and its connections."""
