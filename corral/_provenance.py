"""Who triggered a job: the provenance record jobs carry, its context, and its signature.

``with corral.provenance(actor="user:42", on_behalf_of="user:7", tenant="acme"):`` (or
``async with``) makes every job added inside it carry a record of who asked for it. The scope
lives in a ``contextvars.ContextVar``, so it follows asyncio tasks and ``asyncio.to_thread``
and never leaks from one request to another. A worker sets it while a processor runs: a job
added by a processor carries the running job's record with one more hop in its ``chain``
(the job it went through), flow children carry their flow's, retries keep it (it is part of
the job's ``opts``), and a scheduler's iterations carry the record of the code that
upserted the scheduler (its template holds it).

The record is stored in the job's ``opts`` JSON under ``x-prov``, a key BullMQ never reads:
Node workers process such jobs unchanged, keep the key on retries, and bull-board shows it
with the other options. It records what the producer *claims*. A shared key
(:func:`set_provenance_key`, or ``CORRAL_PROVENANCE_KEY``) signs it with HMAC-SHA256 and lets
workers verify it; ``require_signed=True`` fails, for good, a job whose record is missing,
unsigned or altered. Pure but for the process-wide key and the context variable.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import sys
from collections.abc import Iterable, Mapping
from contextvars import ContextVar, Token
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from corral.bounds import MAX_NAME_LENGTH, check_text
from corral.errors import InvalidOptionError, UnrecoverableError

if TYPE_CHECKING:
    from types import TracebackType

    from corral.job import JobRecord

__all__ = [
    "MAX_FIELD_LENGTH",
    "MAX_HOPS",
    "PROVENANCE_KEY",
    "Provenance",
    "ProvenanceHop",
    "ProvenanceScope",
    "current_provenance",
    "provenance",
    "set_provenance_key",
]

#: Where a job's ``opts`` JSON keeps its record: a key BullMQ never reads or drops.
PROVENANCE_KEY = "x-prov"
#: The longest value of a field (actor, tenant...), in characters.
MAX_FIELD_LENGTH = 256
#: The most hops a chain keeps: the latest ones (``Provenance.dropped`` counts the others), so
#: a job that adds its own successor for ever does not grow its record for ever.
MAX_HOPS = 8
#: The shortest signing key, in bytes: HMAC with fewer is guessable.
MIN_KEY_BYTES = 16
#: Bytes of the HMAC-SHA256 kept in ``sig`` (RFC 4868's truncation: 128 bits).
_SIG_BYTES = 16
#: Record fields, as ``(attribute, key in the stored JSON)``; camelCase as BullMQ's opts are.
_FIELDS = (
    ("actor", "actor"),
    ("on_behalf_of", "onBehalfOf"),
    ("tenant", "tenant"),
    ("request_id", "requestId"),
    ("origin", "origin"),
)


@dataclass(frozen=True, slots=True)
class ProvenanceHop:
    """One job a request went through: the job (queue name, id) and who acted in it."""

    queue: str
    job_id: str
    actor: str | None = None
    on_behalf_of: str | None = None


@dataclass(frozen=True, slots=True)
class Provenance:
    """A job's provenance record: what its producer claimed about who asked for it.

    Attributes:
        actor: who acts (``"user:42"``, ``"agent:planner"``, ``"scheduler"``...).
        on_behalf_of: whom the actor acts for (a support agent's customer).
        tenant / request_id / origin: the tenant, the request that started it all, and
            where it came from (``"api"``, ``"cli"``...).
        chain: the jobs the request went through before this one, oldest first (at most
            :data:`MAX_HOPS`; ``dropped`` older ones were left out).
        traceparent: the W3C trace context the job carries (``opts.tm``), if any.
        signed: the record carries a signature.
        verified: the signature checked out with this process's key (see
            :func:`set_provenance_key`); ``False`` when there is none, no key, or it is wrong.
    """

    actor: str | None = None
    on_behalf_of: str | None = None
    tenant: str | None = None
    request_id: str | None = None
    origin: str | None = None
    chain: tuple[ProvenanceHop, ...] = ()
    dropped: int = 0
    traceparent: str | None = field(default=None, compare=False)
    signed: bool = field(default=False, compare=False)
    verified: bool = field(default=False, compare=False)

    def through(self, job: JobRecord) -> Provenance:
        """The record of jobs added while ``job`` (which carries this record) runs: one
        more hop, the oldest dropped past :data:`MAX_HOPS`."""
        hop = ProvenanceHop(job.queue_name, job.id, self.actor, self.on_behalf_of)
        chain = (*self.chain, hop)
        extra = max(0, len(chain) - MAX_HOPS)
        return replace(
            self,
            chain=chain[extra:],
            dropped=self.dropped + extra,
            traceparent=None,
            signed=False,
            verified=False,
        )

    def to_json(self) -> dict[str, Any]:
        """The record as stored under ``opts["x-prov"]`` (without signature); empty fields
        are left out."""
        out: dict[str, Any] = {}
        for attr, key in _FIELDS:
            value = getattr(self, attr)
            if value is not None:
                out[key] = value
        if self.chain:
            out["chain"] = [_hop_json(hop) for hop in self.chain]
        if self.dropped:
            out["dropped"] = self.dropped
        return out

    def summary(self) -> str:
        """One line for people (``corral job``, the dashboard): ``"user:42 for user:7,
        tenant acme, via emails/3 (user:42), signature verified"``."""
        parts = [self.actor or "(no actor)"]
        if self.on_behalf_of:
            parts[0] += f" for {self.on_behalf_of}"
        for label, value in (
            ("tenant", self.tenant),
            ("request", self.request_id),
            ("origin", self.origin),
        ):
            if value:
                parts.append(f"{label} {value}")
        if self.chain:
            hops = [
                f"{h.queue}/{h.job_id}" + (f" ({h.actor})" if h.actor else "") for h in self.chain
            ]
            more = f"{self.dropped} earlier, " if self.dropped else ""
            parts.append(f"via {more}{' > '.join(hops)}")
        state = "verified" if self.verified else "NOT verified" if self.signed else "none"
        parts.append(f"signature {state}")
        return ", ".join(parts)


