# Generated from corral/_async/job_data.py by scripts/unasync.py: do not edit.
"""Progress, logs and data of :class:`Job` (a mixin, kept apart so that ``job.py`` stays
under its size): what a job stores after it was added, and the limits on its size.

Progress is copied into the queue's events stream at each update and log lines pile up in the
job's ``:logs`` list, so both are bounded (``max_progress_bytes`` and ``max_log_line_bytes`` of
the queue, 64 KiB by default); data keeps to the job's own ``size_limit`` as at add. Every
limit is checked here before the call and again by the script before its first write: a
refused call writes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from corral import _codec, _scripts
from corral.bounds import MAX_COUNT, check_int
from corral.errors import InvalidOptionError

if TYPE_CHECKING:
    from corral._sync._queue_base import QueueBase

#: Largest progress value ``update_progress`` takes by default, in bytes of JSON. Each update
#: is stored on the job and copied into the queue's events stream, which keeps up to
#: ``max_len_events`` (10,000) entries: 64 KiB allows a rich object (a percentage and a
#: status, some hundreds of items) while 10,000 of them stay within 640 MiB. Change it with
#: the queue's ``max_progress_bytes``.
DEFAULT_MAX_PROGRESS_BYTES = 64 * 1024
#: Longest log line ``log`` takes by default, in bytes of UTF-8 (the queue's
#: ``max_log_line_bytes``): a stack trace or a JSON record fits; a file does not belong there.
DEFAULT_MAX_LOG_LINE_BYTES = 64 * 1024

_UPDATE_PROGRESS = _scripts.load("update_progress")
_ADD_LOG = _scripts.load("add_log")
_UPDATE_DATA = _scripts.load("update_data")


class TooLarge(Exception):
    """A script refused a value over a limit it read from the job (``.limit``)."""

    def __init__(self, limit: int) -> None:
        super().__init__(limit)
        self.limit = limit


def _check_size(what: str, encoded: str, limit: int, option: str) -> None:
    """Refuse ``encoded`` (JSON) when it is over ``limit`` bytes; ``option`` names the limit."""
    size = len(encoded.encode())
    if size > limit:
        raise InvalidOptionError(f"{what} is {size} bytes of JSON, over {option}={limit}")


class JobDataMixin:
    """Progress, log and data methods of :class:`Job`."""

    if TYPE_CHECKING:
        queue: QueueBase
        id: str
        data: Any
        opts: dict[str, Any]
        progress: Any
        _on_progress: Callable[[Any, Any], Any] | None

        def _change(self, script: _scripts.Script, *args: Any) -> int: ...

    def _limit(self, name: str, default: int) -> int:
        """A size limit of the job's queue (a queue made by hand may lack the attribute)."""
        value = getattr(self.queue, name, default)
        return value if isinstance(value, int) else default

    def update_progress(self, progress: int | float | dict[str, Any] | list[Any]) -> None:
        """Store the job's progress and emit a ``progress`` event (BullMQ's ``updateProgress``).

        Args:
            progress: a number (a percentage, by convention) or any JSON object or list, of at
                most the queue's ``max_progress_bytes`` of JSON (64 KiB by default): each
                update is also copied into the queue's events stream.

        Raises:
            InvalidOptionError: ``progress`` cannot be written as JSON, or is too large;
                nothing was written.
            JobNotFoundError: the job does not exist any more.
        """
        encoded = _codec.encode_data(progress)
        limit = self._limit("max_progress_bytes", DEFAULT_MAX_PROGRESS_BYTES)
        _check_size("progress", encoded, limit, "max_progress_bytes")
        self._change(_UPDATE_PROGRESS, encoded, limit)
        self.progress = _codec.loads(encoded)
        if self._on_progress is not None:
            self._on_progress(self, self.progress)

    def log(self, line: str) -> int:
        """Append ``line`` to the job's log, keeping the newest ``keepLogs`` lines when set.

        Args:
            line: one line of text, of at most the queue's ``max_log_line_bytes`` of UTF-8
                (64 KiB by default).

        Returns:
            How many lines the log holds now.

        Raises:
            InvalidOptionError: ``line`` is not a string or is too long, or the job's
                ``keep_logs`` is not a count; nothing was written.
            JobNotFoundError: the job does not exist any more.
        """
        if not isinstance(line, str):
            raise InvalidOptionError(f"log line must be a string, got {type(line).__name__}")
        try:
            encoded = line.encode()
        except UnicodeEncodeError as exc:
            raise InvalidOptionError(f"log line cannot be written as UTF-8: {exc}") from None
        limit = self._limit("max_log_line_bytes", DEFAULT_MAX_LOG_LINE_BYTES)
        if len(encoded) > limit:
            raise InvalidOptionError(
                f"log line is {len(encoded)} bytes, over the queue's max_log_line_bytes={limit}"
            )
        keep = self.opts.get("kl", self.opts.get("keepLogs"))
        if keep is not None:
            if isinstance(keep, bool) or not isinstance(keep, int) or keep < 0:
                raise InvalidOptionError(
                    f"keep_logs of job {self.id} must be an integer >= 0, got {keep!r}"
                )
            # Past any list's length it keeps every line; clamped so that Lua, whose numbers
            # are doubles, receives an exact integer.
            keep = min(keep, MAX_COUNT)
        return self._change(_ADD_LOG, line, "" if keep is None else keep, limit)

    def get_logs(
        self, start: int = 0, end: int = -1, *, asc: bool = True
    ) -> tuple[list[str], int]:
        """Lines of the job's log, and how many there are in all (BullMQ's ``getJobLogs``).

        Args:
            start: index of the first line wanted (0: the oldest, or the newest when
                ``asc=False``).
            end: index of the last line wanted, inclusive (-1: through the last).
            asc: oldest first; ``False`` counts from the newest and returns newest first.

        Returns:
            ``(lines, total)``.
        """
        check_int("start", start, None, None)
        check_int("end", end, None, None)
        if not isinstance(asc, bool):
            raise InvalidOptionError(f"asc must be True or False, got {asc!r}")
        key = self.queue.keys.logs(self.id)
        client = self.queue.client()
        with client.pipeline(transaction=True) as pipe:
            if asc:
                pipe.lrange(key, start, end)
            else:
                pipe.lrange(key, -(end + 1), -(start + 1))
            pipe.llen(key)
            lines, total = pipe.execute()
        if not asc:
            lines.reverse()
        return list(lines), int(total)

    def clear_logs(self, keep: int = 0) -> None:
        """Delete the job's log lines but the newest ``keep`` (BullMQ's ``clearLogs``).

        One command, so it needs no script to be atomic.
        """
        check_int("keep", keep)
        key = self.queue.keys.logs(self.id)
        client = self.queue.client()
        if keep == 0:
            client.delete(key)
        else:
            client.ltrim(key, -keep, -1)

    def update_data(self, data: Any) -> None:
        """Replace the job's data (BullMQ's ``updateData``).

        The job's ``size_limit`` (``opts.sizeLimit``), when it has one, applies as at add: it
        is checked here against the opts this object holds, and by the script against the
        stored ones.

        Raises:
            InvalidOptionError: ``data`` cannot be written as JSON, or is over the job's
                ``size_limit``; nothing was written.
            JobNotFoundError: the job does not exist any more.
        """
        encoded = _codec.encode_data(data)
        limit = self.opts.get("sizeLimit")
        if isinstance(limit, int) and not isinstance(limit, bool):
            _check_size("data", encoded, limit, "size_limit")
        try:
            self._change(_UPDATE_DATA, encoded)
        except TooLarge as exc:
            raise InvalidOptionError(
                f"data is {len(encoded.encode())} bytes of JSON, over the size_limit={exc.limit}"
                f" stored with job {self.id}"
            ) from None
        self.data = _codec.loads(encoded)
