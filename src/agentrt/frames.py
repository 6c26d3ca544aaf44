"""The frames of the daemon protocol, and the one converter that (un)structures them.

The public names of `agentrt.protocol.frames`, where the code lives."""

from __future__ import annotations

from .protocol.frames import CANCEL_CAUSES as CANCEL_CAUSES
from .protocol.frames import CLIENT_FRAMES as CLIENT_FRAMES
from .protocol.frames import DAEMON_FRAMES as DAEMON_FRAMES
from .protocol.frames import EVENT_FRAMES as EVENT_FRAMES
from .protocol.frames import LIST_PAGE as LIST_PAGE
from .protocol.frames import LIST_PAGE_MAX as LIST_PAGE_MAX
from .protocol.frames import MESSAGES_PAGE as MESSAGES_PAGE
from .protocol.frames import MESSAGES_PAGE_MAX as MESSAGES_PAGE_MAX
from .protocol.frames import PROTOCOL_VERSION as PROTOCOL_VERSION
from .protocol.frames import Ack as Ack
from .protocol.frames import AnswerFrame as AnswerFrame
from .protocol.frames import AskFrame as AskFrame
from .protocol.frames import AskWithdrawn as AskWithdrawn
from .protocol.frames import C as C
from .protocol.frames import Cancel as Cancel
from .protocol.frames import ClientFrame as ClientFrame
from .protocol.frames import DaemonAction as DaemonAction
from .protocol.frames import DaemonFrame as DaemonFrame
from .protocol.frames import DaemonRequest as DaemonRequest
from .protocol.frames import DaemonStatus as DaemonStatus
from .protocol.frames import EndedFrame as EndedFrame
from .protocol.frames import ErrorCode as ErrorCode
from .protocol.frames import ErrorFrame as ErrorFrame
from .protocol.frames import EventFrame as EventFrame
from .protocol.frames import Frame as Frame
from .protocol.frames import FrameError as FrameError
from .protocol.frames import Hello as Hello
from .protocol.frames import ModelItem as ModelItem
from .protocol.frames import ModelList as ModelList
from .protocol.frames import ModelsAction as ModelsAction
from .protocol.frames import ModelsRequest as ModelsRequest
from .protocol.frames import PendingAction as PendingAction
from .protocol.frames import PendingDetail as PendingDetail
from .protocol.frames import PendingLines as PendingLines
from .protocol.frames import PendingList as PendingList
from .protocol.frames import PendingRequest as PendingRequest
from .protocol.frames import PendingTask as PendingTask
from .protocol.frames import ReasoningFrame as ReasoningFrame
from .protocol.frames import Run as Run
from .protocol.frames import Scope as Scope
from .protocol.frames import SessionItem as SessionItem
from .protocol.frames import SessionList as SessionList
from .protocol.frames import SessionMessage as SessionMessage
from .protocol.frames import SessionMessages as SessionMessages
from .protocol.frames import SessionsAction as SessionsAction
from .protocol.frames import SessionsRequest as SessionsRequest
from .protocol.frames import TaskFrame as TaskFrame
from .protocol.frames import TextFrame as TextFrame
from .protocol.frames import ToolCallDeltaFrame as ToolCallDeltaFrame
from .protocol.frames import ToolCallFrame as ToolCallFrame
from .protocol.frames import ToolProgressFrame as ToolProgressFrame
from .protocol.frames import ToolResultFrame as ToolResultFrame
from .protocol.frames import UsageFrame as UsageFrame
from .protocol.frames import VerifyFrame as VerifyFrame
from .protocol.frames import Welcome as Welcome
from .protocol.frames import converter as converter
from .protocol.frames import frame_of as frame_of
from .protocol.frames import from_wire as from_wire
from .protocol.frames import from_wire_slow as from_wire_slow
from .protocol.frames import older_pause_hook as older_pause_hook
from .protocol.frames import to_wire as to_wire
from .protocol.frames import to_wire_slow as to_wire_slow

__all__ = [
    "CANCEL_CAUSES",
    "CLIENT_FRAMES",
    "DAEMON_FRAMES",
    "EVENT_FRAMES",
    "LIST_PAGE",
    "LIST_PAGE_MAX",
    "MESSAGES_PAGE",
    "MESSAGES_PAGE_MAX",
    "PROTOCOL_VERSION",
    "Ack",
    "AnswerFrame",
    "AskFrame",
    "AskWithdrawn",
    "C",
    "Cancel",
    "ClientFrame",
    "DaemonAction",
    "DaemonFrame",
    "DaemonRequest",
    "DaemonStatus",
    "EndedFrame",
    "ErrorCode",
    "ErrorFrame",
    "EventFrame",
    "Frame",
    "FrameError",
    "Hello",
    "ModelItem",
    "ModelList",
    "ModelsAction",
    "ModelsRequest",
    "PendingAction",
    "PendingDetail",
    "PendingLines",
    "PendingList",
    "PendingRequest",
    "PendingTask",
    "ReasoningFrame",
    "Run",
    "Scope",
    "SessionItem",
    "SessionList",
    "SessionMessage",
    "SessionMessages",
    "SessionsAction",
    "SessionsRequest",
    "TaskFrame",
    "TextFrame",
    "ToolCallDeltaFrame",
    "ToolCallFrame",
    "ToolProgressFrame",
    "ToolResultFrame",
    "UsageFrame",
    "VerifyFrame",
    "Welcome",
    "converter",
    "frame_of",
    "from_wire",
    "from_wire_slow",
    "older_pause_hook",
    "to_wire",
    "to_wire_slow",
]