def _hop_json(hop: ProvenanceHop) -> dict[str, str]:
    out = {"queue": hop.queue, "job": hop.job_id}
    if hop.actor is not None:
        out["actor"] = hop.actor
    if hop.on_behalf_of is not None:
        out["onBehalfOf"] = hop.on_behalf_of
    return out


# -- signing --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Keys:
    sign: bytes | None
    verify: tuple[bytes, ...]
    require: bool


_UNSET = _Keys(None, (), False)
_keys: _Keys | None = None  # None: not configured yet, read the environment once


def _key_bytes(option: str, key: Any) -> bytes:
    raw = key.encode() if isinstance(key, str) else key
    if not isinstance(raw, bytes):
        raise InvalidOptionError(f"{option} must be bytes or str, got {type(key).__name__}")
    if len(raw) < MIN_KEY_BYTES:
        raise InvalidOptionError(
            f"{option} must be at least {MIN_KEY_BYTES} bytes (got {len(raw)}): a short HMAC "
            "key can be guessed"
        )
    return raw


def set_provenance_key(
    key: bytes | str | None,
    *,
    require_signed: bool = False,
    old_keys: Iterable[bytes | str] = (),
) -> None:
    """Sign the provenance records this process writes, and verify those it reads.

    One setting per process, for every queue, flow producer and worker in it (a key is a
    deployment's secret, as a database password is). Without a call, ``CORRAL_PROVENANCE_KEY``
    gives the key and ``CORRAL_PROVENANCE_REQUIRE_SIGNED=1`` the requirement, which is how
    child processes (``processes=``) and ``corral worker`` get them.

    Args:
        key: the shared HMAC key (at least 16 bytes; ``str`` is taken as UTF-8), or ``None``
            to sign nothing and verify nothing.
        require_signed: workers fail a job, for good and without running it, unless its
            record's signature checks out (a job with no record fails too: stripping a
            record is tampering with it).
        old_keys: keys that still verify (not sign): rotate by signing with a new key while
            the jobs signed with the old one drain.

    Raises:
        InvalidOptionError: a key too short or not bytes, or ``require_signed`` without key.
    """
    global _keys
    if not isinstance(require_signed, bool):
        raise InvalidOptionError(f"require_signed must be True or False, got {require_signed!r}")
    if isinstance(old_keys, (str, bytes)):
        raise InvalidOptionError("old_keys must be a list of keys, not one key")
    if key is None:
        if require_signed:
            raise InvalidOptionError("require_signed=True needs a key to verify with")
        _keys = _UNSET
        return
    signing = _key_bytes("provenance key", key)
    old = tuple(_key_bytes("old_keys item", k) for k in old_keys)
    _keys = _Keys(signing, (signing, *old), require_signed)


