"""The OpenAPI 3.2 document of the HTTP API, served at `/openapi.json`.

The request bodies' schemas are made from the attrs classes the server
structures them into, the run events' from the event classes, every
enumeration from the enum it stands for, the session id's pattern from the
rule the server checks, and the page's file names from the package's folder,
so the document cannot drift from what the server accepts and sends. The
routes are listed here once, with their words and the links between them; a
test keeps them equal to the server's, and another fuzzes a running server
against this document.

OpenAPI 3.2 is the first version that says what a schema of an event stream
means: ``itemSchema`` describes each server-sent event.
"""

from __future__ import annotations

import enum
import types
import typing
from typing import Any

import attrs

from ...core.cause import Cause
from ...core.pending import EntryState
from ...core.pending import RequestKind
from ...models.messages import Role
from ...present.shapes import EVENT_TYPES
from ...protocol.frames import LIST_PAGE
from ...protocol.frames import LIST_PAGE_MAX
from ...protocol.frames import MESSAGES_PAGE
from ...protocol.frames import MESSAGES_PAGE_MAX
from ...store import UnreadableTask
from ...vocab.events import RunEnded
from ...vocab.questions import QuestionState
from ...vocab.stops import PreviewCall
from ...vocab.stops import StopKind
from ...vocab.terms import TaskStatus
from .bodies import OLDER_FIELDS
from .bodies import AnswerBody
from .bodies import CancelBody
from .bodies import EditBody
from .bodies import ModelBody
from .bodies import ResumeBody
from .bodies import RunBody
from .bodies import UndoBody
from .files import page_files
from .frontend import CHAT_SESSION_ID_PATTERN
from .frontend import CURSOR_PATTERN
from .frontend import EVENT_RING
from .frontend import SESSION_ID_PATTERN

_PRIMITIVES: dict[Any, str] = {str: "string", bool: "boolean", int: "integer", float: "number"}


def type_schema(hint: Any) -> dict[str, Any]:
    """The JSON Schema of a field's type: a primitive, an enum, a JSON object, or one or null."""
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return {"enum": [member.value for member in hint]}
    if hint in _PRIMITIVES:
        return {"type": _PRIMITIVES[hint]}
    if typing.get_origin(hint) is dict and typing.get_args(hint)[0] is str:
        return {"type": "object"}
    args = typing.get_args(hint)
    if isinstance(hint, types.UnionType) and len(args) == 2 and type(None) in args:
        (inner,) = (a for a in args if a is not type(None))
        schema = type_schema(inner)
        if "type" in schema:
            return {"type": [schema["type"], "null"]}
        return {"enum": [*schema["enum"], None]}
    raise TypeError(f"no JSON Schema for {hint!r}; add it to type_schema")


def body_schema(cls: type) -> dict[str, Any]:
    """The JSON Schema of a request body: the attrs class `cls`, no other keys allowed.

    A field's ``metadata["schema"]`` adds to its schema (``minLength``, say);
    an older spelling the body's decode step still reads (`OLDER_FIELDS`) is
    stated beside the fields.
    """
    hints = typing.get_type_hints(cls)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for field in attrs.fields(cls):
        schema = type_schema(hints[field.name])
        if field.default is attrs.NOTHING:
            required.append(field.name)
        elif isinstance(field.default, enum.Enum):
            schema["default"] = field.default.value
        elif field.default is not None:
            schema["default"] = field.default
        properties[field.name] = schema | dict(field.metadata.get("schema", {}))
    older = dict(OLDER_FIELDS.get(cls, {}))
    out: dict[str, Any] = {"type": "object", "properties": properties | older.pop("properties", {})}
    if required:
        out["required"] = required
    return out | older | {"additionalProperties": False}


#: The status a stored task that cannot be read is listed with.
_UNREADABLE = str(attrs.fields(UnreadableTask).status.default)
_ERROR = {"$ref": "#/components/responses/Error"}
_STRING = {"type": "string"}
_NULLABLE = {"type": ["string", "null"]}


