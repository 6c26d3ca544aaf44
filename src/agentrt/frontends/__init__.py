"""The front-ends: peers that each take questions and runs to people."""