def _current_keys() -> _Keys:
    global _keys
    if _keys is None:
        key = os.environ.get("CORRAL_PROVENANCE_KEY") or None
        require = os.environ.get("CORRAL_PROVENANCE_REQUIRE_SIGNED", "") in ("1", "true", "yes")
        set_provenance_key(key, require_signed=require)
    assert _keys is not None
    return _keys


def _message(queue_name: str, record: Mapping[str, Any]) -> bytes:
    """What the signature covers: the queue's name and every field, in a fixed form (values,
    not the stored text, which Lua's cjson and Node re-encode differently)."""
    chain = [
        [h.get("queue"), h.get("job"), h.get("actor"), h.get("onBehalfOf")]
        for h in record.get("chain") or ()
        if isinstance(h, Mapping)
    ]
    values = [1, queue_name, *(record.get(key) for _, key in _FIELDS), chain]
    values.append(record.get("dropped") or 0)
    return json.dumps(values, separators=(",", ":"), ensure_ascii=True).encode()


def _signature(key: bytes, queue_name: str, record: Mapping[str, Any]) -> str:
    digest = hmac.new(key, _message(queue_name, record), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest[:_SIG_BYTES]).decode().rstrip("=")


# -- the scope ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Current:
    """What jobs added now carry: the record, and whether this process may sign it (issued
    here, or inherited from a record that verified: an unverified claim is never signed)."""

    record: Provenance
    trusted: bool
    #: ``(queue name, signing key)`` -> stored JSON, so a loop of adds signs once.
    stored: dict[tuple[str, bytes | None], dict[str, Any]] = field(
        default_factory=dict, compare=False
    )


_CURRENT: ContextVar[_Current | None] = ContextVar("corral_provenance", default=None)


def _field(option: str, value: Any) -> str | None:
    if value is None:
        return None
    return check_text(option, value, max_length=MAX_FIELD_LENGTH)


