"""The OpenAPI 3.1 document of the HTTP API, served at `/openapi.json`."""

from __future__ import annotations

from typing import Any

_ERROR = {"$ref": "#/components/responses/Error"}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


def _body(name: str, *, required: bool = True) -> dict[str, Any]:
    return {"required": required, "content": {"application/json": {"schema": _ref(name)}}}


def _path_param(name: str, description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "path",
        "required": True,
        "description": description,
        "schema": {"type": "string"},
    }


_SESSION = _path_param(
    "session_id", "the session id; an id without a known origin prefix means chat-ID"
)
_STARTED = _json(
    {
        "type": "object",
        "properties": {"session_id": {"type": "string"}, "task_hash": {"type": "string"}},
        "required": ["session_id", "task_hash"],
    },
    "the run started; cancel it with the task hash",
)


def openapi_document() -> dict[str, Any]:
    """The API described as OpenAPI 3.1 (every route the server has, and only those)."""
    # Any request may be refused for its Host (421) or a declared body over the cap (413);
    # a route that reads a body also answers 408 when the body is too slow.
    errors = {"400": _ERROR, "401": _ERROR, "404": _ERROR, "413": _ERROR, "421": _ERROR}
    body_errors = {**errors, "408": _ERROR}
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "agentrt HTTP API",
            "version": "1",
            "description": "Runs, pending tasks and questions of an agentrt process. Every "
            "route except the page and its files needs the token in the header "
            "'Authorization: Bearer TOKEN'; no cookie is read or set. A request whose Host "
            "header names another host is refused with 421.",
        },
        "security": [{"bearer": []}],
        "paths": {
            "/": {
                "get": {
                    "summary": "The web chat page (it asks for the token itself)",
                    "security": [],
                    "responses": {
                        "200": {"description": "the page", "content": {"text/html": {}}},
                    },
                }
            },
            "/static/{name}": {
                "get": {
                    "summary": "A file of the web page (script, style sheet); the page's own "
                    "files need no token",
                    "parameters": [_path_param("name", "the file's name")],
                    "responses": {"200": {"description": "the file"}, "404": _ERROR},
                }
            },
            "/openapi.json": {
                "get": {
                    "summary": "This document",
                    "responses": {"200": {"description": "the OpenAPI document"}},
                }
            },
            "/v1/sessions": {
                "get": {
                    "summary": "Sessions with a pending task, and running ones",
                    "responses": {
                        "200": _json(
                            {
                                "type": "object",
                                "properties": {
                                    "sessions": {"type": "array", "items": _ref("Session")}
                                },
                            },
                            "most recently active first",
                        ),
                        "401": _ERROR,
                    },
                }
            },
            "/v1/session/{session_id}/task": {
                "get": {
                    "summary": "The session's pending task",
                    "parameters": [_SESSION],
                    "responses": {
                        "200": _json(
                            {"type": "object", "properties": {"task": _ref("Task")}},
                            "the pending task",
                        ),
                        **errors,
                    },
                },
                "delete": {
                    "summary": "Discard the pending task (a user-cancel; stops a run started here)",
                    "parameters": [_SESSION],
                    "responses": {
                        "200": _json(
                            {
                                "type": "object",
                                "properties": {
                                    "session_id": {"type": "string"},
                                    "discarded": {"type": "boolean"},
                                },
                            },
                            "discarded",
                        ),
                        "403": _ERROR,
                        **errors,
                    },
                },
            },
            "/v1/session/{session_id}/task/resume": {
                "post": {
                    "summary": "Resume the pending task, answering its saved question if given",
                    "parameters": [_SESSION],
                    "requestBody": _body("ResumeBody", required=False),
                    "responses": {"202": _STARTED, "409": _ERROR, **body_errors},
                }
            },
            "/v1/session/{session_id}/run": {
                "post": {
                    "summary": "Start a run in the session",
                    "parameters": [_SESSION],
                    "requestBody": _body("RunBody"),
                    "responses": {
                        "202": _STARTED,
                        "409": _ERROR,
                        "415": _ERROR,
                        **body_errors,
                    },
                }
            },
            "/v1/task/{task_hash}/cancel": {
                "post": {
                    "summary": "Stop a task started over HTTP: pause keeps it pending",
                    "parameters": [_path_param("task_hash", "the task hash of the run")],
                    "requestBody": _body("CancelBody", required=False),
                    "responses": {
                        "200": _json(
                            {
                                "type": "object",
                                "properties": {
                                    "task_hash": {"type": "string"},
                                    "session_id": {"type": "string"},
                                    "cause": {"enum": ["pause", "user_cancel"]},
                                },
                            },
                            "the run is stopping",
                        ),
                        "403": _ERROR,
                        **body_errors,
                    },
                }
            },
            "/v1/questions": {
                "get": {
                    "summary": "Open questions of chat- sessions (confirmations, questions, secrets)",
                    "responses": {
                        "200": _json(
                            {
                                "type": "object",
                                "properties": {
                                    "questions": {"type": "array", "items": _ref("Question")}
                                },
                            },
                            "oldest first",
                        ),
                        "401": _ERROR,
                    },
                }
            },
            "/v1/questions/{question_id}/answer": {
                "post": {
                    "summary": "Answer an open question",
                    "parameters": [_path_param("question_id", "the question's id")],
                    "requestBody": _body("AnswerBody"),
                    "responses": {
                        "200": {"description": "answered"},
                        "409": _ERROR,
                        "410": _ERROR,
                        **body_errors,
                    },
                }
            },
            "/v1/events": {
                "get": {
                    "summary": "Server-sent events: run events and questions, one JSON object each",
                    "responses": {
                        "200": {
                            "description": "an endless event stream",
                            "content": {"text/event-stream": {"schema": _ref("Event")}},
                        },
                        "401": _ERROR,
                    },
                }
            },
        },
        "components": {
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer"},
            },
            "responses": {
                "Error": _json(
                    {
                        "type": "object",
                        "properties": {
                            "error": {
                                "type": "object",
                                "properties": {
                                    "code": {"type": "string"},
                                    "message": {"type": "string"},
                                },
                                "required": ["code", "message"],
                            }
                        },
                        "required": ["error"],
                    },
                    "what went wrong",
                )
            },
            "schemas": {
                "RunBody": {
                    "type": "object",
                    "properties": {"text": {"type": "string", "minLength": 1}},
                    "required": ["text"],
                    "additionalProperties": False,
                },
                "ResumeBody": {
                    "type": "object",
                    "properties": {"answer": {"type": ["string", "null"]}},
                    "additionalProperties": False,
                },
                "CancelBody": {
                    "type": "object",
                    "properties": {"pause": {"type": "boolean", "default": False}},
                    "additionalProperties": False,
                },
                "AnswerBody": {
                    "type": "object",
                    "properties": {
                        "value": {"type": "string"},
                        "secret": {"type": ["string", "null"]},
                    },
                    "required": ["value"],
                    "additionalProperties": False,
                },
                "Waiting": {
                    "type": "object",
                    "properties": {
                        "question_id": {"type": ["string", "null"]},
                        "kind": {"type": "string"},
                        "prompt": {"type": "string"},
                        "who": {"type": ["string", "null"]},
                    },
                },
                "Session": {
                    "type": "object",
                    "properties": {
                        "session_id": {"type": "string"},
                        "origin": {"type": ["string", "null"]},
                        "status": {"enum": ["running", "interrupted", "awaiting_answer", "failed"]},
                        "running": {"type": "boolean"},
                        "running_task": {"type": ["string", "null"]},
                        "stoppable": {"type": "boolean"},
                        "cause": {"type": ["string", "null"]},
                        "question": {"type": ["object", "null"]},
                        "waiting_on": {"type": "array", "items": _ref("Waiting")},
                    },
                },
                "Task": {
                    "type": "object",
                    "properties": {
                        "session_id": {"type": "string"},
                        "status": {"enum": ["running", "interrupted", "awaiting_answer", "failed"]},
                        "running": {"type": "boolean"},
                        "cause": {"type": ["string", "null"]},
                        "error": {"type": ["string", "null"]},
                        "input": {"type": "string"},
                        "question": {
                            "type": ["object", "null"],
                            "properties": {
                                "call_id": {"type": "string"},
                                "prompt": {"type": "string"},
                                "kind": {"enum": ["confirm", "question", "secret", "password"]},
                            },
                        },
                        "task_hash": {"type": ["string", "null"]},
                        "runs": {"type": "integer"},
                        "transcript": {
                            "type": "object",
                            "properties": {
                                "messages": {"type": "integer"},
                                "tool_calls": {"type": "integer"},
                                "tool_results": {"type": "integer"},
                                "unanswered_calls": {"type": "array"},
                                "elided": {"type": "boolean"},
                                "items": {"type": "array"},
                            },
                        },
                        "waiting_on": {"type": "array", "items": _ref("Waiting")},
                    },
                },
                "Question": {
                    "type": "object",
                    "properties": {
                        "id": {"type": "string"},
                        "session_id": {"type": "string"},
                        "task_hash": {"type": ["string", "null"]},
                        "kind": {"enum": ["confirm", "question", "secret", "password"]},
                        "prompt": {"type": "string"},
                        "choices": {"type": "array", "items": {"type": "string"}},
                        "masked": {"type": "boolean"},
                        "tool": {"type": ["string", "null"]},
                        "error": {"type": ["string", "null"]},
                    },
                },
                "Event": {
                    "type": "object",
                    "description": "type is one of ready, task_started, text, tool_call, "
                    "tool_result, verify, usage, run_ended, question, question_closed",
                    "properties": {"type": {"type": "string"}},
                    "required": ["type"],
                },
            },
        },
    }
