"""OpenTelemetry traces and metrics for queues, flow producers and workers (``corral[otel]``).

Turned on per object, as Node's ``bullmq-otel`` is (``new Queue(name, {telemetry: new
BullMQOtel()})``): ``Queue(name, telemetry=Telemetry())``, ``Worker(name, f,
telemetry=...)``, ``FlowProducer(telemetry=...)``; ``telemetry=True`` uses the global
tracer and meter providers. Off by default, and then ``opentelemetry`` is not even imported.

Spans, named as ``bullmq-otel`` names them, with its ``bullmq.*`` attributes and the
OpenTelemetry messaging conventions' ``messaging.*`` ones:

- ``add {queue}.{job name}`` (PRODUCER) per ``add``, ``addBulk {queue}`` per ``add_bulk``,
  ``addFlow {queue}`` per flow (``addBulkFlows`` for several) with one ``addNode {queue}``
  per job of the tree, each a child of its parent job's. The span's context goes into the
  job, where ``bullmq-otel`` puts it: ``opts.tm``, the JSON of a W3C trace-context carrier
  (``{"traceparent": "00-..."}``), so a Node worker continues the trace, and a corral worker
  continues a Node producer's.
- ``process {queue}`` (CONSUMER) per attempt, a child of the context in ``opts.tm`` (a root
  span without one) and the current span while the processor runs (async processors, and
  plain functions in threads; a child process gets :func:`job_context`). A failed attempt
  has status ERROR, an ``exception`` event and a ``job failed`` event; every attempt has
  ``bullmq.job.attempts.made`` (its number, 1 for the first) and, once the server confirmed
  its end, ``bullmq.job.state`` (``completed``, ``retried`` or ``failed``).

Metrics, with ``bullmq-otel``'s names and attributes (``bullmq.queue.name``,
``bullmq.job.name``, ``bullmq.job.state``): the counters ``bullmq.jobs.completed``,
``bullmq.jobs.failed`` (for good) and ``bullmq.jobs.retried``, the histogram
``bullmq.job.duration`` (ms, per attempt), and corral's ``corral.job.waiting.duration`` (ms,
from when a job was ready to the start of its first attempt).

A tracer or meter that raises is logged (once per kind of call) and the job goes on untraced.

Example::

    from opentelemetry.sdk.trace import TracerProvider
    from corral import Queue, Worker
    from corral.otel import Telemetry

    telemetry = Telemetry(tracer_provider=TracerProvider())
    Queue("emails", telemetry=telemetry).add("welcome", {"to": "ada@example.com"})
    Worker("emails", send_email, telemetry=telemetry).run()
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from contextvars import Token
from typing import TYPE_CHECKING, Any

try:
    from opentelemetry import context as otel_context
    from opentelemetry import metrics as otel_metrics
    from opentelemetry import propagate, trace
    from opentelemetry.context import Context
    from opentelemetry.trace import Span, SpanKind, Status, StatusCode
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError("corral.otel needs opentelemetry-api: pip install 'corral[otel]'") from exc

from corral._version import __version__
from corral.clock import now_ms
from corral.health import first_ready_ms

if TYPE_CHECKING:
    from types import TracebackType

    from corral.job import JobRecord

__all__ = ["MESSAGING_SYSTEM", "Telemetry", "job_context"]

logger = logging.getLogger("corral.otel")

#: ``messaging.system`` of every span: the protocol the queues speak, whichever client
#: (corral, Node BullMQ) wrote the job, so that one queue's spans group together.
MESSAGING_SYSTEM = "bullmq"

#: The lease's outcome -> ``bullmq.job.state`` (and the counter it adds to).
_STATES = {"completed": "completed", "failed": "failed", "retry": "retried"}


class Telemetry:
    """Traces and metrics for the queues, flow producers and workers given it.

    Args:
        tracer_provider: where spans go; the global one (``trace.set_tracer_provider``) by
            default.
        meter_provider: where metrics go; the global one by default.
        tracer_name: the instrumentation scope of the spans.
        meter_name: the instrumentation scope of the metrics.
        metrics: ``False`` records no metrics.

    One ``Telemetry`` can serve any number of queues and workers.
    """

    def __init__(
        self,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: otel_metrics.MeterProvider | None = None,
        *,
        tracer_name: str = "corral",
        meter_name: str = "corral",
        metrics: bool = True,
    ) -> None:
        self.tracer = trace.get_tracer(tracer_name, __version__, tracer_provider)
        self._metrics: _Metrics | None = None
        if metrics:
            meter = otel_metrics.get_meter(meter_name, __version__, meter_provider)
            self._metrics = _Metrics(meter)
        self._warned: set[str] = set()

    # -- the hooks of corral._telemetry ------------------------------------------------------

    def adding(self, queue_name: str, job_name: str) -> _AddSpan:
        """The span of one ``add``."""
        attributes = _messaging(queue_name, "add", "send")
        attributes["bullmq.job.name"] = job_name
        return _AddSpan(self, f"add {queue_name}.{job_name}", attributes)

    def adding_bulk(self, queue_name: str, job_names: list[str]) -> _AddSpan:
        """The span of one ``add_bulk``: its jobs all carry its context."""
        attributes = _messaging(queue_name, "addBulk", "send")
        attributes["bullmq.job.bulk.names"] = job_names
        attributes["bullmq.job.bulk.count"] = len(job_names)
        attributes["messaging.batch.message_count"] = len(job_names)
        return _AddSpan(self, f"addBulk {queue_name}", attributes)

    def adding_flows(self, queue_name: str, flow_names: list[str], *, bulk: bool) -> _FlowSpans:
        """The spans of one flow producer call (``add``, or ``add_bulk`` with ``bulk``)."""
        if bulk:
            attributes = _messaging("", "addBulkFlows", "send")
            attributes["bullmq.job.bulk.count"] = len(flow_names)
            attributes["bullmq.job.bulk.names"] = ",".join(flow_names)
            attributes["messaging.batch.message_count"] = len(flow_names)
            return _FlowSpans(self, "addBulkFlows", attributes)
        attributes = _messaging(queue_name, "addFlow", "send")
        attributes["bullmq.flow.name"] = flow_names[0] if flow_names else ""
        return _FlowSpans(self, f"addFlow {queue_name}", attributes)

    def processing(self, job: JobRecord) -> _AttemptSpan:
        """The span of one attempt of ``job``, made current while it runs."""
        return _AttemptSpan(self, job)

    # -- shared --------------------------------------------------------------------------------

    def warn(self, what: str, exc: BaseException) -> None:
        """A tracer or meter call failed: say so once per kind of call, then at debug level."""
        if what in self._warned:
            logger.debug("telemetry: %s failed: %s: %s", what, type(exc).__name__, exc)
            return
        self._warned.add(what)
        logger.warning(
            "telemetry: %s failed, going on without it: %s: %s", what, type(exc).__name__, exc
        )


def job_context(job: JobRecord) -> Context:
    """The trace context a job carries (its ``opts.tm``, written by corral or by Node's
    bullmq-otel), as an OpenTelemetry ``Context``: empty when it carries none.

    A processor running in a child process (``processes=``) can start its spans in it::

        with tracer.start_as_current_span("render", context=job_context(job)):
            ...
    """
    carrier = job.opts.get("tm") if isinstance(job.opts, Mapping) else None
    if not isinstance(carrier, str) or not carrier:
        return Context()
    try:
        fields = json.loads(carrier)
    except ValueError:
        return Context()
    if not isinstance(fields, dict):
        return Context()
    return propagate.extract({k: v for k, v in fields.items() if isinstance(v, str)}, Context())


def _messaging(queue_name: str, operation: str, kind: str) -> dict[str, Any]:
    """The attributes every span has: ``bullmq-otel``'s and the messaging conventions'."""
    return {
        "messaging.system": MESSAGING_SYSTEM,
        "messaging.destination.name": queue_name,
        "messaging.operation.name": operation,
        "messaging.operation.type": kind,
        "bullmq.queue.name": queue_name,
        "bullmq.queue.operation": operation,
    }


def _carrier(ctx: Context) -> str | None:
    """A context as ``opts.tm`` holds it: the JSON of the global propagator's fields."""
    fields: dict[str, str] = {}
    propagate.inject(fields, context=ctx)
    return json.dumps(fields, separators=(",", ":")) if fields else None


