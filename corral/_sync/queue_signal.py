# Generated from corral/_async/queue_signal.py by scripts/unasync.py: do not edit.
"""Signals of :class:`Queue`: the sending side of ``job.wait_for_signal`` (a layer of
the queue, kept apart so that ``queue.py`` stays under its size).

A signal is data on the server, in the job's ``<job>:x-signals`` hash (name -> JSON payload),
written by ``signal_job.lua``: it survives worker crashes and, with AOF, server restarts, and
is removed with the job.
"""

from __future__ import annotations

from typing import Any, Literal

from corral import _codec, _scripts, clock
from corral._sync._queue_base import QueueBase
from corral._sync.job_signal import check_payload
from corral.bounds import MAX_JOB_ID_LENGTH, MAX_NAME_LENGTH, check_text, names_a_job
from corral.errors import JobFinishedError, script_error

#: Largest signal payload ``signal`` takes, in bytes of JSON: an approval with a comment, a
#: reviewer's edits; a document belongs in object storage, with its URL sent here.
MAX_SIGNAL_BYTES = 1024 * 1024

#: What :meth:`QueueSignals.signal` did: ``"woken"``, the job was parked waiting for
#: this signal and a worker takes it next; ``"kept"``, the job is not parked for it (not at its wait
#: yet, running, waiting for another signal) and its wait will return the payload at once.
SignalOutcome = Literal["woken", "kept"]

_SIGNAL_JOB = _scripts.load("signal_job")


class QueueSignals(QueueBase):
    """Methods that send and read jobs' signals."""

    def signal(self, job_id: str, name: str, payload: Any = None) -> SignalOutcome:
        """Send the job the signal ``name`` with ``payload``; wake it if it waits for it.

        The payload is stored on the job whatever it is doing, so a signal sent before the
        job reaches its ``wait_for_signal`` is not lost; one sent again replaces the first.

        Args:
            job_id: the job's id.
            name: the signal's name, as its ``wait_for_signal`` names it.
            payload: any JSON value (``None`` by default), at most :data:`MAX_SIGNAL_BYTES`.

        Returns:
            ``"woken"`` when the job was parked waiting for this signal (a worker takes it
            next),
            ``"kept"`` otherwise.

        Raises:
            InvalidOptionError: ``job_id``, ``name`` or ``payload`` is refused.
            JobNotFoundError: the job does not exist.
            JobFinishedError: the job has completed or failed (nothing was written).
        """
        job_id = check_text("job_id", job_id, max_length=MAX_JOB_ID_LENGTH)
        name = check_text("signal name", name, max_length=MAX_NAME_LENGTH)
        encoded = check_payload("signal payload", payload, MAX_SIGNAL_BYTES, "MAX_SIGNAL_BYTES")
        if not names_a_job(job_id):
            raise script_error(-1, queue=self.name, job_id=job_id)
        reply = self._run(
            _SIGNAL_JOB, [self._job_prefix, job_id, name, encoded, clock.now_ms()]
        )
        code = int(reply[0])
        if code == -9:
            state = _codec.text(reply[1])
            raise JobFinishedError(
                f"job {job_id} in queue {self.name} has {state}: it takes no signal "
                f"(signal {name!r} refused)",
                queue=self.name,
                job_id=job_id,
            )
        if code < 0:
            raise script_error(code, queue=self.name, job_id=job_id)
        return "woken" if code == 1 else "kept"

    def get_signals(self, job_id: str) -> dict[str, Any]:
        """The signals sent to the job so far: name -> payload (``{}`` for none)."""
        job_id = check_text("job_id", job_id, max_length=MAX_JOB_ID_LENGTH)
        if not names_a_job(job_id):
            return {}
        client = self.client()
        raw: dict[str, str] = client.hgetall(self.keys.signals(job_id))  # type: ignore[assignment]
        return {_codec.text(k): _codec.loads(v) for k, v in raw.items()}
