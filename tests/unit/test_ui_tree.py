"""The checkpoint tree's layout (langgraph_colosseum/ui/tree.py): no services."""

from __future__ import annotations

import re

import pytest

pytest.importorskip("starlette")

from langgraph_colosseum.ui.tree import lanes, svg


def node(cid: str, parent: str | None, on_head: bool = False) -> dict:
    return {"checkpoint_id": cid, "parent_checkpoint_id": parent, "step": int(cid[1:]),
            "source": "loop", "run_id": None, "on_head_branch": on_head, "nodes": []}  # fmt: skip


def test_head_branch_is_lane_zero_and_each_fork_opens_a_lane() -> None:
    # c0 - c1 - c2 - c3 (head)
    #        \- c4 - c5          a fork left behind
    #             \- c6          a fork of the fork
    #   \- c7                    another fork, from the root
    nodes = [node("c0", None, True), node("c1", "c0", True), node("c2", "c1", True),
             node("c3", "c2", True), node("c4", "c1"), node("c5", "c4"), node("c6", "c4"),
             node("c7", "c0")]  # fmt: skip
    lane = lanes(nodes, "c3")
    assert [lane[c] for c in ("c0", "c1", "c2", "c3")] == [0, 0, 0, 0]
    assert lane["c4"] == lane["c5"] != 0  # a branch keeps its lane
    assert len({lane["c4"], lane["c6"], lane["c7"]}) == 3  # every fork a lane of its own


def test_svg_draws_every_parent_link_and_escapes_ids() -> None:
    nodes = [node("c0", None, True), node("c1", "c0", True), node("c2", "c0")]
    nodes[2]["source"] = "<b>x</b>"
    picture = svg({"head": "c1", "nodes": nodes}, lambda cid: f"/checkpoint?id={cid}&t=1")
    edges = set(re.findall(r'data-from="([^"]+)" data-to="([^"]+)"', picture))
    assert edges == {("c0", "c1"), ("c0", "c2")}
    assert "<b>" not in picture and "&lt;b&gt;x&lt;/b&gt;" in picture
    assert 'href="/checkpoint?id=c1&amp;t=1"' in picture
    assert picture.count('class="fork"') == 1
