"""corral: a Python job queue and scheduler on Redis/Valkey, data-compatible with BullMQ 6.x.

Example::

    from corral import Queue, Worker

    Queue("emails").add("welcome", {"to": "ada@example.com"})
    Worker("emails", lambda job: f"sent to {job.data['to']}").run()
"""

from corral._async.queue import AsyncQueue
from corral._sync.queue import Queue
from corral._version import __version__
from corral.errors import (
    ConfigurationError,
    CorralError,
    InvalidOptionError,
    JobError,
    JobNotFoundError,
    LockMismatchError,
    LockMissingError,
    NotActiveError,
    ServerNotAvailable,
    UnrecoverableError,
)
from corral.job import Job, JobState
from corral.worker import Worker

__all__ = [
    "AsyncQueue",
    "ConfigurationError",
    "CorralError",
    "InvalidOptionError",
    "Job",
    "JobError",
    "JobNotFoundError",
    "JobState",
    "LockMismatchError",
    "LockMissingError",
    "NotActiveError",
    "Queue",
    "ServerNotAvailable",
    "UnrecoverableError",
    "Worker",
    "__version__",
]
