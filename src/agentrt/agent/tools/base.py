"""What a tool is: an attrs class of its arguments, which knows its name, schema and effect.

A tool is declared once, as a frozen attrs class whose fields are its
arguments::

    @attrs.frozen
    class ReadFile(Tool):
        NAME: ClassVar = "read_file"
        DESCRIPTION: ClassVar = "Read a text file."

        path: str

        async def run(self, agent: ToolRun, call: ToolCall) -> str: ...

From the fields come the JSON schema the model is offered (`Tool.spec`) and
the structuring of a call's arguments (`Tool.parse`, with cattrs): a missing
or mistyped argument is refused with ``read_file needs 'path' as a str``
before the tool runs. `run` gets the parsed arguments as ``self`` and the
agent's run as `agent`, through the `ToolRun` protocol: the confirmations,
questions, paths and effects a tool may use.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Mapping
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any
from typing import ClassVar
from typing import Final
from typing import Protocol
from typing import Self
from typing import cast

import attrs

from ...core.context import RequestContext
from ...core.pending import Answer
from ...core.policy import Command
from ...core.policy import Edit
from ...core.policy import auto_approves
from ...models.messages import ToolCall
from ...models.messages import ToolSpec
from ...vocab.reprs import record
from ...vocab.request import Request
from ...vocab.terms import TERMINAL
from ...vocab.terms import RequestKind
from ...vocab.terms import origin_of
from ..checkpoint import CallRecord
from ..checkpoint import Change
from ..config import AgentConfig
from ..sandbox import PRIVILEGED_VARIABLES
from ..sudo import PrivilegedResult

if TYPE_CHECKING:
    import cattrs

#: Longest command or question (UTF-8 bytes) shown in a confirmation or question prompt.
PROMPT_LIMIT: Final = 2 * 1024
#: What a tool returns when the person said no.
DENIED: Final = "denied by the user"


class ToolError(Exception):
    """A tool failed in a way the model should hear about (it becomes the result)."""


class ToolRefused(ToolError):
    """agentrt will not run the call as asked (its result says why): a refusal, not a failure."""


class ToolDenied(ToolError):
    """The call was denied without a person saying no (its confirmation timed out)."""


class QuestionParked(Exception):
    """Raised inside a tool call to park the run on a saved question instead of blocking."""

    def __init__(self, prompt: str, kind: RequestKind) -> None:
        super().__init__(prompt)
        self.prompt = prompt
        self.kind = kind


class ToolRun(Protocol):
    """What a tool may use of the run that calls it (`agentrt.agent.loop.AgentRun`)."""

    @property
    def task_hash(self) -> str:
        """The hash of the running task."""
        ...

    @property
    def config(self) -> AgentConfig:
        """Where tools work, which paths are restricted, the secrets and the verifier."""
        ...

    @property
    def turn_start(self) -> int:
        """Where the task's messages begin among its session's (its user message's index)."""
        ...

    @property
    def context(self) -> RequestContext:
        """The run's session, window and task."""
        ...

    @property
    def prefilled(self) -> dict[str, str]:
        """Answers given ahead to a subagent's parked question, by its prompt."""
        ...

    def has_listener(self) -> bool:
        """Whether anyone could answer a question of this run now."""
        ...

    async def nobody_to_answer(self) -> bool:
        """Whether nobody can answer, asked after a checkpoint (a stop under way lands first)."""
        ...

    async def ask_inline(self, call_id: str, request: Request) -> Answer:
        """Ask through the registry while the question is saved with the task (for `call_id`)."""
        ...

    async def confirm(self, call: ToolCall, prompt: str, diff: str | None = None) -> bool:
        """Ask whether `call` may run (showing `diff`, a file change's); parks when nobody can answer."""
        ...

    async def confirm_restricted(
        self, call: ToolCall, prompt: str, diff: str | None = None
    ) -> bool:
        """Confirm a call that touches a restricted path: needs the system password."""
        ...

    def asks_nothing(self) -> None:
        """Say that this call asks no question before it takes effect (see `AgentRun`).

        The questions of the calls issued after it in its round wait until it
        asks, begins its effect, says this, or ends: a tool that asks nothing
        and may take long says so first.
        """
        ...

    async def begin_effect(self, call: ToolCall) -> None:
        """Record that `call` is about to take effect, before it does."""
        ...

    def attempt(self, call: ToolCall) -> int:
        """Which attempt at `call` this is: 1 unless an earlier run started it already."""
        ...

    async def progress(
        self, call: ToolCall, progress: float, total: float | None, message: str
    ) -> None:
        """Tell the run's front-ends how far `call` has got."""
        ...

    def resolve(self, path: str) -> Path:
        """A path argument resolved against the working directory; never the agent's state."""
        ...

    def is_restricted(self, path: Path) -> bool:
        """Whether `path` lies inside a restricted path."""
        ...

    def restricted_roots(self, command: str) -> tuple[Path, ...]:
        """The restricted roots a shell command names (none with the text guard off)."""
        ...

    def check_command(self, command: str) -> None:
        """Refuse a shell command that names the agent's own state."""
        ...

    async def spawn(self, task: str, call: ToolCall) -> str:
        """Run `task` in an in-process subagent journaled under `call`; its final answer."""
        ...


def call_record(
    agent: ToolRun, call: ToolCall, changes: tuple[Change, ...], not_undoable: str | None
) -> CallRecord:
    """What `call` of `agent`'s task changed, now, as its session's checkpoint log keeps it."""
    return CallRecord(
        agent.context.session_id,
        agent.task_hash,
        call.id,
        call.name,
        time.time(),
        changes,
        not_undoable,
        agent.turn_start,
    )


#: JSON schema types of the Python types a tool argument may have.
_JSON_TYPES: Final[Mapping[type, str]] = {
    str: "string",
    float: "number",
    int: "integer",
    bool: "boolean",
}
#: Those types by the name an argument's annotation gives them: the tools' modules keep
#: their annotations as text (``from __future__ import annotations``).
_NAMED_TYPES: Final[Mapping[str, type]] = {kind.__name__: kind for kind in _JSON_TYPES}


@record
class Tool:
    """Base of every tool: subclasses are frozen attrs classes of the tool's arguments."""

    #: The name the model calls the tool by.
    NAME: ClassVar[str]
    #: What the model is told the tool does.
    DESCRIPTION: ClassVar[str]
    #: A tool for trying the runtime out (a long wait, a large result): offered only to the
    #: models that play scripts, never to a real one (see `agentrt.agent.tools.offered_to`).
    TESTING: ClassVar[bool] = False
    #: Whether the tool records its start (`ToolRun.begin_effect`) before it takes effect. For
    #: such a tool a call with no recorded start did not begin, even in a run that died; for
    #: any other, a call a dead run left unanswered may have run (`agentrt.store.ledger`).
    RECORDS_START: ClassVar[bool] = False

    @classmethod
    def spec(cls) -> ToolSpec:
        """The tool as the model sees it: name, description, JSON schema of the arguments."""
        return _spec(cls)

    @classmethod
    def parse(cls, call: ToolCall) -> Self:
        """The arguments of `call`; `ToolError` naming the first one that is missing or mistyped.

        Arguments the tool does not take are ignored, as a model may add some.
        """
        try:
            parsed: Self = _converter().structure(call.arguments, cls)
        except Exception as exc:
            raise ToolError(_argument_problem(cls, exc)) from None
        return parsed

    async def run(self, agent: ToolRun, call: ToolCall) -> str:
        """Carry out `call` (whose arguments are ``self``); the result the model reads."""
        raise NotImplementedError


_SPECS: dict[type[Tool], ToolSpec] = {}


def _spec(cls: type[Tool]) -> ToolSpec:
    spec = _SPECS.get(cls)
    if spec is None:
        spec = _SPECS[cls] = _make_spec(cls)
    return spec


def _make_spec(cls: type[Tool]) -> ToolSpec:
    # Read from the annotations' text (`_kind`), not resolved through `typing`: resolving
    # compiles each one, most of what building the dozen specs cost at every start.
    fields = attrs.fields(cls)
    return ToolSpec(
        cls.NAME,
        cls.DESCRIPTION,
        {
            "type": "object",
            "properties": {f.name: _property(f) for f in fields},
            "required": [f.name for f in fields if f.default is attrs.NOTHING],
        },
    )


def _property(field: attrs.Attribute[Any]) -> dict[str, str]:
    """The JSON schema of one argument; its description, when the field's metadata has one."""
    schema = {"type": _JSON_TYPES[_kind(field)]}
    if "description" in field.metadata:
        schema["description"] = field.metadata["description"]
    return schema


def argument(description: str, **kwargs: Any) -> Any:
    """A tool argument whose JSON schema says what it is (`attrs.field` with `description`)."""
    return attrs.field(metadata={"description": description}, **kwargs)


def _kind(field: attrs.Attribute[Any]) -> type:
    """The Python type of an argument: one of `_JSON_TYPES`, as an annotation or its text."""
    kind = _NAMED_TYPES.get(field.type) if isinstance(field.type, str) else field.type
    assert kind in _JSON_TYPES, f"{field.name}: a tool argument is a str, int, float or bool"
    return cast(type, kind)


def _argument_problem(cls: type[Tool], exc: BaseException) -> str:
    """``NAME needs 'arg' as a str`` for the first argument, in declaration order, that failed."""
    from cattrs import ClassValidationError

    failed: set[str] = set()
    if isinstance(exc, ClassValidationError):
        with_notes, _ = exc.group_exceptions()
        failed = {note.name for _, note in with_notes}
    fields = attrs.fields(cls)  # `_kind` reads an annotation as written or resolved
    field = next((f for f in fields if f.name in failed), fields[0])
    return f"{cls.NAME} needs {field.name!r} as a {_kind(field).__name__}"


def _exactly(kind: type) -> Any:
    def structure(value: object, _: object) -> object:
        # bool is an int in Python; a model that sends true for a size has a bug.
        if not isinstance(value, kind) or isinstance(value, bool):
            raise TypeError(f"expected {kind.__name__}")
        return value

    return structure


def _boolean(value: object, _: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError("expected bool")
    return value


def _number(value: object, _: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError("expected float")
    return float(value)


@functools.cache
def _converter() -> cattrs.Converter:
    """The one converter of tool arguments, built on first use."""
    import cattrs

    conv = cattrs.Converter(forbid_extra_keys=False)
    conv.register_structure_hook(str, _exactly(str))
    conv.register_structure_hook(int, _exactly(int))
    conv.register_structure_hook(float, _number)
    conv.register_structure_hook(bool, _boolean)
    return conv


# -- what several tools do the same way ----------------------------------------------


@record
class Consent:
    """A call may take effect: whether a person said so (else the approval policy did)."""

    asked: bool

    def network(self, agent: ToolRun) -> bool:
        """Whether the call keeps the network: a person confirmed it, or the file says so."""
        return self.asked or agent.config.sandbox.network


def runs_unasked(agent: ToolRun, call: ToolCall, action: Edit | Command) -> bool:
    """Whether the approval policy lets `call` take effect unasked (see `confirmed`)."""
    config = agent.config
    return (
        agent.attempt(call) == 1
        and not config.sandbox.missing
        and auto_approves(
            config.approval,
            action,
            workdir=config.workdir,
            guarded=config.guarded_paths if config.text_guard else (),
        )
    )


async def confirmed(
    agent: ToolRun, call: ToolCall, prompt: str, action: Edit | Command, diff: str | None = None
) -> Consent | None:
    """Ask whether `call` may take effect and record that it starts; None when denied.

    `diff` (a file change's, see `agentrt.agent.tools.diff`) is shown with the question.

    The approval policy may let `action` run without asking (`agentrt.core.policy.auto_approves`);
    a call that may already have run (attempt 2 or later) is asked about all the same, and
    so is every call when no sandbox can be had.
    """
    unasked = runs_unasked(agent, call, action)
    if not unasked and not await agent.confirm(call, prompt, diff):
        return None
    await agent.begin_effect(call)
    return Consent(asked=not unasked)


def check_confinable(agent: ToolRun) -> None:
    """Refuse (`ToolError`) a call that would run unconfined for a session not a terminal's.

    Called before anything is asked: a chat or web user never gets the user's
    full access, so there is nothing to confirm.
    """
    sandbox = agent.config.sandbox
    if not sandbox.enforced and origin_of(agent.context.session_id) != TERMINAL:
        raise ToolRefused(
            f"refused: no sandbox is in force ({sandbox.why}), and tools never run "
            "unsandboxed for a chat or web session; run this from a terminal, or turn the "
            "sandbox back on"
        )


def confine(
    agent: ToolRun,
    argv: Sequence[str],
    *,
    network: bool,
    writable: Sequence[Path] = (),
    privileged: bool = False,
) -> list[str]:
    """`argv` wrapped in the run's sandbox (`agentrt.agent.sandbox.Sandbox.wrap`).

    Refuses (`ToolError`) to run anything unconfined for a session that is not
    a terminal's: a chat or web user never gets the user's full access.
    """
    check_confinable(agent)
    config = agent.config
    sandbox = config.sandbox
    env = None
    if privileged:
        env = {k: v for k, v in config.tool_env.items() if k in PRIVILEGED_VARIABLES}
    return sandbox.wrap(
        argv,
        workdir=config.workdir,
        hidden=config.hidden_paths,
        restricted=config.restricted_paths,
        writable=writable,
        network=network,
        env=env,
    )


async def via_sudo(
    agent: ToolRun,
    call: ToolCall,
    prompt: str,
    argv: Sequence[str],
    *,
    stdin: bytes | None = None,
    effect: bool = True,
    diff: str | None = None,
) -> PrivilegedResult | None:
    """The restricted-path preamble: confirm with the system password, then run through sudo.

    None when the person denied it. With `effect` (a write, a command) the
    attempt is recorded before anything runs, so a resume says the call may
    already have run; a read has no effect to record. `diff` is shown with
    the question.
    """
    if not await agent.confirm_restricted(call, prompt, diff):
        return None
    if effect:
        await agent.begin_effect(call)
    return await agent.config.verifier.run(argv, stdin=stdin)


def sudo_output(result: PrivilegedResult, what: str) -> bytes:
    """The output of a privileged command, or `ToolError` saying ``sudo WHAT failed``."""
    if result.returncode != 0:
        raise ToolError(f"sudo {what} failed: {result.output.decode(errors='replace')[:500]}")
    return result.output
