"""agentrt: a Trio runtime for LLM agents that stop to ask a human.

The public names are re-exported here from the private modules that define
them; `tests/test_public_api.py` pins this surface. They are imported on first
use (a module ``__getattr__``), so a program that needs only the protocol
(``agentrt.client``, agenttui) never loads the executor, the store or sqlite3.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING
from typing import Any

__version__ = "0.1.0"

if TYPE_CHECKING:  # what type checkers see; at run time `__getattr__` imports each on first use
    from .agent.config import AgentConfig as AgentConfig
    from .agent.sudo import SudoVerifier as SudoVerifier
    from .agent.sudo import Verifier as Verifier
    from .agent.tools import ToolError as ToolError
    from .config.secrets import SecretStore as SecretStore
    from .config.statedir import StateDirError as StateDirError
    from .core.cause import CauseScope as CauseScope
    from .core.cause import cause_of as cause_of
    from .core.cause import stop_cause as stop_cause
    from .core.context import RequestContext as RequestContext
    from .core.context import bind_context as bind_context
    from .core.context import current_context as current_context
    from .core.executor import BadAnswerError as BadAnswerError
    from .core.executor import BadSessionIdError as BadSessionIdError
    from .core.executor import BadWorkdirError as BadWorkdirError
    from .core.executor import Executor as Executor
    from .core.executor import ExecutorError as ExecutorError
    from .core.executor import LateAnswerError as LateAnswerError
    from .core.executor import ModelNotConfiguredError as ModelNotConfiguredError
    from .core.executor import NoPendingTaskError as NoPendingTaskError
    from .core.executor import NotOwnerError as NotOwnerError
    from .core.executor import PendingTaskExistsError as PendingTaskExistsError
    from .core.executor import SessionBusyError as SessionBusyError
    from .core.executor import TaskInfo as TaskInfo
    from .core.executor import UnknownSessionError as UnknownSessionError
    from .core.executor import UnknownTaskError as UnknownTaskError
    from .core.pending import AlreadyAnsweredError as AlreadyAnsweredError
    from .core.pending import Answer as Answer
    from .core.pending import ClosedListenerError as ClosedListenerError
    from .core.pending import Entry as Entry
    from .core.pending import EntryGoneError as EntryGoneError
    from .core.pending import EntryState as EntryState
    from .core.pending import Listener as Listener
    from .core.pending import ListenerGoneError as ListenerGoneError
    from .core.pending import QuestionExpiredError as QuestionExpiredError
    from .core.pending import Registry as Registry
    from .core.pending import RegistryStatistics as RegistryStatistics
    from .core.runtime import Runtime as Runtime
    from .core.runtime import make_model as make_model
    from .core.runtime import open_runtime as open_runtime
    from .models.messages import Message as Message
    from .models.messages import Model as Model
    from .models.messages import ModelError as ModelError
    from .models.messages import ModelResponse as ModelResponse
    from .models.messages import ReasoningDelta as ReasoningDelta
    from .models.messages import TextDelta as TextDelta
    from .models.messages import ThinkingBlock as ThinkingBlock
    from .models.messages import ToolCall as ToolCall
    from .models.messages import ToolCallDelta as ToolCallDelta
    from .models.messages import ToolSpec as ToolSpec
    from .models.scripted import ReplayModel as ReplayModel
    from .models.scripted import ScriptedModel as ScriptedModel
    from .present.ends import EndWords as EndWords
    from .present.ends import describe_end as describe_end
    from .store.errors import StoreError as StoreError
    from .store.record import SavedQuestion as SavedQuestion
    from .store.record import TaskRecord as TaskRecord
    from .store.sqlite import TaskStore as TaskStore
    from .store.types import UnreadableTask as UnreadableTask
    from .vocab.events import CompactionEvent as CompactionEvent
    from .vocab.events import Event as Event
    from .vocab.events import ReasoningEvent as ReasoningEvent
    from .vocab.events import RunEnded as RunEnded
    from .vocab.events import TaskStarted as TaskStarted
    from .vocab.events import TextEvent as TextEvent
    from .vocab.events import ToolCallDeltaEvent as ToolCallDeltaEvent
    from .vocab.events import ToolCallEvent as ToolCallEvent
    from .vocab.events import ToolResultEvent as ToolResultEvent
    from .vocab.events import UsageEvent as UsageEvent
    from .vocab.events import VerifyEvent as VerifyEvent
    from .vocab.events import describe_resume as describe_resume
    from .vocab.events import may_have_run as may_have_run
    from .vocab.locations import default_state_dir as default_state_dir
    from .vocab.questions import QuestionState as QuestionState
    from .vocab.questions import QuestionTrace as QuestionTrace
    from .vocab.questions import Timeout as Timeout
    from .vocab.questions import TimeoutAction as TimeoutAction
    from .vocab.questions import Timeouts as Timeouts
    from .vocab.request import Request as Request
    from .vocab.terms import ALLOW_ONCE as ALLOW_ONCE
    from .vocab.terms import ALLOW_SESSION as ALLOW_SESSION
    from .vocab.terms import CONFIRM_CHOICES as CONFIRM_CHOICES
    from .vocab.terms import DENY as DENY
    from .vocab.terms import Approval as Approval
    from .vocab.terms import Cause as Cause
    from .vocab.terms import Outcome as Outcome
    from .vocab.terms import RequestKind as RequestKind
    from .vocab.terms import TaskStatus as TaskStatus
    from .vocab.terms import origin_of as origin_of

#: Where each public name is defined; `__getattr__` imports it from there when first asked.
_WHERE: dict[str, str] = {
    "CauseScope": "core.cause",
    "AgentConfig": "agent.config",
    "cause_of": "core.cause",
    "stop_cause": "core.cause",
    "RequestContext": "core.context",
    "bind_context": "core.context",
    "current_context": "core.context",
    "Event": "vocab.events",
    "ReasoningEvent": "vocab.events",
    "RunEnded": "vocab.events",
    "TaskStarted": "vocab.events",
    "TextEvent": "vocab.events",
    "ToolCallDeltaEvent": "vocab.events",
    "ToolCallEvent": "vocab.events",
    "ToolResultEvent": "vocab.events",
    "UsageEvent": "vocab.events",
    "CompactionEvent": "vocab.events",
    "VerifyEvent": "vocab.events",
    "describe_resume": "vocab.events",
    "EndWords": "present.ends",
    "describe_end": "present.ends",
    "may_have_run": "vocab.events",
    "BadAnswerError": "core.executor",
    "BadSessionIdError": "core.executor",
    "BadWorkdirError": "core.executor",
    "Executor": "core.executor",
    "ExecutorError": "core.executor",
    "LateAnswerError": "core.executor",
    "NoPendingTaskError": "core.executor",
    "NotOwnerError": "core.executor",
    "PendingTaskExistsError": "core.executor",
    "ModelNotConfiguredError": "core.executor",
    "SessionBusyError": "core.executor",
    "TaskInfo": "core.executor",
    "UnknownSessionError": "core.executor",
    "UnknownTaskError": "core.executor",
    "default_state_dir": "vocab.locations",
    "Message": "models.messages",
    "Model": "models.messages",
    "ModelError": "models.messages",
    "ModelResponse": "models.messages",
    "ReasoningDelta": "models.messages",
    "TextDelta": "models.messages",
    "ThinkingBlock": "models.messages",
    "ToolCall": "models.messages",
    "ToolCallDelta": "models.messages",
    "ToolSpec": "models.messages",
    "AlreadyAnsweredError": "core.pending",
    "Answer": "core.pending",
    "ClosedListenerError": "core.pending",
    "Entry": "core.pending",
    "EntryGoneError": "core.pending",
    "EntryState": "core.pending",
    "Listener": "core.pending",
    "ListenerGoneError": "core.pending",
    "QuestionExpiredError": "core.pending",
    "QuestionState": "vocab.questions",
    "QuestionTrace": "vocab.questions",
    "Timeout": "vocab.questions",
    "TimeoutAction": "vocab.questions",
    "Timeouts": "vocab.questions",
    "Registry": "core.pending",
    "RegistryStatistics": "core.pending",
    "Request": "vocab.request",
    "SavedQuestion": "store.record",
    "TaskRecord": "store.record",
    "TaskStatus": "vocab.terms",
    "Runtime": "core.runtime",
    "make_model": "core.runtime",
    "open_runtime": "core.runtime",
    "ReplayModel": "models.scripted",
    "ScriptedModel": "models.scripted",
    "SecretStore": "config.secrets",
    "StateDirError": "config.statedir",
    "StoreError": "store.errors",
    "TaskStore": "store.sqlite",
    "UnreadableTask": "store.types",
    "SudoVerifier": "agent.sudo",
    "Verifier": "agent.sudo",
    "ToolError": "agent.tools",
    "ALLOW_ONCE": "vocab.terms",
    "ALLOW_SESSION": "vocab.terms",
    "CONFIRM_CHOICES": "vocab.terms",
    "Approval": "vocab.terms",
    "Cause": "vocab.terms",
    "DENY": "vocab.terms",
    "Outcome": "vocab.terms",
    "RequestKind": "vocab.terms",
    "origin_of": "vocab.terms",
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
