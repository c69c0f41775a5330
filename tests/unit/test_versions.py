"""StateVersions without services: what it accepts, and the versions it marks."""

from __future__ import annotations

import pytest

from langgraph_colosseum import Migration, StateVersions
from langgraph_colosseum._core.versions import _renamed_channel, _task_of


def test_one_migration_per_version_below() -> None:
    assert StateVersions(1).migrations == {}
    versions = StateVersions(3, {2: Migration(nodes={"a": "b"}), 1: lambda values: None})
    assert list(versions.migrations) == [1, 2]
    assert all(isinstance(m, Migration) for m in versions.migrations.values())
    for bad in ({1: lambda v: v}, {1: lambda v: v, 3: lambda v: v}):
        with pytest.raises(ValueError, match=r"one migration for each of the versions \[1, 2\]"):
            StateVersions(3, bad)
    with pytest.raises(ValueError, match="integer from 1 up"):
        StateVersions(0)


def test_marked_versions_keep_their_order_and_are_new() -> None:
    versions = StateVersions(2, {1: lambda v: None})
    stored = [f"{n:032}.{tail:016}" for n, tail in ((1, 9), (2, 3), (2, 4), (10, 0))]
    checkpoint_id = "1f0c2a3b-0000-6000-8000-000000000001"
    marked = [versions.marked(v, checkpoint_id) for v in stored]
    assert sorted(marked) == marked and not set(marked) & set(stored)
    assert [int(m.split(".")[0]) for m in marked] == [1, 2, 2, 10]  # get_next_version reads this
    # One stored version, migrated at two checkpoints, is two versions: the
    # migration may have read other channels, which differ between them.
    other = "1f0c2a3b-0000-6000-8000-000000000002"
    assert versions.marked(stored[0], other) != marked[0]


def test_node_renames_reach_the_edges_named_after_nodes() -> None:
    renames = {"summarise": "summarize", "gone": None}
    assert _renamed_channel("branch:to:summarise", renames) == "branch:to:summarize"
    assert _renamed_channel("join:left+summarise:end", renames) == "join:left+summarize:end"
    assert _renamed_channel("branch:to:gone", renames) is None
    assert _renamed_channel("summarise", renames) == "summarise"  # a state channel
    assert _task_of("~__pregel_pull, summarise") == ("__pregel_pull", "summarise", None)
    assert _task_of("~__pregel_push, 0000000002") == ("__pregel_push", None, 2)
    assert _task_of("~__pregel_push, 0000000002, 0000000000") == ("__pregel_push", None, 2)
    assert _task_of("") == (None, None, None)


def test_a_migration_checkpoint_id_is_the_one_right_after_the_head() -> None:
    from langgraph_colosseum._core.versions import _id_after

    head = "1f1ed26a-b4b6-64ce-8000-3ed2084378ff"
    assert _id_after(head) == "1f1ed26a-b4b6-64ce-8000-3ed208437900" > head
    # An id of another form (written by other means): a fresh id is used instead.
    assert _id_after("checkpoint-1") is None
    assert _id_after("ffffffff-ffff-ffff-ffff-ffffffffffff") is None