_COUNT = {"type": "integer", "minimum": 0}
_TOKENS = {
    name: _COUNT
    for name in ("rounds", "input_tokens", "output_tokens", "cached_tokens", "reasoning_tokens")
}
#: A session's tokens (`agentrt.present.shapes.usage_json`).
_USAGE: dict[str, Any] = {
    "type": "object",
    "description": "the session's tokens, by run; cost in US dollars, null when a model's "
    "price is not known",
    "properties": {
        **_TOKENS,
        "cost": {"type": ["number", "null"]},
        "runs": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "task_hash": {"type": "string"},
                    "model": {"type": "string"},
                    "tokens": {"type": "object", "properties": _TOKENS, "required": [*_TOKENS]},
                    "cost": {"type": ["number", "null"]},
                },
                "required": ["task_hash", "model", "tokens", "cost"],
            },
        },
    },
    "required": [*_TOKENS, "cost", "runs"],
}


def _object(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties}


def _json(schema: dict[str, Any], description: str, **links: Any) -> dict[str, Any]:
    out = {"description": description, "content": {"application/json": {"schema": schema}}}
    return out | {"links": links} if links else out


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


def _body(name: str, *, required: bool = True) -> dict[str, Any]:
    return {"required": required, "content": {"application/json": {"schema": _ref(name)}}}


def _path_param(name: str, description: str, **schema: Any) -> dict[str, Any]:
    return {
        "name": name,
        "in": "path",
        "required": True,
        "description": description,
        "schema": _STRING | schema,
    }


def _list_of(name: str, key: str, description: str, **links: Any) -> dict[str, Any]:
    return _json(_object(**{key: {"type": "array", "items": _ref(name)}}), description, **links)


def _query(name: str, description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "description": description,
        "schema": schema,
    }


def _page_size(default: int, most: int, what: str) -> dict[str, Any]:
    return _query(
        "limit",
        f"at most this many {what}",
        {"type": "integer", "minimum": 1, "maximum": most, "default": default},
    )


def _link(operation: str, description: str, **parameters: str) -> dict[str, Any]:
    return {"operationId": operation, "description": description, "parameters": parameters}


def _session_links(session: str) -> dict[str, Any]:
    """Links from a response naming a session (at the runtime expression `session`)."""
    return {
        "GetTask": _link("getTask", "the session's pending task", session_id=session),
        "ResumeTask": _link("resumeTask", "resume the session's task", session_id=session),
        "DiscardTask": _link("discardTask", "discard the session's task", session_id=session),
    }


_SESSION = _path_param(
    "session_id",
    "the session id; an id without a known origin prefix (cli-, chat-, tg-, dc-) means chat-ID",
    pattern=SESSION_ID_PATTERN,
)
_CHAT_SESSION = _path_param(
    "session_id",
    "the session to run in: a chat- session, or an id without a known origin prefix (chat-ID)",
    pattern=CHAT_SESSION_ID_PATTERN,
)
_STARTED = _json(
    _object(session_id=_STRING, task_hash=_STRING) | {"required": ["session_id", "task_hash"]},
    "the run started; cancel it with the task hash",
    CancelRun=_link(
        "cancelRun", "stop the run that started", task_hash="$response.body#/task_hash"
    ),
    **_session_links("$response.body#/session_id"),
)
_SESSION_MODEL = _object(session_id=_STRING, model=_STRING) | {"required": ["session_id", "model"]}
# Any request may be refused for its Host (421) or a declared body over the cap (413).
_ANY = {"413": _ERROR, "421": _ERROR}
# A route behind the token answers 401 without it; a route with a path parameter, 400
# for one it cannot use and 404 for one naming nothing; one that reads a body also
# answers 408 when the body is too slow.
_ERRORS = {**_ANY, "401": _ERROR}
_PARAM_ERRORS = {**_ERRORS, "400": _ERROR, "404": _ERROR}
_BODY_ERRORS = {**_PARAM_ERRORS, "408": _ERROR, "415": _ERROR}


