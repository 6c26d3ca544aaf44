"""Fakes that speak real wire protocols on loopback, for tests."""
