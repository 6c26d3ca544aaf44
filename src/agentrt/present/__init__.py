"""How things read: a run's end, a pending task's line, and the JSON shapes shown."""
