"""Flow trees and the parent options: shape checks and BullMQ's encoding, without a server."""

from __future__ import annotations

import pytest

from corral._keys import split_job_key
from corral.errors import InvalidOptionError
from corral.flow_job import FlowJob, breadth_first, flow_nodes
from corral.options import JobOptions


def test_parent_and_policy_are_encoded_with_bullmqs_short_names() -> None:
    opts = JobOptions.build(
        {"parent": {"id": "7", "queue": "{bull}:reports"}, "remove_dependency_on_failure": True}
    )
    assert opts.parent_key == "{bull}:reports:7"
    assert opts.parent_field() == {"id": "7", "queueKey": "{bull}:reports", "rdof": True}
    assert opts.to_opts(1) == {
        "attempts": 0,
        "parent": {"id": "7", "queue": "{bull}:reports"},
        "rdof": True,
    }
    # A policy without a parent is stored too (a flow sets the parent later), as Node does.
    assert JobOptions.build({"fail_parent_on_failure": True}).to_opts(1) == {
        "attempts": 0,
        "fpof": True,
    }
    assert JobOptions.build({"fail_parent_on_failure": False}).failure_policy is None


def test_at_most_one_policy_and_booleans_only() -> None:
    with pytest.raises(InvalidOptionError, match="at most one failure policy"):
        JobOptions.build({"continue_parent_on_failure": True, "ignore_dependency_on_failure": True})
    with pytest.raises(InvalidOptionError, match="ignore_dependency_on_failure must be True"):
        JobOptions.build({"ignore_dependency_on_failure": 1})


def test_nodes_are_visited_parents_first_with_their_paths() -> None:
    root = flow_nodes(
        FlowJob(
            "a",
            "q",
            children=[
                FlowJob("b", "q", children=[{"name": "d", "queue_name": "r"}]),
                {"name": "c", "queue_name": "r"},
            ],
        )
    )
    assert [(n.path, n.node.name) for n in breadth_first(root)] == [
        ("root", "a"),
        ("root.children[0]", "b"),
        ("root.children[1]", "c"),
        ("root.children[0].children[0]", "d"),
    ]


def test_a_node_given_twice_is_refused() -> None:
    leaf = FlowJob("b", "q")
    with pytest.raises(InvalidOptionError, match="appears twice"):
        flow_nodes(FlowJob("a", "q", children=[leaf, leaf]))


@pytest.mark.parametrize(
    ("tree", "message"),
    [
        ("nope", "expected a FlowJob or a dict"),
        ({"name": "a"}, "'name' and 'queue_name' are required"),
        ({"name": "a", "queue_name": "q", "children": "x"}, "children must be a list"),
        ({"name": "", "queue_name": "q"}, "job name must be a non-empty string"),
    ],
)
def test_bad_nodes(tree: object, message: str) -> None:
    with pytest.raises(InvalidOptionError, match=message):
        flow_nodes(tree)


def test_split_job_key() -> None:
    assert split_job_key("bull:q:1") == ("bull", "q", "1")
    assert split_job_key("{bull}:app:q:abc") == ("{bull}:app", "q", "abc")
    with pytest.raises(ValueError):
        split_job_key("q:1")
