"""Queue construction, ``add`` with every option of ``JobOptionsDict``, and ``add_bulk``."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import orjson
import redis
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from corral import AsyncQueue
from corral._codec import dumps
from corral.dedup import Dedup
from corral.options import FAILURE_POLICIES, MAX_PRIORITY, OPTION_NAMES, Backoff
from tests.property import strategies as s
from tests.property.known import skip_known
from tests.property.support import (
    RawError,
    assert_consistent,
    attempt,
    diff,
    examples,
    fresh,
    snapshot,
)

retention = st.one_of(
    st.booleans(),
    s.ints,
    st.dictionaries(st.sampled_from(["age", "count", "x"]), s.numbers, max_size=2),
    s.anything,
)
flag = st.one_of(st.booleans(), s.anything)

#: Each option of ``add``: plausible values half of the time, hostile ones otherwise.
OPTION_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "job_id": s.names(),
    "delay": st.one_of(st.floats(0, 3600), s.durations),
    "priority": st.one_of(st.integers(0, MAX_PRIORITY), s.numbers),
    "lifo": flag,
    "attempts": st.one_of(st.integers(1, 10), s.numbers),
    "backoff": st.one_of(
        s.durations,
        st.builds(
            Backoff,
            type=st.sampled_from(["fixed", "exponential", "custom", ""]),
            delay=s.durations,
            jitter=s.numbers,
            max_delay=st.one_of(st.none(), s.durations),
        ),
        st.dictionaries(
            st.sampled_from(["type", "delay", "jitter", "max_delay", "x"]), s.anything, max_size=3
        ),
    ),
    "remove_on_complete": retention,
    "remove_on_fail": retention,
    "keep_logs": s.numbers,
    "stacktrace_limit": s.numbers,
    "size_limit": s.numbers,
    "timestamp": st.one_of(st.integers(0, 2**45), s.numbers),
    "parent": st.one_of(
        st.fixed_dictionaries(
            {
                "id": st.one_of(st.just("p1"), s.names()),
                "queue": st.sampled_from(["bull:pq", "bull:q", "bull", ":", "bull:{x}*", "x:pq"]),
            }
        ),
        s.anything,
    ),
    "fail_parent_on_failure": flag,
    "continue_parent_on_failure": flag,
    "ignore_dependency_on_failure": flag,
    "remove_dependency_on_failure": flag,
    "deduplication": st.one_of(
        st.builds(
            Dedup,
            id=s.names(),
            ttl=st.one_of(st.none(), s.durations),
            extend=flag,
            replace=flag,
            keep_last_if_active=flag,
        ),
        st.dictionaries(
            st.sampled_from(["id", "ttl", "extend", "replace", "keep_last_if_active", "x"]),
            s.anything,
            max_size=3,
        ),
        s.anything,
    ),
    "idempotency_key": st.one_of(s.names(), s.anything),
    "idempotency_window": s.durations,
    "timeout": s.durations,
    "soft_timeout": s.durations,
    "dead_letter_queue": st.one_of(st.sampled_from(["dlq", "", "a:b"]), s.names(), s.anything),
    "breakers": st.one_of(st.lists(s.names(), max_size=3), s.names(), s.anything),
}
#: ``repeat`` makes a job scheduler rather than a job: tests/test_repeat_option.py draws its
#: values; here it stays among the hostile names (``job_options`` below), always refused.
PLAIN_OPTION_NAMES = OPTION_NAMES - {"repeat"}
assert set(OPTION_VALUES) == PLAIN_OPTION_NAMES, "every option of add is drawn"

id_text = s.plain_text
counts = st.one_of(st.sampled_from([0, 1, 2**31 - 1]), st.integers(0, 2**31 - 1))

#: Each option with values it must take (at their edges), so that examples get past the
#: checks and reach the scripts.
VALID_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "job_id": id_text,
    "delay": st.one_of(st.floats(0, 3600), st.integers(0, 10**5), st.just(timedelta(hours=1))),
    "priority": st.one_of(st.sampled_from([0, 1, MAX_PRIORITY]), st.integers(0, MAX_PRIORITY)),
    "lifo": st.booleans(),
    "attempts": st.one_of(st.just(2**31 - 1), st.integers(1, 10)),
    "backoff": st.one_of(
        st.floats(0, 100),
        st.just(Backoff.fixed(1)),
        st.just({"type": "exponential", "delay": 1, "jitter": 0.5, "max_delay": 60}),
    ),
    "remove_on_complete": st.one_of(
        st.booleans(),
        counts,
        st.fixed_dictionaries(
            {}, optional={"age": st.integers(0, 10 * 365 * 24 * 3600), "count": counts}
        ).filter(bool),
    ),
    "remove_on_fail": st.one_of(st.booleans(), counts),
    "keep_logs": counts,
    "stacktrace_limit": counts,
    "size_limit": st.integers(1, 512 * 1024 * 1024),
    "timestamp": st.one_of(st.just(2**41 - 1), st.integers(0, 2**41 - 1)),
    "parent": st.just({"id": "p1", "queue": "bull:pq"}),
    "fail_parent_on_failure": st.booleans(),
    "continue_parent_on_failure": st.booleans(),
    "ignore_dependency_on_failure": st.booleans(),
    "remove_dependency_on_failure": st.booleans(),
    "deduplication": st.builds(
        Dedup,
        id=id_text,
        ttl=st.one_of(st.none(), st.floats(0.001, 100)),
        extend=st.booleans(),
        replace=st.booleans(),
        keep_last_if_active=st.booleans(),
    ),
    "idempotency_key": id_text,
    "idempotency_window": st.floats(0.001, 86400),
    "timeout": st.one_of(st.floats(0.001, 3600), st.just(10 * 365 * 24 * 3600)),
    "soft_timeout": st.floats(0.001, 3600),
    # Names only: a random text could be the queue's own name, which is refused.
    "dead_letter_queue": st.sampled_from(["dlq", "dead letters", "\u00f1-dlq", "{x}dlq"]),
    "breakers": st.lists(st.sampled_from(["payments", "mail", "model-api"]), max_size=3),
}
assert set(VALID_VALUES) == PLAIN_OPTION_NAMES


def _compatible(opts: dict[str, Any]) -> dict[str, Any]:
    """Drop what the other options rule out (a second failure policy, a window without a
    key, a dedup extend without a ttl): the valid options must be valid together."""
    policies = [k for k in FAILURE_POLICIES if opts.get(k)]
    for extra in policies[1:]:
        del opts[extra]
    if "idempotency_key" not in opts:
        opts.pop("idempotency_window", None)
    if "timeout" in opts and opts.get("soft_timeout", 0) >= opts["timeout"]:
        opts["soft_timeout"] = opts["timeout"] / 2
        if round(opts["soft_timeout"] * 1000) in (0, round(opts["timeout"] * 1000)):
            del opts["soft_timeout"]
    dedup = opts.get("deduplication")
    if dedup is not None and dedup.extend and dedup.ttl is None:
        opts["deduplication"] = Dedup(dedup.id, ttl=1)
    return opts


valid_options = st.fixed_dictionaries({}, optional=VALID_VALUES).map(_compatible)

#: Options of add: plausible ones, or hostile ones (with unknown option names too).
job_options = st.one_of(
    valid_options,
    st.fixed_dictionaries(
        {}, optional={**OPTION_VALUES, "jobId": s.anything, "repeat": s.anything}
    ),
)


async def _parent(raw: redis.Redis, url: str) -> None:
    """A job ``p1`` in queue ``pq``, for ``parent={"id": "p1", "queue": "bull:pq"}``."""
    async with AsyncQueue("pq", connection=url) as pq:
        await pq.add("parent", None, job_id="p1")


def check_added(r: redis.Redis, job: Any, name: str, data: Any, opts: dict[str, Any]) -> None:
    """The documented effect of a successful add: the job's hash holds what was given."""
    fields = r.hgetall(f"bull:q:{job.id}")
    assert fields, f"add returned job {job.id!r} but wrote no hash"
    if "job_id" in opts and not {"deduplication", "idempotency_key"} & set(opts):
        assert job.id == opts["job_id"]
    if fields.get("name") == name and "deduplication" not in opts:
        assert fields["data"] == dumps(data)
    if "priority" in opts and fields.get("name") == name:
        assert int(fields.get("priority", 0)) == opts["priority"]
    if fields.get("name") == name and "deduplication" not in opts:
        assert job.data == orjson.loads(dumps(data)), "add returned a job with other data"
    assert_consistent(r, after=f"add({name!r}, opts={opts!r})")