class ProvenanceScope:
    """The context manager :func:`provenance` returns (``with`` and ``async with``)."""

    __slots__ = ("_fields", "_tokens")

    def __init__(self, fields: dict[str, Any]) -> None:
        self._fields = fields
        self._tokens: list[Token[_Current | None]] = []

    def __enter__(self) -> Provenance:
        outer = _CURRENT.get()
        if outer is None:
            current = _Current(Provenance(**self._fields), trusted=True)
        else:
            current = _Current(replace(outer.record, **self._fields), trusted=outer.trusted)
        self._tokens.append(_CURRENT.set(current))
        return current.record

    def __exit__(
        self,
        typ: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        _CURRENT.reset(self._tokens.pop())

    async def __aenter__(self) -> Provenance:
        return self.__enter__()

    async def __aexit__(
        self,
        typ: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.__exit__(typ, exc, tb)


def provenance(
    *,
    actor: str | None = None,
    on_behalf_of: str | None = None,
    tenant: str | None = None,
    request_id: str | None = None,
    origin: str | None = None,
) -> ProvenanceScope:
    """Attach a provenance record to every job added inside the block (sync or async).

    Inside another scope, or inside a processor whose job carries a record, the fields given
    replace those of the outer record and the others (and the chain) are kept.

    Args:
        actor / on_behalf_of / tenant / request_id / origin: non-empty strings of at most
            :data:`MAX_FIELD_LENGTH` characters, or ``None``.

    Raises:
        InvalidOptionError: a field is not such a string (raised here, before the block).

    Example::

        with corral.provenance(actor="support:ann", on_behalf_of="user:7", origin="admin"):
            queue.add("refund", {"order": 1234})
    """
    given = {
        "actor": _field("actor", actor),
        "on_behalf_of": _field("on_behalf_of", on_behalf_of),
        "tenant": _field("tenant", tenant),
        "request_id": _field("request_id", request_id),
        "origin": _field("origin", origin),
    }
    return ProvenanceScope({k: v for k, v in given.items() if v is not None})


def current_provenance() -> Provenance | None:
    """The record jobs added here and now would carry, or ``None`` outside any scope."""
    current = _CURRENT.get()
    return None if current is None else current.record


def stamp(queue_name: str) -> dict[str, Any] | None:
    """The ``x-prov`` value of a job added now to ``queue_name`` (``None``: outside any
    scope), signed when this process has a key and the record may be signed."""
    current = _CURRENT.get()
    if current is None:
        return None
    key = _current_keys().sign if current.trusted else None
    cached = current.stored.get((queue_name, key))
    if cached is None:
        cached = current.record.to_json()
        if key is not None:
            cached["sig"] = _signature(key, queue_name, cached)
        current.stored[(queue_name, key)] = cached
    return cached


def active_trace_carrier() -> str | None:
    """``opts.tm`` for the OpenTelemetry span current here (as ``corral.otel`` writes it), or
    ``None``. Only when the application imported OpenTelemetry: corral never imports it."""
    if "opentelemetry.propagate" not in sys.modules:
        return None
    from opentelemetry import propagate, trace

    if not trace.get_current_span().get_span_context().is_valid:
        return None
    fields: dict[str, str] = {}
    propagate.inject(fields)
    return json.dumps(fields, separators=(",", ":")) if fields else None


# -- reading --------------------------------------------------------------------------------


def _text(value: Any) -> str | None:
    # As long as a queue name may be: a hop names one.
    return value if isinstance(value, str) and len(value) <= MAX_NAME_LENGTH else None


def read(job: JobRecord) -> Provenance | None:
    """The record ``job`` carries (``None``: none), verified with this process's keys.

    A field of the wrong type (written by hand, or by some other client) is left out; the
    signature then fails, as the record is not what was signed.
    """
    opts = job.opts
    raw = opts.get(PROVENANCE_KEY) if isinstance(opts, dict) else None
    if not isinstance(raw, dict):
        return None
    fields = {attr: _text(raw.get(key)) for attr, key in _FIELDS}
    chain = []
    for hop in raw.get("chain") or ():
        if isinstance(hop, dict) and _text(hop.get("queue")) and _text(hop.get("job")):
            chain.append(
                ProvenanceHop(
                    hop["queue"], hop["job"], _text(hop.get("actor")), _text(hop.get("onBehalfOf"))
                )
            )
    dropped = raw.get("dropped")
    sig = raw.get("sig")
    verified = False
    if isinstance(sig, str):
        for key in _current_keys().verify:
            if hmac.compare_digest(sig, _signature(key, job.queue_name, raw)):
                verified = True
                break
    return Provenance(
        **fields,
        chain=tuple(chain[-MAX_HOPS:]),
        dropped=dropped if isinstance(dropped, int) and dropped > 0 else 0,
        traceparent=_traceparent(opts.get("tm")),
        signed=isinstance(sig, str),
        verified=verified,
    )


def _traceparent(tm: Any) -> str | None:
    if not isinstance(tm, str) or not tm:
        return None
    try:
        carrier = json.loads(tm)
    except ValueError:
        return None
    value = carrier.get("traceparent") if isinstance(carrier, dict) else None
    return value if isinstance(value, str) else None


# -- the worker's side ----------------------------------------------------------------------


def check(job: JobRecord) -> Provenance | None:
    """The record of a job a worker is about to run, refused when the process requires a
    signed one and this one does not verify.

    Raises:
        UnrecoverableError: required, and the record is missing, unsigned or altered (the job
            fails for good and its processor never runs).
    """
    if PROVENANCE_KEY not in job.opts and not _current_keys().require:
        return None  # the common case, one dict lookup
    record = read(job)
    if _current_keys().require and (record is None or not record.verified):
        what = (
            "no provenance record"
            if record is None
            else "an unsigned provenance record"
            if not record.signed
            else "a provenance record whose signature does not verify (altered, or signed "
            "with another key)"
        )
        raise UnrecoverableError(f"refused: job {job.id} carries {what}; signed ones are required")
    return record


def attach(job: JobRecord) -> Token[_Current | None]:
    """Make the scope of jobs added while ``job`` runs its record plus a hop through it (no
    scope when it carries none); :func:`detach` ends it. Raises as :func:`check` does."""
    record = check(job)
    current = None if record is None else _Current(record.through(job), trusted=record.verified)
    return _CURRENT.set(current)


def detach(token: Token[_Current | None]) -> None:
    """End what :func:`attach` began."""
    _CURRENT.reset(token)