def _schemas() -> dict[str, Any]:
    waiting = _object(
        question_id=_NULLABLE, kind=type_schema(RequestKind), prompt=_STRING, who=_NULLABLE
    )
    question = _object(
        id={
            "type": "string",
            "description": "the question's id: a resume with an answer names it (question_id)",
        },
        call_id=_STRING,
        prompt=_STRING,
        kind=type_schema(RequestKind),
        state=type_schema(QuestionState)
        | {
            "description": "waiting; or withdrawn or expired when it was asked live and its run "
            "stopped or its timeout fired (the task still waits for it)"
        },
    ) | {"type": ["object", "null"]}
    task = _object(
        session_id=_STRING,
        status=type_schema(TaskStatus),
        running={"type": "boolean"},
        cause=type_schema(Cause | None),
        error=_NULLABLE,
        input=_STRING,
        question=question,
        task_hash=_NULLABLE,
        runs={"type": "integer"},
        created_at={"type": "number"},
        updated_at={"type": "number"},
        transcript=_object(
            messages={"type": "integer"},
            tool_calls={"type": "integer"},
            tool_results={"type": "integer"},
            unanswered_calls={"type": "array", "items": _STRING},
            elided={"type": "boolean"},
            items={"type": "array"},
        ),
        waiting_on={"type": "array", "items": _ref("Waiting")},
        preview=_ref("ResumePreview"),
    ) | {"required": ["session_id", "status", "running", "preview"]}
    session = _object(
        session_id=_STRING,
        origin=_NULLABLE,
        title={"type": "string", "description": "the first line of its first message"},
        messages={"type": "integer", "minimum": 0, "description": "messages stored"},
        created_at={"type": ["number", "null"]},
        updated_at={"type": ["number", "null"]},
        status={
            "enum": [*type_schema(TaskStatus)["enum"], _UNREADABLE, None],
            "description": "its pending task's status; null when its runs all finished",
        },
        running={"type": "boolean"},
        running_task=_NULLABLE,
        stoppable={"type": "boolean"},
        model={
            "type": ["string", "null"],
            "description": "the model chosen for the session; null: the configured default",
        },
        cause=type_schema(Cause | None),
        question=question,
        waiting_on={"type": "array", "items": _ref("Waiting")},
    ) | {"required": ["session_id", "status", "running", "waiting_on"]}
    message = {
        "type": "object",
        "description": "one stored message; tool_calls only on a message that has some, "
        "tool_call_id and name only on a tool's result",
        "properties": {
            "seq": {"type": "integer", "minimum": 0},
            "role": type_schema(Role),
            "content": _STRING,
            "tool_calls": {
                "type": "array",
                "items": _object(id=_STRING, name=_STRING, arguments={"type": "object"})
                | {"required": ["id", "name", "arguments"], "additionalProperties": False},
            },
            "tool_call_id": _STRING,
            "name": _STRING,
            "summarised": {
                "type": "integer",
                "minimum": 1,
                "description": "on a compaction's summary: how many earlier messages it stands for",
            },
            "created_at": {"type": "number"},
        },
        "required": ["seq", "role", "content", "created_at"],
        "additionalProperties": False,
    }
    question_fields = {
        "id": _STRING,
        "session_id": _STRING,
        "task_hash": _NULLABLE,
        "agent": _NULLABLE,
        "kind": type_schema(RequestKind),
        "prompt": _STRING,
        "choices": {"type": "array", "items": _STRING},
        "masked": {"type": "boolean"},
        "tool": _NULLABLE,
        "error": _NULLABLE,
        # The unified diff of the file change a confirmation asks about (write_file,
        # edit_file): at most 200 lines and 16 KiB, secrets redacted; null for other asks.
        "diff": _NULLABLE,
    }
    open_question = {
        "type": "object",
        "properties": question_fields,
        "required": [*question_fields],
    }
    bodies = {
        cls.__name__: body_schema(cls)
        for cls in (RunBody, ResumeBody, CancelBody, AnswerBody, EditBody, ModelBody, UndoBody)
    }
    return (
        bodies
        | {
            "Waiting": waiting,
            "Session": session,
            "StoredMessage": message,
            "Task": task,
            "Question": open_question,
            "Model": _object(
                name={"type": "string", "description": "scripted, openai:NAME, anthropic:NAME..."},
                default={"type": "boolean", "description": "it is the configured model"},
                usable={"type": "boolean", "description": "it can be asked now"},
                why={
                    "type": ["string", "null"],
                    "description": "why it cannot be used (no API key...); null when it can",
                },
            )
            | {"required": ["name", "default", "usable", "why"], "additionalProperties": False},
        }
        | preview_schemas()
        | event_schemas(open_question)
    )