@settings(max_examples=examples(300))
@given(
    name=st.one_of(s.plain_text, s.names()),
    data=st.one_of(s.json_values, s.data),
    opts=job_options,
    with_parent=st.booleans(),
)
async def test_add(
    raw: redis.Redis,
    r: redis.Redis,
    redis_url: str,
    queue: AsyncQueue,
    name: str,
    data: Any,
    opts: dict[str, Any],
    with_parent: bool,
) -> None:
    skip_known("add", name=name, data=data, opts=opts)
    fresh(raw)
    if with_parent:
        await _parent(raw, redis_url)
    outcome = await attempt(
        raw,
        lambda: queue.add(name, data, **opts),
        names=["job name", "data", "size_limit", "failure policy", *opts],
        what=f"add({name!r:.60}, {data!r:.60}, **{opts!r:.300})",
    )
    if outcome.ok:
        check_added(r, outcome.value, name, data, opts)


bulk_item = st.one_of(
    st.tuples(s.names(huge=False), s.data),
    st.tuples(s.names(huge=False), s.data, job_options),
    st.tuples(s.names(huge=False), s.data, s.anything),
    s.anything,
)
good_item = st.one_of(
    st.tuples(s.plain_text, s.json_values),
    st.tuples(s.plain_text, s.json_values, valid_options),
)
#: Lists of plausible items (so some reach the script), or with hostile ones among them.
bulks = st.one_of(
    st.lists(good_item, max_size=5), st.lists(st.one_of(good_item, bulk_item), max_size=5)
)