def _end(span: Span, exc: BaseException | None) -> None:
    if exc is not None:
        span.record_exception(exc)
        span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
    span.end()


class _AddSpan:
    """The PRODUCER span of an add or a bulk: current while it is written."""

    __slots__ = ("_attributes", "_name", "_span", "_telemetry", "_token", "carrier")

    def __init__(self, telemetry: Telemetry, name: str, attributes: dict[str, Any]) -> None:
        self._telemetry = telemetry
        self._name = name
        self._attributes = attributes
        self._span: Span | None = None
        self._token: Token[Context] | None = None
        self.carrier: str | None = None

    def __enter__(self) -> _AddSpan:
        try:
            span = self._telemetry.tracer.start_span(
                self._name, kind=SpanKind.PRODUCER, attributes=self._attributes
            )
            self._span = span
            ctx = trace.set_span_in_context(span)
            self.carrier = _carrier(ctx)
            self._token = otel_context.attach(ctx)
        except Exception as exc:
            self._telemetry.warn("starting an add span", exc)
            self.carrier = None
        return self

    def added(self, job_ids: list[str]) -> None:
        if self._span is None:
            return
        try:
            if len(job_ids) == 1:
                self._span.set_attribute("bullmq.job.id", job_ids[0])
                self._span.set_attribute("messaging.message.id", job_ids[0])
        except Exception as exc:
            self._telemetry.warn("setting span attributes", exc)

    def __exit__(
        self,
        typ: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if self._token is not None:
                otel_context.detach(self._token)
            if self._span is not None:
                _end(self._span, exc)
        except Exception as err:
            self._telemetry.warn("ending an add span", err)


class _FlowSpans:
    """The spans of one flow producer call: the call's, and one per node, each a child of its
    parent node's (a root's: of the call's); only the call's span is current."""

    __slots__ = ("_attributes", "_name", "_nodes", "_span", "_telemetry", "_token")

    def __init__(self, telemetry: Telemetry, name: str, attributes: dict[str, Any]) -> None:
        self._telemetry = telemetry
        self._name = name
        self._attributes = attributes
        self._span: Span | None = None
        self._token: Token[Context] | None = None
        self._nodes: dict[int, Span] = {}

    def __enter__(self) -> _FlowSpans:
        try:
            self._span = self._telemetry.tracer.start_span(
                self._name, kind=SpanKind.PRODUCER, attributes=self._attributes
            )
            self._token = otel_context.attach(trace.set_span_in_context(self._span))
        except Exception as exc:
            self._telemetry.warn("starting a flow span", exc)
        return self

    def node(self, key: int, parent: int | None, queue_name: str, name: str, job_id: str) -> Any:
        above = self._span if parent is None else self._nodes.get(parent)
        if above is None:
            return None
        try:
            attributes = _messaging(queue_name, "addNode", "send")
            attributes["bullmq.job.name"] = name
            attributes["bullmq.job.id"] = job_id
            attributes["messaging.message.id"] = job_id
            span = self._telemetry.tracer.start_span(
                f"addNode {queue_name}",
                context=trace.set_span_in_context(above),
                kind=SpanKind.PRODUCER,
                attributes=attributes,
            )
            self._nodes[key] = span
            return _carrier(trace.set_span_in_context(span))
        except Exception as exc:
            self._telemetry.warn("starting a flow node span", exc)
            return None

    def __exit__(
        self,
        typ: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if self._token is not None:
                otel_context.detach(self._token)
            for span in reversed(self._nodes.values()):
                span.end()
            if self._span is not None:
                _end(self._span, exc)
        except Exception as err:
            self._telemetry.warn("ending a flow span", err)


class _AttemptSpan:
    """The CONSUMER span of one attempt, current (with the producer's baggage) while the
    processor runs; it also feeds the metrics."""

    __slots__ = ("_error", "_job", "_outcome", "_span", "_started", "_telemetry", "_token")

    def __init__(self, telemetry: Telemetry, job: JobRecord) -> None:
        self._telemetry = telemetry
        self._job = job
        self._span: Span | None = None
        self._token: Token[Context] | None = None
        self._error: BaseException | None = None
        self._outcome: str | None = None
        self._started = time.monotonic()

    def __enter__(self) -> _AttemptSpan:
        job, telemetry = self._job, self._telemetry
        try:
            parent = job_context(job)
            attributes = _messaging(job.queue_name, "process", "process")
            attributes["bullmq.job.id"] = job.id
            attributes["bullmq.job.name"] = job.name
            attributes["messaging.message.id"] = job.id
            attributes["bullmq.job.attempts.made"] = job.attempts_started
            if job.processed_on is not None:
                attributes["bullmq.job.processed.timestamp"] = job.processed_on
            span = telemetry.tracer.start_span(
                f"process {job.queue_name}",
                context=parent,
                kind=SpanKind.CONSUMER,
                attributes=attributes,
            )
            self._span = span
            self._token = otel_context.attach(trace.set_span_in_context(span, parent))
        except Exception as exc:
            telemetry.warn("starting a process span", exc)
        if telemetry._metrics is not None:
            try:
                telemetry._metrics.started(job)
            except Exception as exc:
                telemetry.warn("recording a metric", exc)
        return self

    def failed(self, error: BaseException) -> None:
        self._error = error
        if self._span is None:
            return
        try:
            self._span.record_exception(error)
            self._span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
            self._span.add_event("job failed", {"bullmq.job.failed.reason": str(error)})
        except Exception as exc:
            self._telemetry.warn("recording a failure", exc)

    def settled(self, outcome: str) -> None:
        self._outcome = outcome

    def __exit__(
        self,
        typ: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        telemetry = self._telemetry
        state = _STATES.get(self._outcome or "")
        try:
            if self._token is not None:
                otel_context.detach(self._token)
            span = self._span
            if span is not None:
                span.set_attribute("bullmq.job.attempt_finished_timestamp", now_ms())
                if state is not None:
                    span.set_attribute("bullmq.job.state", state)
                if state == "completed":
                    span.add_event("job completed")
                _end(span, exc if self._error is None else None)
        except Exception as err:
            telemetry.warn("ending a process span", err)
        if state is not None and telemetry._metrics is not None:
            try:
                telemetry._metrics.ended(self._job, state, time.monotonic() - self._started)
            except Exception as err:
                telemetry.warn("recording a metric", err)


class _Metrics:
    """The instruments, named and described as ``bullmq-otel``'s (and corral's waiting time)."""

    def __init__(self, meter: otel_metrics.Meter) -> None:
        self.counters = {
            "completed": meter.create_counter(
                "bullmq.jobs.completed", unit="1", description="Number of jobs completed"
            ),
            "failed": meter.create_counter(
                "bullmq.jobs.failed", unit="1", description="Number of jobs failed"
            ),
            "retried": meter.create_counter(
                "bullmq.jobs.retried", unit="1", description="Number of jobs retried"
            ),
        }
        self.duration = meter.create_histogram(
            "bullmq.job.duration", unit="ms", description="Job processing duration"
        )
        self.waiting = meter.create_histogram(
            "corral.job.waiting.duration",
            unit="ms",
            description="Time a job was ready before its first attempt started",
        )

    def started(self, job: JobRecord) -> None:
        """A first attempt starts: record how long the job was ready before (a retry's wait
        is not in the job's hash)."""
        if job.processed_on is None or job.attempts_started > 1:
            return
        waited = max(0, job.processed_on - first_ready_ms(job))
        self.waiting.record(
            waited, {"bullmq.queue.name": job.queue_name, "bullmq.job.name": job.name}
        )

    def ended(self, job: JobRecord, state: str, seconds: float) -> None:
        attributes = {
            "bullmq.queue.name": job.queue_name,
            "bullmq.job.name": job.name,
            "bullmq.job.state": state,
        }
        self.counters[state].add(1, attributes)
        self.duration.record(seconds * 1000, attributes)