def preview_schemas() -> dict[str, Any]:
    """``ResumePreview`` and ``PreviewCall``: what resuming a task will do, as a task's
    ``preview`` gives it (`agentrt.present.shapes.preview_json`).

    A call's fields come from `PreviewCall`, the stop's values from `StopKind`.
    """
    hints = typing.get_type_hints(PreviewCall)
    call = {f.name: type_schema(hints[f.name]) for f in attrs.fields(PreviewCall)}
    call["attempt"] |= {"minimum": 1, "description": "which attempt running it now is"}
    call["agent"] |= {"description": "the subagent that made it (sub1, sub1/sub2); '' the task's"}
    call["may_have_run"] = {
        "type": "boolean",
        "description": "an earlier run began it: running it now may run it a second time",
    }
    calls = {"type": "array", "items": _ref("PreviewCall")}
    preview = {
        "stop": type_schema(StopKind | None) | {"description": "why the task stopped last"},
        "kept": calls | {"description": "calls whose results are saved: they never run again"},
        "to_run": calls | {"description": "calls that will run"},
        "reissue": calls
        | {"description": "calls the model must issue again (an argument was shortened)"},
        "questions": {"type": "array", "items": _STRING, "description": "asked again"},
        "regenerated_words": {
            "type": "integer",
            "minimum": 0,
            "description": "words of an unsaved reply the model will say again",
        },
        "lines": {
            "type": "array",
            "items": _STRING,
            "minItems": 1,
            "description": "all of it in the words every front-end shows, a line each",
        },
    }

    def exact(properties: dict[str, Any], description: str) -> dict[str, Any]:
        return {
            "type": "object",
            "description": description,
            "properties": properties,
            "required": list(properties),
            "additionalProperties": False,
        }

    return {
        "PreviewCall": exact(call, "a call of a task a resume keeps, runs or has issued again"),
        "ResumePreview": exact(preview, "what resuming the pending task will do"),
    }


def event_name(kind: str) -> str:
    """The schema name of the `/v1/events` object of `kind`: ``tool_call`` -> ``ToolCallEvent``."""
    return "".join(word.title() for word in kind.split("_")) + "Event"