@settings(max_examples=examples(150))
@given(items=bulks, with_parent=st.booleans())
async def test_add_bulk(
    raw: redis.Redis,
    r: redis.Redis,
    redis_url: str,
    queue: AsyncQueue,
    items: list[Any],
    with_parent: bool,
) -> None:
    skip_known("add_bulk", items=items)
    fresh(raw)
    if with_parent:
        await _parent(raw, redis_url)
    before = len(snapshot(raw))
    outcome = await attempt(
        raw,
        lambda: queue.add_bulk(items),
        names=["add_bulk item"],
        what=f"add_bulk({items!r:.400})",
    )
    if outcome.ok:
        assert len(outcome.value) == len(items)
        assert items == [] or len(snapshot(raw)) > before
        assert_consistent(r, after=f"add_bulk({items!r:.400})")


#: Where a queue's keys could meet the neighbour's job ``kept`` (``bull:neighbour:kept:logs``).
OVERLAPS = [
    ("kept", "bull:neighbour"),
    ("neighbou", "bull"),
    ("logs", "bull:neighbour:kept"),
    ("neighbour:kept", "bull"),
    ("*", "bull"),
    ("neighbour", "bul?"),
    ("kept", "bull:*"),
]


@settings(max_examples=examples(120))
@given(
    name=st.one_of(st.sampled_from([n for n, _ in OVERLAPS]), s.plain_text, s.names()),
    prefix=st.one_of(st.sampled_from([p for _, p in OVERLAPS]), s.plain_text, s.names()),
    defaults=st.one_of(st.none(), job_options),
    add_retries=st.one_of(st.just(20), s.numbers),
    backoff_types=st.one_of(st.just(()), st.just(["custom"]), s.anything),
)
async def test_queue_construction(
    raw: redis.Redis,
    r: redis.Redis,
    redis_url: str,
    name: str,
    prefix: str,
    defaults: dict[str, Any] | None,
    add_retries: Any,
    backoff_types: Any,
) -> None:
    """A queue of any name and prefix either is refused, or adds under ``<prefix>:<name>:``
    and obliterates only its own keys (glob characters in either must not widen the match)."""
    skip_known(
        "Queue",
        name=name,
        prefix=prefix,
        defaults=defaults,
        add_retries=add_retries,
        backoff_types=backoff_types,
    )
    assume((name, prefix) != ("neighbour", "bull"))  # that is the neighbour itself
    fresh(raw)
    async with AsyncQueue("neighbour", connection=redis_url) as other:
        kept = await other.add("kept", {"n": 1}, job_id="kept")
        await kept.log("a line of the neighbour's job")

    async def build() -> AsyncQueue:
        return AsyncQueue(
            name,
            connection=redis_url,
            prefix=prefix,
            default_job_options=defaults,  # type: ignore[arg-type]
            add_retries=add_retries,
            backoff_types=backoff_types,
        )

    made = await attempt(
        raw,
        build,
        names=[
            "queue name",
            "prefix",
            "add_retries",
            "default_job_options",
            "backoff",
            *(defaults or {}),
        ],
        what=f"AsyncQueue({name!r:.60}, prefix={prefix!r:.60}, defaults={defaults!r:.200})",
    )
    if not made.ok:
        return
    q: AsyncQueue = made.value
    try:
        neighbours = snapshot(raw)
        added = await attempt(raw, lambda: q.add("j", {"a": 1}), what="add on the new queue")
        if added.ok:
            key = f"{prefix}:{name}:{added.value.id}".encode()
            assert raw.exists(key), f"job key {key!r:.100} missing"
        await attempt(raw, q.get_job_counts, what="get_job_counts on the new queue")
        gone = await attempt(raw, lambda: q.obliterate(force=True), what="obliterate")
        if gone.ok:
            changes = diff(neighbours, snapshot(raw))
            assert not changes, f"obliterate of {prefix!r:.40}:{name!r:.40}: {changes[:5]}"
    finally:
        await q.close()


URLS = [
    "redis://127.0.0.1:1/0",
    "unix:///nonexistent/corral.sock",
    "notaurl",
    "",
    "redis://",
    "redis://127.0.0.1:1/x",
    "redis://:@/",
    "http://example.invalid",
    "redis://[::1:1/0",
]


@settings(max_examples=examples(30))
# Not None: that starts the embedded server, which a test must not leave running.
@given(connection=st.one_of(st.sampled_from(URLS), s.anything.filter(lambda v: v is not None)))
async def test_queue_connection(raw: redis.Redis, connection: Any) -> None:
    """A connection nobody can use is refused with a corral error, or (a server that is not
    there) the transport's ConnectionError, which is documented to pass through."""
    skip_known("Queue.connection", connection=connection)

    async def use() -> Any:
        async with AsyncQueue("q", connection=connection, add_retries=0) as q:
            return await q.get_job_counts()

    try:
        await attempt(
            raw, use, names=["connection", "url", "URL"], what=f"connection={connection!r}"
        )
    except RawError as exc:
        if not isinstance(exc.__cause__, (redis.ConnectionError, redis.TimeoutError)):
            raise
