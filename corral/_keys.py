"""The only place where Redis key names are built.

BullMQ 6.x names every key of a queue ``<prefix>:<queue>:<suffix>`` and a job's hash
``<prefix>:<queue>:<job id>``. Keeping all names here means a change of layout is one edit,
and it keeps every script's keys in the queue's hash slot when the prefix carries a hash tag
(``{bull}``), which is what makes the scripts safe on Redis Cluster.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from redis.crc import key_slot

#: BullMQ's default prefix: Node BullMQ and bull-board see corral's queues with no settings.
DEFAULT_PREFIX = "bull"


#: Suffixes of the keys passed to every script, in KEYS order (1-based in Lua).
SCRIPT_KEY_SUFFIXES: tuple[str, ...] = (
    "wait",
    "paused",
    "active",
    "prioritized",
    "pc",
    "delayed",
    "waiting-children",
    "completed",
    "failed",
    "marker",
    "events",
    "meta",
    "stalled",
    "stalled-check",
    "limiter",
    "id",
)


#: Suffix of the queue's hash of pending dead letters (:attr:`QueueKeys.dead_letters`).
DEAD_LETTERS_SUFFIX = "x-dlq"

#: Suffix of the queue's zset of parked jobs (:attr:`QueueKeys.parked`).
PARKED_SUFFIX = "x-parked"

#: Suffixes of corral's keys hanging off a job's hash (:meth:`QueueKeys.signals`,
#: :meth:`QueueKeys.steps`); the scripts that remove a job delete them with it.
SIGNALS_SUFFIX = "x-signals"
STEPS_SUFFIX = "x-steps"

#: Suffix of a job's stream of partial results (:meth:`QueueKeys.job_stream`); ``x-``, like
#: corral's other additions, so that it can never meet a key BullMQ hangs off a job.
JOB_STREAM_SUFFIX = "x-stream"

#: The middle of a circuit breaker's key, ``<prefix>:x-breaker:<name>`` (:func:`breaker_key`).
BREAKER_SUFFIX = "x-breaker"


def breaker_key(prefix: str, name: str) -> str:
    """The hash of circuit breaker ``name`` (``_lua/include/breaker.lua`` lists its fields).

    A breaker belongs to no queue: the jobs of every queue of the prefix share it. On Redis
    Cluster the prefix's hash tag (``{bull}``) puts it in the slot of those queues' keys.
    """
    return f"{prefix}:{BREAKER_SUFFIX}:{name}"


def hash_tag(name: str) -> str | None:
    """The hash tag of a key that starts with ``name`` (the text between the first ``{`` and
    the first ``}`` after it, when not empty), or ``None`` when ``name`` holds no complete one:
    then keys ``name:...`` are hashed whole and spread over the cluster's slots."""
    start = name.find("{")
    if start < 0:
        return None
    end = name.find("}", start + 1)
    return name[start + 1 : end] if end > start + 1 else None


def slot_of(name: str) -> int | None:
    """The one Redis Cluster hash slot of every key ``name:...``, or ``None`` when they do not
    share one (``name`` holds no hash tag)."""
    tag = hash_tag(name)
    return None if tag is None else int(key_slot(tag.encode()))