def event_schemas(question: dict[str, Any]) -> dict[str, Any]:
    """Exactly the keys of each object `/v1/events` sends, and ``Event``, the one of them.

    A run event's schema is made from its attrs class (`agentrt.present.shapes.event_to_json`
    adds ``type`` and ``session_id``, and ``summary`` to ``run_ended``); a
    question's from `question` (the ``Question`` schema) plus its ``type``.
    ``agentrt run --json`` prints these same objects, with ``"v"`` beside.
    """
    schemas: dict[str, Any] = {}

    def exact(kind: str, properties: dict[str, Any], description: str) -> None:
        properties = {"type": {"const": kind}} | properties
        schemas[event_name(kind)] = {
            "type": "object",
            "description": description,
            "properties": properties,
            "required": list(properties),
            "additionalProperties": False,
        }

    for cls, kind in EVENT_TYPES.items():
        hints = typing.get_type_hints(cls)
        properties = {f.name: type_schema(hints[f.name]) for f in attrs.fields(cls)}
        properties["session_id"] = _STRING
        if cls is RunEnded:
            properties["summary"] = _STRING
        exact(kind, properties, (cls.__doc__ or kind).splitlines()[0])
    exact("question", dict(question["properties"]), "a question for a person was asked")
    exact(
        "question_closed",
        {
            "id": _STRING,
            "session_id": _STRING,
            "state": {"enum": [s.value for s in EntryState if s is not EntryState.WAITING]},
        },
        "a question was answered, withdrawn (its run stopped), expired (its timeout fired) "
        "or claimed elsewhere",
    )
    exact(
        "ready",
        {"questions": {"type": "array", "items": _ref("Question")}},
        "the first object of the stream: the questions open now",
    )
    exact(
        "reload",
        {"reason": _STRING},
        "the events after the client's Last-Event-ID are not kept: read the state afresh",
    )
    kinds = [schema["properties"]["type"]["const"] for schema in schemas.values()]
    schemas["Event"] = {
        "description": "a run event (the fields of its type), a question, or a question's end",
        "oneOf": [_ref(name) for name in schemas],
        "discriminator": {
            "propertyName": "type",
            "mapping": {kind: f"#/components/schemas/{event_name(kind)}" for kind in kinds},
        },
    }
    return schemas


def _page_paths() -> dict[str, Any]:
    """The page and its files: no token needed, and each file is named in the document."""
    out: dict[str, Any] = {
        "/": {
            "get": {
                "operationId": "getPage",
                "summary": "The web chat page (it asks for the token itself)",
                "security": [],
                "responses": {
                    "200": {"description": "the page", "content": {"text/html": {}}},
                    **_ANY,
                },
            }
        },
        "/openapi.json": {
            "get": {
                "operationId": "getDocument",
                "summary": "This document (no token needed: it holds nothing secret)",
                "security": [],
                "responses": {
                    "200": {
                        "description": "the OpenAPI document",
                        "content": {"application/json": {"schema": {"type": "object"}}},
                    },
                    **_ANY,
                },
            }
        },
    }
    for prefix, folder in page_files().items():
        name = "getVendorFile" if "vendor" in prefix else "getPageFile"
        out[f"{prefix}{{name}}"] = {
            "get": {
                "operationId": name,
                "summary": "A file of the web page: "
                + ("a library it ships with" if "vendor" in prefix else "its script or style")
                + "; any other name needs the token, and then is not found",
                "security": [],
                "parameters": [
                    _path_param("name", "the file's name", enum=folder.names()),
                ],
                "responses": {
                    "200": {"description": "the file"},
                    "401": _ERROR,
                    "404": _ERROR,
                    **_ANY,
                },
            }
        }
    return out


