"""JSON encoding of job data, options, return values and progress.

BullMQ stores these with ``JSON.stringify``; orjson writes the same compact form, so a Node
client reads what corral wrote and the other way round. No pickle: anything JSON cannot carry
is refused where it is written.
"""

from __future__ import annotations

from typing import Any

import orjson


def dumps(value: Any) -> str:
    """Encode ``value`` as compact JSON text (``JSON.stringify``'s form)."""
    return orjson.dumps(value).decode()


def loads(data: str | bytes | None) -> Any:
    """Decode JSON text; an absent field (``None``) or empty text decodes to ``None``."""
    if not data:
        return None
    return orjson.loads(data)


def text(value: str | bytes) -> str:
    """A reply element as ``str``, whatever the client's decoding setting."""
    return value.decode() if isinstance(value, bytes) else value


def encode_data(data: Any) -> str:
    """Encode job data, refusing what JSON cannot carry (sets, bytes, NaN, objects).

    Raises:
        InvalidOptionError: naming what could not be encoded.
    """
    from corral.errors import InvalidOptionError

    try:
        encoded = orjson.dumps(data, default=_refuse)
    except (TypeError, orjson.JSONEncodeError) as exc:
        raise InvalidOptionError(f"data must be JSON-serializable: {exc}") from None
    if b"null" in encoded:  # orjson writes NaN and infinities as null: refuse them instead
        _check_finite(data)
    return encoded.decode()


def _refuse(value: Any) -> Any:
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _check_finite(value: Any) -> None:
    from corral.errors import InvalidOptionError

    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        raise InvalidOptionError(f"data must be JSON-serializable: {value!r} is not a JSON number")
    if isinstance(value, dict):
        for v in value.values():
            _check_finite(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _check_finite(v)
