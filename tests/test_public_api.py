"""The public surface of `agentrt`: what embedders may import."""

from __future__ import annotations

import agentrt

EXPECTED = {
    "ALLOW_ONCE",
    "ALLOW_SESSION",
    "CONFIRM_CHOICES",
    "DENY",
    "default_state_dir",
    "may_have_run",
    "describe_end",
    "describe_resume",
    "EndWords",
    "AgentConfig",
    "AlreadyAnsweredError",
    "Answer",
    "BadAnswerError",
    "BadSessionIdError",
    "BadWorkdirError",
    "Cause",
    "CauseScope",
    "ClosedListenerError",
    "Entry",
    "EntryGoneError",
    "EntryState",
    "Event",
    "Executor",
    "ExecutorError",
    "Listener",
    "ListenerGoneError",
    "Message",
    "Model",
    "ModelError",
    "ModelResponse",
    "NoPendingTaskError",
    "NotOwnerError",
    "Outcome",
    "PendingTaskExistsError",
    "Registry",
    "RegistryStatistics",
    "ReplayModel",
    "Request",
    "RequestContext",
    "RequestKind",
    "RunEnded",
    "Runtime",
    "SavedQuestion",
    "ScriptedModel",
    "SecretStore",
    "SessionBusyError",
    "StateDirError",
    "StoreError",
    "SudoVerifier",
    "TaskInfo",
    "TaskRecord",
    "TaskStarted",
    "TaskStatus",
    "TaskStore",
    "UnreadableTask",
    "TextDelta",
    "TextEvent",
    "ToolCall",
    "ToolCallDelta",
    "ToolCallDeltaEvent",
    "ToolCallEvent",
    "ToolError",
    "ToolResultEvent",
    "ToolSpec",
    "UnknownTaskError",
    "UsageEvent",
    "Verifier",
    "VerifyEvent",
    "bind_context",
    "cause_of",
    "current_context",
    "make_model",
    "open_runtime",
    "origin_of",
}


def test_public_names_are_exactly_the_documented_surface() -> None:
    public = {name for name in vars(agentrt) if not name.startswith("_")}
    modules = {"cli", "codec", "frames", "client", "daemon", "http", "bots", "providers", "lab"}
    assert public - modules == EXPECTED


def test_public_names_are_reexported_from_private_modules_with_docstrings() -> None:
    constants = {"ALLOW_ONCE", "ALLOW_SESSION", "CONFIRM_CHOICES", "DENY"}
    assert agentrt.CONFIRM_CHOICES == (agentrt.ALLOW_ONCE, agentrt.ALLOW_SESSION, agentrt.DENY)
    for name in EXPECTED - {"Event"} - constants:  # Event is a type union, not a class
        obj = getattr(agentrt, name)
        module = getattr(obj, "__module__", "agentrt._x")
        assert module.startswith("agentrt._"), name
        assert obj.__doc__, f"{name} has no docstring"
