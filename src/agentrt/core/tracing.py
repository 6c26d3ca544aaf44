"""OpenTelemetry traces of runs, rounds, model requests, tool calls and questions.

Off unless ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``..._TRACES_ENDPOINT``) is set,
or an embedder or a test installs a tracer provider (`install`): until then no
OpenTelemetry module is imported and each `span` is a no-op. With it, spans go
to the OTLP/HTTP exporter (the ``agentrt[otel]`` extra), batched in its own
thread; the standard ``OTEL_*`` variables configure it.

Names and attributes follow OpenTelemetry's GenAI semantic conventions
(``invoke_agent``, ``chat {model}``, ``execute_tool {tool}``; ``gen_ai.*``),
with agentrt's own under ``agentrt.*``: the session, the task hash, a tool
call's attempt, and the cause of a stop (``agentrt.stop.cause``: ``pause``,
``user_cancel``, ``disconnect``, ``shutdown``).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from collections.abc import Mapping
from typing import Any

import trio

from .cause import cause_of

log = logging.getLogger("agentrt.tracing")

Attribute = str | int | float | bool

#: The variables that turn tracing on.
ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")

_tracer: Any = None
_provider: Any = None
_looked = False


class Span:
    """A span being recorded (or none: then `set` does nothing)."""

    __slots__ = ("_span",)

    def __init__(self, span: Any = None) -> None:
        self._span = span

    def set(self, key: str, value: Attribute | None) -> None:
        """Set attribute `key` (None leaves it unset)."""
        if self._span is not None and value is not None:
            self._span.set_attribute(key, value)


_NO_SPAN = Span()


def install(provider: Any) -> None:
    """Send spans to `provider` (an OpenTelemetry ``TracerProvider``), or stop (None)."""
    global _tracer, _provider, _looked
    _provider = provider
    _tracer = None if provider is None else provider.get_tracer("agentrt")
    _looked = True


def enabled() -> bool:
    """Whether spans are recorded (the environment is read once, at the first span)."""
    global _looked
    if not _looked:
        _looked = True
        if any(os.environ.get(name) for name in ENDPOINT_VARIABLES):
            _from_environment()
    return _tracer is not None


def flush(timeout_seconds: float = 10.0) -> None:
    """Export the spans recorded so far (blocks; for the end of a process or a test)."""
    if _provider is not None:
        _provider.force_flush(int(timeout_seconds * 1000))


def _from_environment() -> None:
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        log.warning(
            "OTEL_EXPORTER_OTLP_ENDPOINT is set but OpenTelemetry is not installed: "
            "no traces are sent (pip install 'agentrt[otel]')"
        )
        return
    import atexit

    service = os.environ.get("OTEL_SERVICE_NAME", "agentrt")
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    atexit.register(provider.shutdown)
    install(provider)


class _NoSpan(contextlib.AbstractContextManager[Span]):
    """The block of a span not recorded: a plain context manager, so that a stop passing
    through the spans a run is nested in (a call's, a round's, the run's) costs no
    generator's ``throw`` at each (a stop's final event waits for all of them)."""

    __slots__ = ()

    def __enter__(self) -> Span:
        return _NO_SPAN

    def __exit__(self, *exc_info: object) -> None:
        return None


_NO_SPAN_BLOCK = _NoSpan()


def span(
    name: str, attributes: Mapping[str, Attribute | None]
) -> contextlib.AbstractContextManager[Span]:
    """A span named `name` around the block, with `attributes` (None ones left out).

    A block that a cancel with a cause ends says the cause (``agentrt.stop.cause``); one
    an error ends says its type (``error.type``) and is an error.
    """
    if not enabled():
        return _NO_SPAN_BLOCK
    return _recorded(name, attributes)


@contextlib.contextmanager
def _recorded(name: str, attributes: Mapping[str, Attribute | None]) -> Iterator[Span]:
    from opentelemetry.trace import Status
    from opentelemetry.trace import StatusCode

    given = {k: v for k, v in attributes.items() if v is not None}
    with _tracer.start_as_current_span(
        name, attributes=given, record_exception=False, set_status_on_exception=False
    ) as otel_span:
        try:
            yield Span(otel_span)
        except BaseException as exc:
            cause = cause_of(exc)  # (a group's too: a round's calls stop in a nursery)
            if cause is not None:
                otel_span.set_attribute("agentrt.stop.cause", cause.value)
            elif not _cancelled(exc):
                otel_span.set_attribute("error.type", type(exc).__name__)
                otel_span.set_status(Status(StatusCode.ERROR, str(exc)[:200]))
            raise


def _cancelled(exc: BaseException) -> bool:
    """Whether `exc` is a cancel (alone or in a group of cancels), not an error."""
    if isinstance(exc, BaseExceptionGroup):
        return all(_cancelled(sub) for sub in exc.exceptions)
    return isinstance(exc, trio.Cancelled)
