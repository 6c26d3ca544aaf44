"""What resuming a kept task will do, worked out with what the tools say of themselves.

`agentrt.store.ledger.preview_of` reads a record into a `ResumePreview`; what
it cannot read from the record is whether a tool records its start before it
takes effect (`Tool.RECORDS_START`), which decides what a crash left of a call
that recorded none. This is the one place that puts the two together, so the
terminal, the `agentrt` command, the HTTP API and the bots preview alike.
"""

from __future__ import annotations

from ..store.ledger import preview_of
from ..store.record import TaskRecord
from ..vocab.stops import ResumePreview
from .tools import records_start


def resume_preview(record: TaskRecord) -> ResumePreview:
    """What resuming `record` will do: the calls kept, those that run, what is asked again."""
    return preview_of(record, records_start)
