"""corral: a Python job queue and scheduler on Redis/Valkey, data-compatible with BullMQ 6.x.

Example::

    from corral import Queue, Worker

    Queue("emails").add("welcome", {"to": "ada@example.com"})
    Worker("emails", lambda job: f"sent to {job.data['to']}").run()
"""

from corral._async.dead_letter_queue import AsyncDeadLetterQueue
from corral._async.flow import AsyncFlowProducer
from corral._async.job import AsyncJob
from corral._async.queue import AsyncQueue
from corral._async.queue_events import AsyncQueueEvents
from corral._async.sharded_queue import AsyncShardedQueue
from corral._burst import RunSummary
from corral._child_job import AsyncChildJob, ChildJob
from corral._provenance import (
    Provenance,
    ProvenanceHop,
    current_provenance,
    provenance,
    set_provenance_key,
)
from corral._sync.dead_letter_queue import DeadLetterQueue
from corral._sync.flow import FlowProducer
from corral._sync.job import Job
from corral._sync.queue import Queue
from corral._sync.queue_events import QueueEvents
from corral._sync.sharded_queue import ShardedQueue
from corral._version import __version__
from corral.breaker import Breaker, BreakerState
from corral.deadline import deadline
from corral.errors import (
    BreakerOpen,
    BulkAddError,
    ChildJobError,
    ChildProcessDied,
    ClosedError,
    ConfigurationError,
    CorralError,
    CrossSlotError,
    DeadlineExceeded,
    DelayedError,
    FlowAddError,
    InvalidOptionError,
    JobCancelledError,
    JobError,
    JobFailedError,
    JobFinishedError,
    JobLockedError,
    JobNotFoundError,
    JobStateError,
    JobTimeoutError,
    JobTimeoutWarning,
    LockMismatchError,
    LockMissingError,
    MemoryLimitError,
    NotActiveError,
    NotDurableError,
    ParentNotFoundError,
    ProcessorImportError,
    QueueBusyError,
    RateLimitError,
    ServerNotAvailable,
    ServerReplyError,
    SignalTimeout,
    UnrecoverableError,
    WaitingChildrenError,
    WaitingError,
)
from corral.flow_job import FlowJob, JobNode, UnfinishedFlow
from corral.job import JobRecord, JobState
from corral.options import Backoff, Duration, JobOptionsDict, ParentOptions, Retention
from corral.schedule import JobScheduler, JobTemplate
from corral.stream_items import StreamEnd, StreamItem
from corral.worker import Worker

__all__ = [
    "AsyncChildJob",
    "AsyncDeadLetterQueue",
    "AsyncFlowProducer",
    "AsyncJob",
    "AsyncQueue",
    "AsyncQueueEvents",
    "AsyncShardedQueue",
    "Backoff",
    "Breaker",
    "BreakerOpen",
    "BreakerState",
    "BulkAddError",
    "ChildJob",
    "ChildJobError",
    "ChildProcessDied",
    "ClosedError",
    "ConfigurationError",
    "CorralError",
    "CrossSlotError",
    "DeadLetterQueue",
    "DeadlineExceeded",
    "DelayedError",
    "Duration",
    "FlowAddError",
    "FlowJob",
    "FlowProducer",
    "InvalidOptionError",
    "Job",
    "JobCancelledError",
    "JobError",
    "JobFailedError",
    "JobFinishedError",
    "JobLockedError",
    "JobNode",
    "JobNotFoundError",
    "JobOptionsDict",
    "JobRecord",
    "JobScheduler",
    "JobState",
    "JobStateError",
    "JobTemplate",
    "JobTimeoutError",
    "JobTimeoutWarning",
    "LockMismatchError",
    "LockMissingError",
    "MemoryLimitError",
    "NotActiveError",
    "NotDurableError",
    "ParentNotFoundError",
    "ParentOptions",
    "ProcessorImportError",
    "Provenance",
    "ProvenanceHop",
    "Queue",
    "QueueBusyError",
    "QueueEvents",
    "RateLimitError",
    "Retention",
    "RunSummary",
    "ServerNotAvailable",
    "ServerReplyError",
    "ShardedQueue",
    "SignalTimeout",
    "StreamEnd",
    "StreamItem",
    "UnfinishedFlow",
    "UnrecoverableError",
    "WaitingChildrenError",
    "WaitingError",
    "Worker",
    "__version__",
    "current_provenance",
    "deadline",
    "provenance",
    "set_provenance_key",
]
