from datetime import timedelta

import pytest

from corral.errors import InvalidOptionError
from corral.options import JobOptions, check_name, duration_ms, retention_limits


def test_opts_json_has_attempts_and_only_given_options() -> None:
    assert JobOptions.build({}).to_opts(1) == {"attempts": 0}
    opts = JobOptions.build(
        {
            "job_id": "a-b",
            "delay": 1.5,
            "priority": 3,
            "lifo": True,
            "attempts": 4,
            "remove_on_complete": True,
        }
    )
    assert opts.to_opts(1) == {
        "attempts": 4,
        "delay": 1500,
        "priority": 3,
        "lifo": True,
        "jobId": "a-b",
        "removeOnComplete": True,
    }


def test_durations_accept_seconds_and_timedelta() -> None:
    assert duration_ms("delay", 2) == 2000
    assert duration_ms("delay", 0.25) == 250
    assert duration_ms("delay", timedelta(minutes=1)) == 60_000


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"job_id": "a:b"}, "job_id must not contain ':'"),
        ({"job_id": "123"}, "job_id must not be all digits"),
        ({"job_id": "x" * 256}, "job_id must be at most 255"),
        ({"job_id": ""}, "job_id must be a non-empty string"),
        ({"delay": -1}, "delay must be a finite number >= 0"),
        ({"delay": float("nan")}, "delay must be a finite number >= 0"),
        ({"delay": float("inf")}, "delay must be a finite number >= 0"),
        ({"delay": "5"}, "delay must be seconds or a timedelta"),
        ({"priority": 2_097_152}, "priority must be an integer from 0 to 2097151"),
        ({"priority": 1.5}, "priority must be an integer"),
        ({"attempts": 0}, "attempts must be an integer from 1 to 2147483647"),
        ({"remove_on_complete": -1}, "remove_on_complete must be True"),
        ({"remove_on_fail": {"age": -5}}, r"remove_on_fail\['age'\] must be an integer from 0 to"),
        ({"timestamp": -3}, r"timestamp \(epoch ms\) must be an integer from 0 to"),
    ],
)
def test_bad_options_are_refused_with_their_name(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidOptionError, match=message):
        JobOptions.build(kwargs)


def test_names() -> None:
    assert check_name("queue name", "emails", colon=False) == "emails"
    with pytest.raises(InvalidOptionError, match="queue name must not contain ':'"):
        check_name("queue name", "a:b", colon=False)
    with pytest.raises(InvalidOptionError, match="job name must be a non-empty string"):
        check_name("job name", "")
    with pytest.raises(InvalidOptionError, match="at most 1024"):
        check_name("job name", "n" * 1025)


def test_retention_limits() -> None:
    assert retention_limits(None) == (-1, -1)
    assert retention_limits(False) == (-1, -1)
    assert retention_limits(True) == (0, -1)
    assert retention_limits(5) == (5, -1)
    assert retention_limits({"age": 60, "count": 3}) == (3, 60_000)
    assert retention_limits({"age": 60}) == (-1, 60_000)
