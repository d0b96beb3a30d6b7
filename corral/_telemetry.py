"""The hooks through which queues, flow producers and workers report to OpenTelemetry.

The core calls these hooks only when a ``telemetry=`` argument turned them on; when it is
off (the default) the add and process paths check one attribute and go their usual way, and
``opentelemetry`` is never imported. The hooks are described here as protocols, so that the
core depends on no tracing library: :class:`corral.otel.Telemetry` implements them.

Every hook is a plain (not async) context manager, so the same code serves the async classes
and their generated sync twins. A hook never raises into the core: a tracer or meter that
fails is logged and the job goes on untraced.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

from corral.errors import InvalidOptionError

if TYPE_CHECKING:
    from corral.job import JobRecord


class AddSpan(Protocol):
    """The PRODUCER span of one add (or one bulk, or one flow), open while it is written."""

    #: What goes into the job's ``opts.tm``: the span's context as the JSON of a propagation
    #: carrier (``{"traceparent": ...}``), as Node's bullmq-otel writes it; ``None`` when the
    #: span could not be started (the job is added untraced).
    carrier: str | None

    def added(self, job_ids: list[str]) -> None:
        """The add was written and gave these job ids."""


class FlowSpans(Protocol):
    """The spans of one flow producer call: the flow's, and one per node."""

    def node(self, key: int, parent: int | None, queue_name: str, name: str, job_id: str) -> Any:
        """Open the span of node ``key`` (a child of node ``parent``'s span, or of the flow's)
        and return its carrier for the node's ``opts.tm`` (``None``: untraced)."""


class AttemptSpan(Protocol):
    """The CONSUMER span of one processing attempt, current while the processor runs."""

    def failed(self, error: BaseException) -> None:
        """The attempt raised ``error`` (recorded on the span: status error, an event)."""

    def settled(self, outcome: str) -> None:
        """The server confirmed the attempt's end: ``completed``, ``failed`` (for good) or
        ``retry``."""


class Hooks(Protocol):
    """What :class:`corral.otel.Telemetry` gives the core."""

    def adding(self, queue_name: str, job_name: str) -> AbstractContextManager[AddSpan]: ...

    def adding_bulk(
        self, queue_name: str, job_names: list[str]
    ) -> AbstractContextManager[AddSpan]: ...

    def adding_flows(
        self, queue_name: str, flow_names: list[str], *, bulk: bool
    ) -> AbstractContextManager[FlowSpans]: ...

    def processing(self, job: JobRecord) -> AbstractContextManager[AttemptSpan]: ...


def resolve(telemetry: Any) -> Hooks | None:
    """The hooks a ``telemetry=`` argument asks for: ``None`` or ``False`` for none (nothing
    is imported), ``True`` for a :class:`corral.otel.Telemetry` on the global tracer and
    meter providers, or a ``Telemetry`` given as it is.

    Raises:
        InvalidOptionError: ``telemetry`` is none of these.
        ImportError: ``True`` without ``opentelemetry-api`` installed (``corral[otel]``).
    """
    if telemetry is None or telemetry is False:
        return None
    if telemetry is True:
        from corral.otel import Telemetry  # only when asked for: it imports opentelemetry

        return Telemetry()
    if all(callable(getattr(telemetry, hook, None)) for hook in _HOOKS):
        hooks: Hooks = telemetry
        return hooks
    raise InvalidOptionError(
        "telemetry must be True, False, None or a corral.otel.Telemetry, "
        f"got {type(telemetry).__name__}"
    )


_HOOKS = ("adding", "adding_bulk", "adding_flows", "processing")
