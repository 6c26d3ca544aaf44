"""agentrt: a Trio runtime for LLM agents that stop to ask a human.

The public names are re-exported here from the private modules that define
them; `tests/test_public_api.py` pins this surface. They are imported on first
use (a module ``__getattr__``), so a program that needs only the protocol
(``agentrt.client``, agenttui) never loads the executor, the store or sqlite3.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:  # what type checkers see; at run time `__getattr__` imports each on first use
    from ._cause import CauseScope as CauseScope
    from ._cause import cause_of as cause_of
    from ._config import AgentConfig as AgentConfig
    from ._context import RequestContext as RequestContext
    from ._context import bind_context as bind_context
    from ._context import current_context as current_context
    from ._events import Event as Event
    from ._events import ReasoningEvent as ReasoningEvent
    from ._events import RunEnded as RunEnded
    from ._events import TaskStarted as TaskStarted
    from ._events import TextEvent as TextEvent
    from ._events import ToolCallDeltaEvent as ToolCallDeltaEvent
    from ._events import ToolCallEvent as ToolCallEvent
    from ._events import ToolResultEvent as ToolResultEvent
    from ._events import UsageEvent as UsageEvent
    from ._events import VerifyEvent as VerifyEvent
    from ._events import describe_resume as describe_resume
    from ._events import may_have_run as may_have_run
    from ._executor import BadAnswerError as BadAnswerError
    from ._executor import BadSessionIdError as BadSessionIdError
    from ._executor import BadWorkdirError as BadWorkdirError
    from ._executor import Executor as Executor
    from ._executor import ExecutorError as ExecutorError
    from ._executor import ModelNotConfiguredError as ModelNotConfiguredError
    from ._executor import NoPendingTaskError as NoPendingTaskError
    from ._executor import NotOwnerError as NotOwnerError
    from ._executor import PendingTaskExistsError as PendingTaskExistsError
    from ._executor import SessionBusyError as SessionBusyError
    from ._executor import TaskInfo as TaskInfo
    from ._executor import UnknownSessionError as UnknownSessionError
    from ._executor import UnknownTaskError as UnknownTaskError
    from ._locations import default_state_dir as default_state_dir
    from ._messages import Message as Message
    from ._messages import Model as Model
    from ._messages import ModelError as ModelError
    from ._messages import ModelResponse as ModelResponse
    from ._messages import ReasoningDelta as ReasoningDelta
    from ._messages import TextDelta as TextDelta
    from ._messages import ThinkingBlock as ThinkingBlock
    from ._messages import ToolCall as ToolCall
    from ._messages import ToolCallDelta as ToolCallDelta
    from ._messages import ToolSpec as ToolSpec
    from ._pending import AlreadyAnsweredError as AlreadyAnsweredError
    from ._pending import Answer as Answer
    from ._pending import ClosedListenerError as ClosedListenerError
    from ._pending import Entry as Entry
    from ._pending import EntryGoneError as EntryGoneError
    from ._pending import EntryState as EntryState
    from ._pending import Listener as Listener
    from ._pending import ListenerGoneError as ListenerGoneError
    from ._pending import Registry as Registry
    from ._pending import RegistryStatistics as RegistryStatistics
    from ._present import EndWords as EndWords
    from ._present import describe_end as describe_end
    from ._request import Request as Request
    from ._runtime import Runtime as Runtime
    from ._runtime import make_model as make_model
    from ._runtime import open_runtime as open_runtime
    from ._scripted import ReplayModel as ReplayModel
    from ._scripted import ScriptedModel as ScriptedModel
    from ._secrets import SecretStore as SecretStore
    from ._statedir import StateDirError as StateDirError
    from ._sudo import SudoVerifier as SudoVerifier
    from ._sudo import Verifier as Verifier
    from ._tools import ToolError as ToolError
    from ._vocab import ALLOW_ONCE as ALLOW_ONCE
    from ._vocab import ALLOW_SESSION as ALLOW_SESSION
    from ._vocab import CONFIRM_CHOICES as CONFIRM_CHOICES
    from ._vocab import DENY as DENY
    from ._vocab import Approval as Approval
    from ._vocab import Cause as Cause
    from ._vocab import Outcome as Outcome
    from ._vocab import RequestKind as RequestKind
    from ._vocab import TaskStatus as TaskStatus
    from ._vocab import origin_of as origin_of
    from .store.errors import StoreError as StoreError
    from .store.record import SavedQuestion as SavedQuestion
    from .store.record import TaskRecord as TaskRecord
    from .store.sqlite import TaskStore as TaskStore
    from .store.types import UnreadableTask as UnreadableTask

#: Where each public name is defined; `__getattr__` imports it from there when first asked.
_WHERE: dict[str, str] = {
    "CauseScope": "_cause",
    "AgentConfig": "_config",
    "cause_of": "_cause",
    "RequestContext": "_context",
    "bind_context": "_context",
    "current_context": "_context",
    "Event": "_events",
    "ReasoningEvent": "_events",
    "RunEnded": "_events",
    "TaskStarted": "_events",
    "TextEvent": "_events",
    "ToolCallDeltaEvent": "_events",
    "ToolCallEvent": "_events",
    "ToolResultEvent": "_events",
    "UsageEvent": "_events",
    "VerifyEvent": "_events",
    "describe_resume": "_events",
    "EndWords": "_present",
    "describe_end": "_present",
    "may_have_run": "_events",
    "BadAnswerError": "_executor",
    "BadSessionIdError": "_executor",
    "BadWorkdirError": "_executor",
    "Executor": "_executor",
    "ExecutorError": "_executor",
    "NoPendingTaskError": "_executor",
    "NotOwnerError": "_executor",
    "PendingTaskExistsError": "_executor",
    "ModelNotConfiguredError": "_executor",
    "SessionBusyError": "_executor",
    "TaskInfo": "_executor",
    "UnknownSessionError": "_executor",
    "UnknownTaskError": "_executor",
    "default_state_dir": "_locations",
    "Message": "_messages",
    "Model": "_messages",
    "ModelError": "_messages",
    "ModelResponse": "_messages",
    "ReasoningDelta": "_messages",
    "TextDelta": "_messages",
    "ThinkingBlock": "_messages",
    "ToolCall": "_messages",
    "ToolCallDelta": "_messages",
    "ToolSpec": "_messages",
    "AlreadyAnsweredError": "_pending",
    "Answer": "_pending",
    "ClosedListenerError": "_pending",
    "Entry": "_pending",
    "EntryGoneError": "_pending",
    "EntryState": "_pending",
    "Listener": "_pending",
    "ListenerGoneError": "_pending",
    "Registry": "_pending",
    "RegistryStatistics": "_pending",
    "Request": "_request",
    "SavedQuestion": "store.record",
    "TaskRecord": "store.record",
    "TaskStatus": "_vocab",
    "Runtime": "_runtime",
    "make_model": "_runtime",
    "open_runtime": "_runtime",
    "ReplayModel": "_scripted",
    "ScriptedModel": "_scripted",
    "SecretStore": "_secrets",
    "StateDirError": "_statedir",
    "StoreError": "store.errors",
    "TaskStore": "store.sqlite",
    "UnreadableTask": "store.types",
    "SudoVerifier": "_sudo",
    "Verifier": "_sudo",
    "ToolError": "_tools",
    "ALLOW_ONCE": "_vocab",
    "ALLOW_SESSION": "_vocab",
    "CONFIRM_CHOICES": "_vocab",
    "Approval": "_vocab",
    "Cause": "_vocab",
    "DENY": "_vocab",
    "Outcome": "_vocab",
    "RequestKind": "_vocab",
    "origin_of": "_vocab",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'agentrt' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"agentrt.{module}"), name)
    globals()[name] = value  # the next lookup finds it directly
    return value


def __dir__() -> list[str]:
    return sorted({*__all__, "__version__"})
