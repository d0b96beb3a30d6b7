"""``corral enqueue``: any arguments give a job id (exit 0) or a one-line error (exit 1 or
2, click's usage error), never a traceback; a refused enqueue writes nothing."""

from __future__ import annotations

from typing import Any

import redis
from click.testing import CliRunner
from hypothesis import event, given, settings
from hypothesis import strategies as st

from corral.cli import main
from tests.property import strategies as s
from tests.property.known import skip_known
from tests.property.support import diff, examples, fresh, snapshot

DATA = [
    "{}",
    '{"a": 1}',
    "null",
    "NaN",
    "[Infinity]",
    "1e400",
    "12345678901234567890123",
    "[" * 100_000,
    '"\\ud800"',
    "{",
    "",
    '{"a": "\\u0000"}',
    '{"a":' + '"x"' + "}",
]
NUMBERS = ["1", "0", "-1", "1e17", "nan", "inf", "9007199254740993", "2097152", "x", ""]

cli_args = st.fixed_dictionaries(
    {
        "queue": st.one_of(st.just("q"), s.names(huge=False)),
        "name": st.one_of(st.just("job"), s.names(huge=False)),
    },
    optional={
        "--data": st.one_of(st.sampled_from(DATA), st.text(max_size=10)),
        "--job-id": s.names(huge=False),
        "--delay": st.sampled_from(NUMBERS),
        "--priority": st.sampled_from(NUMBERS),
        "--attempts": st.sampled_from(NUMBERS),
        "--idempotency-key": s.names(huge=False),
        "--idempotency-window": st.sampled_from(NUMBERS),
        "--prefix": st.one_of(st.just("bull"), s.names(huge=False)),
        "--url": st.sampled_from(["notaurl", "redis://127.0.0.1:1/0", "redis://[::1"]),
        "--retries": st.sampled_from(["0", "101", "-1", "x"]),
    },
)


def _argv(args: dict[str, Any], url: str) -> list[str]:
    argv = ["enqueue", "--url", url, "--retries", "0"]
    for option, value in args.items():
        if option.startswith("--"):
            argv += [option, value]
    return [*argv, "--", args["queue"], args["name"]]


@settings(max_examples=examples(80))
@given(args=cli_args)
def test_enqueue(raw: redis.Redis, redis_url: str, args: dict[str, Any]) -> None:
    skip_known("cli.enqueue", **args)
    fresh(raw)
    before = snapshot(raw)
    argv = _argv(args, redis_url)
    result = CliRunner().invoke(main, argv)
    event(f"exit {result.exit_code} ({type(result.exception).__name__})")
    shown = f"corral {' '.join(repr(a)[:60] for a in argv)}"
    if result.exit_code == 0:
        assert result.output.strip(), f"{shown}: exit 0 and no job id"
        return
    assert isinstance(result.exception, SystemExit), (
        f"{shown}: {type(result.exception).__name__}: {result.exception}"
    )
    assert result.exit_code in (1, 2), f"{shown}: exit {result.exit_code}"
    if result.exit_code == 1:  # corral's own error: one line (2 is click's usage message)
        assert len(result.output.strip().splitlines()) == 1, f"{shown}: {result.output[:500]}"
    assert not diff(before, snapshot(raw)), f"{shown}: refused ({result.output}) but wrote"
