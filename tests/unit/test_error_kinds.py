"""Which server errors a worker waits out, which stop it, and the waits between tries."""

from __future__ import annotations

import pytest
from redis import exceptions as redis_errors
from redis._parsers.base import BaseParser

from corral.backoff import reconnect_delay
from corral.errors import failure_reason, server_error_kind


@pytest.mark.parametrize(
    "reply",
    [
        "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.",
        "OOM command not allowed when used memory > 'maxmemory'.",
        "READONLY You can't write against a read only replica.",
        "UNBLOCKED force unblock from blocking operation, instance state changed",
        "NOSCRIPT No matching script. Please use EVAL.",
        "LOADING Redis is loading the dataset in memory",
        "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
        "TRYAGAIN Multiple keys request during rehashing of slot",
        "CLUSTERDOWN The cluster is down",
        "NOREPLICAS Not enough good replicas to write.",
        "ERR max number of clients reached",
    ],
)
def test_replies_worth_waiting_out_are_transient(reply: str) -> None:
    assert server_error_kind(BaseParser.parse_error(reply)) == "transient"


@pytest.mark.parametrize(
    "reply",
    [
        "WRONGPASS invalid username-password pair or user is disabled.",
        "NOAUTH Authentication required.",
        "NOPERM this user has no permissions to run the 'evalsha' command",
        "ERR unknown command 'EVALSHA', with args beginning with: ",
        "MOVED 3999 127.0.0.1:6381",
    ],
)
def test_replies_no_retry_can_fix_are_configuration(reply: str) -> None:
    assert server_error_kind(BaseParser.parse_error(reply)) == "configuration"


def test_connection_errors_are_transient_and_others_are_not() -> None:
    assert server_error_kind(redis_errors.ConnectionError("reset")) == "transient"
    assert server_error_kind(redis_errors.TimeoutError("slow")) == "transient"
    assert server_error_kind(ConnectionResetError()) == "transient"
    script_bug = BaseParser.parse_error("ERR user_script:1: Script attempted to access nil")
    assert server_error_kind(script_bug) == "other"
    assert server_error_kind(ValueError("bad")) == "other"


def test_reconnect_delay_grows_to_its_cap_and_is_never_zero() -> None:
    delays = [reconnect_delay(n, base=0.05, cap=0.25) for n in range(1, 30)]
    assert all(0.025 / 2 <= d <= 0.25 for d in delays)
    assert max(delays[5:]) > 0.1  # grown past the base
    assert reconnect_delay(1, base=0.05, cap=0.25) <= 0.05


def test_failure_reasons_are_messages_and_name_base_exceptions() -> None:
    assert failure_reason(ValueError("bad input")) == "bad input"  # BullMQ's: the message
    assert failure_reason(ValueError()) == "ValueError"
    assert failure_reason(SystemExit(3)) == "SystemExit: 3"
    assert failure_reason(KeyboardInterrupt()) == "KeyboardInterrupt"
