"""Configuration: settings and options, the key and secret stores, the state directory."""
