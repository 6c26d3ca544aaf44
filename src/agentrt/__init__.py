"""agentrt: a Trio runtime for LLM agents that stop to ask a human.

The public names are re-exported here from the private modules that define
them; `tests/test_public_api.py` pins this surface.
"""

from ._agent import AgentConfig as AgentConfig
from ._agent import ToolError as ToolError
from ._cause import Cause as Cause
from ._cause import CauseScope as CauseScope
from ._cause import cause_of as cause_of
from ._context import RequestContext as RequestContext
from ._context import bind_context as bind_context
from ._context import current_context as current_context
from ._context import origin_of as origin_of
from ._events import Event as Event
from ._events import Outcome as Outcome
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
from ._executor import NoPendingTaskError as NoPendingTaskError
from ._executor import NotOwnerError as NotOwnerError
from ._executor import PendingTaskExistsError as PendingTaskExistsError
from ._executor import SessionBusyError as SessionBusyError
from ._executor import TaskInfo as TaskInfo
from ._executor import UnknownTaskError as UnknownTaskError
from ._messages import Message as Message
from ._messages import Model as Model
from ._messages import ModelError as ModelError
from ._messages import ModelResponse as ModelResponse
from ._messages import TextDelta as TextDelta
from ._messages import ToolCall as ToolCall
from ._messages import ToolCallDelta as ToolCallDelta
from ._messages import ToolSpec as ToolSpec
from ._pending import ALLOW_ONCE as ALLOW_ONCE
from ._pending import ALLOW_SESSION as ALLOW_SESSION
from ._pending import CONFIRM_CHOICES as CONFIRM_CHOICES
from ._pending import DENY as DENY
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
from ._pending import Request as Request
from ._pending import RequestKind as RequestKind
from ._present import EndWords as EndWords
from ._present import describe_end as describe_end
from ._record import SavedQuestion as SavedQuestion
from ._record import TaskRecord as TaskRecord
from ._record import TaskStatus as TaskStatus
from ._runtime import Runtime as Runtime
from ._runtime import default_state_dir as default_state_dir
from ._runtime import make_model as make_model
from ._runtime import open_runtime as open_runtime
from ._scripted import ReplayModel as ReplayModel
from ._scripted import ScriptedModel as ScriptedModel
from ._secrets import SecretStore as SecretStore
from ._statedir import StateDirError as StateDirError
from ._store import StoreError as StoreError
from ._store import TaskStore as TaskStore
from ._store import UnreadableTask as UnreadableTask
from ._sudo import SudoVerifier as SudoVerifier
from ._sudo import Verifier as Verifier

__version__ = "0.1.0"