def _paths() -> dict[str, Any]:
    return _page_paths() | {
        "/v1/sessions": {
            "get": {
                "operationId": "listSessions",
                "summary": "Sessions, finished ones too, most recently active first, a page at "
                "a time",
                "parameters": [
                    _page_size(LIST_PAGE, LIST_PAGE_MAX, "sessions"),
                    _query(
                        "cursor",
                        "the next of the page before",
                        _STRING | {"pattern": CURSOR_PATTERN},
                    ),
                ],
                "responses": {
                    "200": _json(
                        _object(
                            sessions={"type": "array", "items": _ref("Session")},
                            next={
                                "type": ["string", "null"],
                                "description": "the cursor of the next page; null after the last",
                            },
                        )
                        | {"required": ["sessions", "next"]},
                        "a page of sessions, most recently active first",
                        NextPage=_link(
                            "listSessions", "the next page", cursor="$response.body#/next"
                        ),
                        GetMessages=_link(
                            "getMessages",
                            "the first session's messages",
                            session_id="$response.body#/sessions/0/session_id",
                        ),
                        **_session_links("$response.body#/sessions/0/session_id"),
                    ),
                    "400": _ERROR,
                    **_ERRORS,
                },
            }
        },
        "/v1/sessions/{session_id}": {
            "delete": {
                "operationId": "deleteSession",
                "summary": "Delete a finished session and all its messages (one with a "
                "pending task is refused: discard the task first)",
                "parameters": [_SESSION],
                "responses": {
                    "200": _json(
                        _object(session_id=_STRING, deleted={"const": True})
                        | {"required": ["session_id", "deleted"]},
                        "deleted",
                    ),
                    "409": _ERROR,
                    **_PARAM_ERRORS,
                },
            }
        },
        "/v1/sessions/{session_id}/undo": {
            "post": {
                "operationId": "undoSession",
                "summary": "Put back the files the session's last run changed (or, with turn, "
                "every run's after that turn, the conversation rewound with them); a file "
                "changed since stops it (nothing touched, conflicts listed) unless force, "
                "which keeps its newer content beside it",
                "parameters": [_SESSION],
                "requestBody": _body("UndoBody", required=False),
                "responses": {
                    "200": _json(
                        _object(
                            session_id=_STRING,
                            done={"type": "boolean"},
                            restored={"type": "array", "items": _STRING},
                            conflicts={"type": "array", "items": _STRING},
                            kept={"type": "object", "additionalProperties": _STRING},
                            skipped={"type": "object", "additionalProperties": _STRING},
                        )
                        | {
                            "required": [
                                "session_id",
                                "done",
                                "restored",
                                "conflicts",
                                "kept",
                                "skipped",
                            ]
                        },
                        "what was put back, or the conflicts that stopped it",
                    ),
                    "409": _ERROR,
                    **_PARAM_ERRORS,
                },
            }
        },
        "/v1/sessions/{session_id}/turns": {
            "get": {
                "operationId": "getTurns",
                "summary": "The session's turns the model sees, and how many files a rewind "
                "to each would put back",
                "parameters": [_SESSION],
                "responses": {
                    "200": _json(
                        _object(
                            session_id=_STRING,
                            turns={
                                "type": "array",
                                "items": _object(
                                    seq={"type": "integer"},
                                    text=_STRING,
                                    files={"type": "integer"},
                                )
                                | {"required": ["seq", "text", "files"]},
                            },
                        )
                        | {"required": ["session_id", "turns"]},
                        "the turns, oldest first",
                    ),
                    **_PARAM_ERRORS,
                },
            }
        },
        "/v1/sessions/{session_id}/messages": {
            "get": {
                "operationId": "getMessages",
                "summary": "A page of the session's stored messages, oldest first",
                "parameters": [
                    _SESSION,
                    _query(
                        "after",
                        "only messages whose seq is above this (the next of the page before)",
                        {"type": "integer", "minimum": -1, "default": -1},
                    ),
                    _page_size(MESSAGES_PAGE, MESSAGES_PAGE_MAX, "messages"),
                ],
                "responses": {
                    "200": _json(
                        _object(
                            messages={"type": "array", "items": _ref("StoredMessage")},
                            next={
                                "type": ["integer", "null"],
                                "description": "the after of the next page; null after the last",
                            },
                            usage=_USAGE,
                        )
                        | {"required": ["messages", "next"]},
                        "a page of messages",
                        NextPage=_link(
                            "getMessages",
                            "the next page",
                            session_id="$request.path.session_id",
                            after="$response.body#/next",
                        ),
                    ),
                    **_PARAM_ERRORS,
                },
            }
        },
        "/v1/session/{session_id}/task": {
            "get": {
                "operationId": "getTask",
                "summary": "The session's pending task",
                "parameters": [_SESSION],
                "responses": {
                    "200": _json(
                        _object(task=_ref("Task")) | {"required": ["task"]},
                        "the pending task",
                        ResumeTask=_link(
                            "resumeTask", "resume it", session_id="$request.path.session_id"
                        ),
                        DiscardTask=_link(
                            "discardTask", "discard it", session_id="$request.path.session_id"
                        ),
                    ),
                    **_PARAM_ERRORS,
                },
            },
            "delete": {
                "operationId": "discardTask",
                "summary": "Discard the pending task (a user-cancel; stops a run started here)",
                "parameters": [_SESSION],
                "responses": {
                    "200": _json(
                        _object(session_id=_STRING, discarded={"const": True})
                        | {"required": ["session_id", "discarded"]},
                        "discarded",
                    ),
                    "409": _ERROR,
                    **_PARAM_ERRORS,
                },
            },
        },
        "/v1/session/{session_id}/task/resume": {
            "post": {
                "operationId": "resumeTask",
                "summary": "Resume the pending task, answering its saved question if given; an "
                "answer naming a question the task no longer waits for is refused (409 "
                "late_answer), saying why",
                "parameters": [_SESSION],
                "requestBody": _body("ResumeBody", required=False),
                "responses": {"202": _STARTED, "409": _ERROR, **_BODY_ERRORS},
            }
        },
        "/v1/session/{session_id}/run": {
            "post": {
                "operationId": "startRun",
                "summary": "Start a run in the session",
                "parameters": [_CHAT_SESSION],
                "requestBody": _body("RunBody"),
                "responses": {"202": _STARTED, "409": _ERROR, **_BODY_ERRORS},
            }
        },
        "/v1/session/{session_id}/regenerate": {
            "post": {
                "operationId": "regenerate",
                "summary": "Run the last user message again: its reply and tool calls are "
                "replaced by the new run's (refused with 409 while a run goes on or a task is "
                "pending, or when there is no user message; nothing is dropped then)",
                "parameters": [_CHAT_SESSION],
                "responses": {"202": _STARTED, "409": _ERROR, "503": _ERROR, **_PARAM_ERRORS},
            }
        },
        "/v1/session/{session_id}/edit": {
            "post": {
                "operationId": "editLast",
                "summary": "Replace the last user message, and everything after it, by text, "
                "and run it (refused as regenerate is)",
                "parameters": [_CHAT_SESSION],
                "requestBody": _body("EditBody"),
                "responses": {"202": _STARTED, "409": _ERROR, "503": _ERROR, **_BODY_ERRORS},
            }
        },
        "/v1/session/{session_id}/model": {
            "get": {
                "operationId": "getSessionModel",
                "summary": "The model the session runs with: its chosen one, else the default",
                "parameters": [_SESSION],
                "responses": {
                    "200": _json(_SESSION_MODEL, "the session's model"),
                    **_PARAM_ERRORS,
                },
            },
            "put": {
                "operationId": "setSessionModel",
                "summary": "Switch the session to a configured model from its next run on "
                "(404 unknown_model for one not configured, 503 model_not_configured for one "
                "that cannot be used now)",
                "parameters": [_CHAT_SESSION],
                "requestBody": _body("ModelBody"),
                "responses": {
                    "200": _json(_SESSION_MODEL, "switched"),
                    "503": _ERROR,
                    **_BODY_ERRORS,
                },
            },
        },
        "/v1/models": {
            "get": {
                "operationId": "listModels",
                "summary": "The configured models (model and the models list), the default first",
                "responses": {
                    "200": _json(
                        _object(
                            models={"type": "array", "items": _ref("Model")},
                            default=_STRING,
                        )
                        | {"required": ["models", "default"]},
                        "the models a session may run with",
                    ),
                    **_ERRORS,
                },
            }
        },
        "/v1/task/{task_hash}/cancel": {
            "post": {
                "operationId": "cancelRun",
                "summary": "Stop a task started over HTTP: cause pause keeps it pending",
                "parameters": [_path_param("task_hash", "the task hash of the run")],
                "requestBody": _body("CancelBody", required=False),
                "responses": {
                    "200": _json(
                        _object(
                            task_hash=_STRING,
                            session_id=_STRING,
                            cause={"enum": [Cause.PAUSE.value, Cause.USER_CANCEL.value]},
                        )
                        | {"required": ["task_hash", "session_id", "cause"]},
                        "the run is stopping",
                    ),
                    **_BODY_ERRORS,
                },
            }
        },
        "/v1/questions": {
            "get": {
                "operationId": "listQuestions",
                "summary": "Open questions of chat- sessions (confirmations, questions, secrets)",
                "parameters": [
                    _query(
                        "session",
                        "only the questions of this session (what a view of that chat shows)",
                        _STRING | {"pattern": SESSION_ID_PATTERN},
                    ),
                ],
                "responses": {
                    "200": _list_of(
                        "Question",
                        "questions",
                        "oldest first",
                        AnswerQuestion=_link(
                            "answerQuestion",
                            "answer the oldest question",
                            question_id="$response.body#/questions/0/id",
                        ),
                    ),
                    "400": _ERROR,
                    **_ERRORS,
                },
            }
        },
        "/v1/questions/{question_id}/answer": {
            "post": {
                "operationId": "answerQuestion",
                "summary": "Answer an open question; one answered already, withdrawn or "
                "expired is refused (409 late_answer), saying why",
                "parameters": [_path_param("question_id", "the question's id")],
                "requestBody": _body("AnswerBody"),
                "responses": {
                    "200": _json(
                        _object(id=_STRING, answered={"const": True})
                        | {"required": ["id", "answered"]},
                        "answered",
                    ),
                    "409": _ERROR,
                    **_BODY_ERRORS,
                },
            }
        },
        "/v1/events": {
            "get": {
                "operationId": "streamEvents",
                "summary": "Server-sent events: run events and questions, one JSON object each, "
                f"each with an id; the last {EVENT_RING} are replayed after Last-Event-ID",
                "parameters": [
                    _query(
                        "session",
                        "only the events of this session",
                        _STRING | {"pattern": SESSION_ID_PATTERN},
                    ),
                    {
                        "name": "Last-Event-ID",
                        "in": "header",
                        "required": False,
                        "description": "the id of the last event read: the events after it "
                        "are sent first, or a reload event when they are no longer kept",
                        "schema": _STRING,
                    },
                ],
                "responses": {
                    "200": {
                        "description": "an endless event stream",
                        "content": {
                            "text/event-stream": {
                                "itemSchema": {
                                    "type": "object",
                                    "properties": {
                                        "data": {
                                            "type": "string",
                                            "contentMediaType": "application/json",
                                            "contentSchema": _ref("Event"),
                                        },
                                        "event": _STRING,
                                        "id": _STRING,
                                        "retry": {"type": "integer", "minimum": 0},
                                    },
                                    "required": ["data"],
                                }
                            }
                        },
                    },
                    "400": _ERROR,
                    **_ERRORS,
                },
            }
        },
    }


def openapi_document() -> dict[str, Any]:
    """The API described as OpenAPI 3.2 (every route the server has, and only those)."""
    error = _object(
        error=_object(code=_STRING, message=_STRING) | {"required": ["code", "message"]}
    )
    return {
        "openapi": "3.2.0",
        "info": {
            "title": "agentrt HTTP API",
            "version": "1",
            "description": "Runs, pending tasks and questions of an agentrt process. Every "
            "route except the page, its files and this document needs the token in the header "
            "'Authorization: Bearer TOKEN'; no cookie is read or set. A request whose Host "
            "header names another host is refused with 421.",
        },
        "security": [{"bearer": []}],
        "paths": _paths(),
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "responses": {"Error": _json(error | {"required": ["error"]}, "what went wrong")},
            "schemas": _schemas(),
        },
    }
