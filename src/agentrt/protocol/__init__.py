"""The protocol layer: the daemon's frames, their codec and a Trio client; knows no runtime."""
