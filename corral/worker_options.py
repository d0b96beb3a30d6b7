"""A worker's settings, checked before anything runs. Pure: the ``Worker`` constructor
builds one and refuses bad input here, naming the argument, with nothing started or written.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from corral import options
from corral._async._redis import Connectable, check_connection
from corral._imports import ProcessOptions, import_processor
from corral._keys import QueueKeys
from corral.bounds import check_text
from corral.errors import InvalidOptionError
from corral.options import MAX_SIZE_LIMIT, Duration, Retention
from corral.retry import BackoffStrategy, RetryPolicy


@dataclass(frozen=True, slots=True)
class WorkerOptions:
    """What ``Worker(...)`` was given, validated and in the units the worker uses."""

    queue_name: str
    processor: Callable[[Any], Any] | None
    #: The processor is an ``async def`` (it runs on the loop; else in threads or children).
    is_async: bool
    connection: Connectable
    prefix: str
    concurrency: int
    name: str
    lock_ms: int
    stalled_ms: int
    max_stalled: int
    drain_delay: float
    limit_max: int
    limit_ms: int
    policy: RetryPolicy
    close_grace: float
    metrics_points: int
    max_progress_bytes: int
    max_log_line_bytes: int
    timeout_ms: int
    soft_timeout_ms: int
    processes: ProcessOptions | None
    strict: bool
    #: Where jobs this worker fails for good go when their opts name no DLQ ("": nowhere).
    dead_letter_queue: str = ""
    #: ``removeOnComplete``/``removeOnFail`` for jobs whose opts give none (BullMQ's names).
    retention_defaults: Mapping[str, Retention] = field(default_factory=dict)
    skip_stalled_check: bool = False
    skip_lock_renewal: bool = False

    @classmethod
    def build(
        cls,
        queue_name: str,
        processor: Callable[[Any], Any] | str | None,
        *,
        connection: Connectable,
        prefix: str,
        concurrency: int | None,
        name: str | None,
        lock_duration: Duration,
        stalled_interval: Duration,
        max_stalled_count: int,
        drain_delay: Duration,
        limiter: Mapping[str, Any] | None,
        backoff_strategies: Mapping[str, BackoffStrategy] | None,
        retry_on: type[BaseException] | Sequence[type[BaseException]] | None,
        no_retry_on: type[BaseException] | Sequence[type[BaseException]],
        close_grace: Duration,
        metrics_max_data_points: int,
        max_progress_bytes: int,
        max_log_line_bytes: int,
        timeout: Duration | None,
        soft_timeout: Duration | None,
        processes: int | None,
        max_memory_mb: int | None,
        max_jobs_per_child: int | None,
        strict: bool,
        dead_letter_queue: str | None = None,
        remove_on_complete: Retention | None = None,
        remove_on_fail: Retention | None = None,
        skip_stalled_check: bool = False,
        skip_lock_renewal: bool = False,
    ) -> WorkerOptions:
        """Check every argument of ``Worker``; raise the first error, naming it.

        Raises:
            InvalidOptionError: a value out of range or of the wrong kind.
            ProcessorImportError: a ``"module:function"`` processor cannot be imported, or
                one given with ``processes=`` cannot be imported by name.
        """
        options.check_name("queue name", queue_name, colon=False)
        spec = None
        if isinstance(processor, str):
            spec, processor = processor, import_processor(processor)
        if processor is not None and not callable(processor):
            raise InvalidOptionError(f"processor must be callable, got {processor!r}")
        timeout_ms, soft_timeout_ms = options.timeouts(timeout, soft_timeout)
        children = ProcessOptions.build(
            processor, spec, processes, max_memory_mb, max_jobs_per_child
        )
        if concurrency is None:
            concurrency = children.size if children else 1
        limit_max, limit_ms = options.limiter(limiter)
        return cls(
            queue_name=queue_name,
            processor=processor,
            is_async=processor is not None and inspect.iscoroutinefunction(processor),
            connection=check_connection(connection, slot_key=QueueKeys(queue_name, prefix).base),
            prefix=options.check_prefix(prefix),
            concurrency=options.int_option("concurrency", concurrency, 1),
            name="" if name is None else check_text("worker name", name, word=True),
            lock_ms=options.positive_ms("lock_duration", lock_duration),
            stalled_ms=options.positive_ms("stalled_interval", stalled_interval),
            max_stalled=options.int_option("max_stalled_count", max_stalled_count, 0),
            drain_delay=options.positive_ms("drain_delay", drain_delay) / 1000,
            limit_max=limit_max,
            limit_ms=limit_ms,
            policy=_retry_policy(backoff_strategies, retry_on, no_retry_on),
            close_grace=options.duration_ms("close_grace", close_grace) / 1000,
            metrics_points=options.int_option(
                "metrics_max_data_points", metrics_max_data_points, 0
            ),
            max_progress_bytes=options.int_option(
                "max_progress_bytes", max_progress_bytes, 1, MAX_SIZE_LIMIT
            ),
            max_log_line_bytes=options.int_option(
                "max_log_line_bytes", max_log_line_bytes, 1, MAX_SIZE_LIMIT
            ),
            timeout_ms=timeout_ms,
            soft_timeout_ms=soft_timeout_ms,
            processes=children,
            strict=strict,
            dead_letter_queue=""
            if dead_letter_queue is None
            else options.check_dead_letter_queue(dead_letter_queue, queue_name),
            retention_defaults={
                key: options.check_retention(option, value)
                for key, option, value in (
                    ("removeOnComplete", "remove_on_complete", remove_on_complete),
                    ("removeOnFail", "remove_on_fail", remove_on_fail),
                )
                if value is not None
            },
            skip_stalled_check=_flag("skip_stalled_check", skip_stalled_check),
            skip_lock_renewal=_flag("skip_lock_renewal", skip_lock_renewal),
        )


def _flag(option: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise InvalidOptionError(f"{option} must be True or False, got {value!r}")
    return value


def _retry_policy(
    backoff_strategies: Mapping[str, BackoffStrategy] | None,
    retry_on: type[BaseException] | Sequence[type[BaseException]] | None,
    no_retry_on: type[BaseException] | Sequence[type[BaseException]],
) -> RetryPolicy:
    if backoff_strategies is not None and not isinstance(backoff_strategies, Mapping):
        raise InvalidOptionError(
            "backoff_strategies must be a dict of name -> function, "
            f"got {type(backoff_strategies).__name__}"
        )
    for strategy, function in (backoff_strategies or {}).items():
        check_text("backoff_strategies key", strategy)
        if not callable(function):
            raise InvalidOptionError(f"backoff_strategies[{strategy!r}] must be callable")
    return RetryPolicy(
        strategies=dict(backoff_strategies or {}),
        retry_on=None if retry_on is None else options.exception_types("retry_on", retry_on),
        no_retry_on=options.exception_types("no_retry_on", no_retry_on),
    )