@dataclass(frozen=True, slots=True)
class QueueKeys:
    """Key names of one queue (``prefix:name``)."""

    name: str
    prefix: str = DEFAULT_PREFIX
    base: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "base", f"{self.prefix}:{self.name}")

    def key(self, suffix: str) -> str:
        """Any key of the queue: ``prefix:name:suffix``."""
        return f"{self.base}:{suffix}"

    def job(self, job_id: str) -> str:
        """The job's hash."""
        return f"{self.base}:{job_id}"

    def lock(self, job_id: str) -> str:
        return f"{self.base}:{job_id}:lock"

    def logs(self, job_id: str) -> str:
        return f"{self.base}:{job_id}:logs"

    def job_stream(self, job_id: str) -> str:
        """corral's stream of the job's partial results (``job.stream``):
        ``prefix:name:<id>:x-stream``, deleted with the job by ``_lua/include/remove.lua`` and
        ``remove_tree.lua``, which name it the same way."""
        return f"{self.base}:{job_id}:{JOB_STREAM_SUFFIX}"

    def signals(self, job_id: str) -> str:
        """The job's signals, name -> JSON payload (``queue.signal``; read by
        ``park_job.lua``, written by ``signal_job.lua``, which build the same name)."""
        return f"{self.base}:{job_id}:{SIGNALS_SUFFIX}"

    def steps(self, job_id: str) -> str:
        """The job's recorded steps, name -> JSON result (``job.step``; ``record_step.lua``)."""
        return f"{self.base}:{job_id}:{STEPS_SUFFIX}"

    def cancel_channel(self) -> str:
        """The pub/sub channel ``cancel_job.lua`` publishes a cancel of an active job on, and
        every worker of the queue listens on: ``prefix:name:x-cancel`` (a channel, not a key:
        it shares no name space with the queue's keys)."""
        return f"{self.base}:x-cancel"

    def script_keys(self) -> list[str]:
        """The queue's keys in the order every script of ``_lua/`` receives them.

        One fixed order (see ``_lua/include/keys.lua``) for every script keeps the Python
        wrappers and the Lua headers from drifting apart; a script uses the keys it needs.
        """
        return [self.key(suffix) for suffix in SCRIPT_KEY_SUFFIXES]

    @property
    def wait(self) -> str:
        return self.key("wait")

    @property
    def paused(self) -> str:
        return self.key("paused")

    @property
    def active(self) -> str:
        return self.key("active")

    @property
    def prioritized(self) -> str:
        return self.key("prioritized")

    @property
    def priority_counter(self) -> str:
        return self.key("pc")

    @property
    def delayed(self) -> str:
        return self.key("delayed")

    @property
    def waiting_children(self) -> str:
        return self.key("waiting-children")

    @property
    def completed(self) -> str:
        return self.key("completed")

    @property
    def failed(self) -> str:
        return self.key("failed")

    @property
    def marker(self) -> str:
        return self.key("marker")

    @property
    def events(self) -> str:
        return self.key("events")

    @property
    def meta(self) -> str:
        return self.key("meta")

    @property
    def stalled(self) -> str:
        return self.key("stalled")

    @property
    def stalled_check(self) -> str:
        return self.key("stalled-check")

    @property
    def limiter(self) -> str:
        return self.key("limiter")

    @property
    def id_counter(self) -> str:
        return self.key("id")

    @property
    def parked(self) -> str:
        """corral's zset of the jobs parked by ``wait_for_signal``: job id -> the epoch ms it
        runs again (its wait's timeout, or when its signal came), ``prefix:name:x-parked``,
        named from the prefix the same way by ``_lua/include/parked.lua``."""
        return self.key(PARKED_SUFFIX)

    @property
    def dead_letters(self) -> str:
        """corral's hash of the dead letters not yet copied into their dead-letter queue:
        ``prefix:name:x-dlq``, written by the scripts that fail a job for good
        (``_lua/include/dead_letter.lua``, which names it from the prefix the same way)."""
        return self.key(DEAD_LETTERS_SUFFIX)


def split_job_key(job_key: str) -> tuple[str, str, str]:
    """``(prefix, queue name, job id)`` of a full job key ``"<prefix>:<queue>:<id>"``.

    Queue names and job ids hold no ``:``, so the last two separators split it even when the
    prefix has some (``"{bull}:app"``).

    Raises:
        ValueError: ``job_key`` has fewer than three parts.
    """
    prefix, queue_name, job_id = job_key.rsplit(":", 2)
    if not (prefix and queue_name and job_id):
        raise ValueError(f"not a job key: {job_key!r}")
    return prefix, queue_name, job_id
