"""What crosses the HTTP edge: request bodies in, errors out.

Events, questions and tasks go out in the shapes of `agentrt.present.shapes`, which
`agentrt --json` prints too.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any
from typing import TypeVar

import attrs
import cattrs
from cattrs.v import format_exception

from ...protocol.frames import CANCEL_CAUSES
from ...protocol.frames import older_pause_hook
from ...vocab.peerjson import JsonNumberError
from ...vocab.peerjson import loads
from ...vocab.reprs import record
from ...vocab.terms import Cause

T = TypeVar("T")


class ApiError(Exception):
    """A request the HTTP API refuses: answered with `status` and ``{"error": {"code", "message"}}``.

    The runtime's own refusals (`agentrt.ExecutorError`) carry their status and
    code themselves; this is for what only the HTTP edge can refuse.
    """

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


class BadBodyError(ApiError, ValueError):
    """A request body that does not fit its route; the message says where and why."""

    def __init__(self, message: str) -> None:
        super().__init__(400, "bad_body", message)


def _not_blank() -> str:
    # Every character `str.isspace` (and so `str.strip`) takes for whitespace: all of them
    # lie in the Basic Multilingual Plane (tests/test_http.py checks that).
    spaces = (chr(code) for code in range(0x10000) if chr(code).isspace())
    return "[^" + "".join(f"\\u{ord(c):04x}" for c in spaces) + "]"


#: A pattern matched by text that is not all whitespace, in the sense of `str.strip`.
NOT_BLANK = _not_blank()


@record
class RunBody:
    """`POST /v1/session/{id}/run`: the text must be more than whitespace."""

    text: str = attrs.field(metadata={"schema": {"minLength": 1, "pattern": NOT_BLANK}})


@record
class EditBody:
    """`POST /v1/session/{id}/edit`: the message that replaces the last one (not all blank)."""

    text: str = attrs.field(metadata={"schema": {"minLength": 1, "pattern": NOT_BLANK}})


@record
class ModelBody:
    """`PUT /v1/session/{id}/model`: the model (one `GET /v1/models` lists) the session
    runs with from its next run on."""

    model: str = attrs.field(metadata={"schema": {"minLength": 1}})


@record
class ResumeBody:
    """`POST /v1/session/{id}/task/resume`: the answer to the saved question, if any.

    `question_id` names the question `answer` is for (the task's
    ``question.id``): a resume naming one the task no longer waits for is
    refused (409 ``late_answer``, saying why) and changes nothing.
    """

    answer: str | None = None
    question_id: str | None = attrs.field(
        default=None,
        metadata={
            "schema": {
                "description": "the id of the question `answer` is for (the task's question.id)"
            }
        },
    )


def _check_cancel_cause(self: CancelBody, _: attrs.Attribute[Cause], cause: Cause) -> None:
    if cause not in CANCEL_CAUSES:
        raise ValueError(f"a cancel's cause is 'user_cancel' or 'pause', not {cause.value!r}")


@record
class CancelBody:
    """`POST /v1/task/{hash}/cancel`: cause ``pause`` keeps the pending task, ``user_cancel``
    (the default) drops it.

    Older clients send ``"pause": true`` (or ``false``) instead: only the
    converter's hook for this body (`agentrt.frames.older_pause_hook`, as for the
    ``cancel`` frame) reads that spelling, into `cause` (see `OLDER_FIELDS`).
    """

    cause: Cause = attrs.field(
        default=Cause.USER_CANCEL,
        validator=_check_cancel_cause,
        metadata={"schema": {"enum": [cause.value for cause in CANCEL_CAUSES]}},
    )


@record
class AnswerBody:
    """`POST /v1/questions/{id}/answer`: a choice or text, and masked input in `secret`.

    `session_id` names the session the answer is given for (the chat whose view
    showed the question): a question of any other session is refused as unknown.
    """

    value: str
    secret: str | None = attrs.field(default=None, repr=False)
    session_id: str | None = None


@record
class UndoBody:
    """`POST /v1/sessions/{id}/undo`: put back the last run's files, or (with `turn`) every
    run's after that turn; `force` goes on past files changed since, keeping them beside."""

    turn: int | None = attrs.field(
        default=None,
        metadata={
            "schema": {
                "description": "rewind to this turn: the seq of one of the session's user "
                "messages, as GET /v1/sessions/{session_id}/turns lists them",
            }
        },
    )
    force: bool = False


def _strict(kind: type) -> Any:
    def structure(value: Any, _: Any) -> Any:
        # cattrs would turn 5 into "5" and "no" into True; a client sending those has a bug.
        if type(value) is not kind:
            raise TypeError(f"expected {kind.__name__}")
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                # JSON can escape half a surrogate pair; such text cannot be stored or sent.
                raise TypeError(f"expected {kind.__name__} without lone surrogates") from None
        return value

    return structure


#: The one converter for the HTTP edge.
converter = cattrs.Converter(forbid_extra_keys=True)
converter.register_structure_hook(str, _strict(str))
converter.register_structure_hook(bool, _strict(bool))
converter.register_structure_hook(int, _strict(int))


#: Fields a body's decode step reads beside the body's own: older clients' spellings, never
#: written. The API document states each as this schema (merged into the body's), so that
#: what it says a body may hold is exactly what `parse_body` takes.
OLDER_FIELDS: Mapping[type, dict[str, Any]] = {
    CancelBody: {
        "properties": {
            "pause": {
                "type": "boolean",
                "deprecated": True,
                "description": "the older spelling of the cause: true is 'pause', false "
                "'user_cancel'; true beside another cause is refused",
            }
        },
        "not": {
            "required": ["cause", "pause"],
            "properties": {
                "cause": {"const": Cause.USER_CANCEL.value},
                "pause": {"const": True},
            },
        },
    }
}


converter.register_structure_hook(CancelBody, older_pause_hook(converter, CancelBody))


def parse_body(raw: bytes, cls: type[T]) -> T:
    """Structure a JSON body into `cls`; an empty body is ``{}``.

    Raises `BadBodyError` with a message such as ``expected str @ $.text`` that
    never quotes the submitted values (they may be secrets).
    """
    if not raw.strip():
        data: Any = {}
    else:
        try:
            data = loads(raw)
        except JsonNumberError as exc:
            raise BadBodyError(f"the body cannot be read: {exc}") from None
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise BadBodyError(f"the body is not valid JSON: {_json_problem(exc)}") from None
        except RecursionError:
            raise BadBodyError("the body is not valid JSON: it is nested too deeply") from None
    if not isinstance(data, dict):
        raise BadBodyError("the body must be a JSON object")
    try:
        return converter.structure(data, cls)
    except cattrs.BaseValidationError as exc:
        problems = "; ".join(_clean(m) for m in cattrs.transform_error(exc, "$", _problem))
        raise BadBodyError(f"the body does not fit: {problems}") from None


def _problem(exc: BaseException, kind: type | None) -> str:
    # A body's own check (a cancel's cause) says what is wrong; cattrs would say "invalid value".
    if kind is None and isinstance(exc, ValueError):
        return str(exc)
    return format_exception(exc, kind)


def _json_problem(exc: ValueError) -> str:
    if isinstance(exc, json.JSONDecodeError):
        return f"{exc.msg} at line {exc.lineno} column {exc.colno}"
    return "it is not UTF-8"


def _clean(message: str) -> str:
    # transform_error's wording for a missing field is "required field missing @ $.text".
    return message.replace("invalid value for type, ", "")


def error_body(code: str, message: str) -> dict[str, Any]:
    """The one shape of every error the API returns."""
    return {"error": {"code": code, "message": message}}
