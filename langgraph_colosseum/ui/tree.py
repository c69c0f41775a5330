"""The checkpoint tree of a thread drawn as SVG: one row per checkpoint, oldest
at the top, the head's branch in the first lane and each fork in a lane of its
own, so a branch the thread left reads as a line beside the main one.

Only layout lives here; what a checkpoint is comes from `Inspector.tree`.
"""

from __future__ import annotations

from collections.abc import Callable
from html import escape
from typing import Any

ROW, LANE, LEFT, TOP, RADIUS = 30, 26, 16, 16, 7


def lanes(nodes: list[dict[str, Any]], head: str | None) -> dict[str, int]:
    """checkpoint id -> lane. The head's branch (root to head) is lane 0; a
    checkpoint off it continues its parent's lane when it is that parent's first
    child off the branch, and opens a new lane otherwise (a fork)."""
    by_id = {n["checkpoint_id"]: n for n in nodes}
    main: set[str] = set()
    at = head
    while at is not None and at in by_id and at not in main:
        main.add(at)
        at = by_id[at]["parent_checkpoint_id"]
    lane: dict[str, int] = {}
    continued: set[str] = set()  # parents whose lane a child already continues
    next_lane = 1
    for node in sorted(nodes, key=lambda n: n["checkpoint_id"]):
        cid, parent = node["checkpoint_id"], node["parent_checkpoint_id"]
        if cid in main:
            lane[cid] = 0
            if parent is not None:
                continued.add(parent)
        elif parent in lane and parent not in main and parent not in continued:
            lane[cid] = lane[parent]
            continued.add(parent)
        else:
            lane[cid], next_lane = next_lane, next_lane + 1
    return lane


def svg(tree: dict[str, Any], href: Callable[[str], str]) -> str:
    """The tree as an inline SVG; each node links to `href(checkpoint_id)`."""
    nodes = sorted(tree["nodes"], key=lambda n: n["checkpoint_id"])
    if not nodes:
        return '<p class="empty">no checkpoints</p>'
    lane = lanes(nodes, tree["head"])
    row = {n["checkpoint_id"]: i for i, n in enumerate(nodes)}
    width_lanes = max(lane.values()) + 1
    text_x = LEFT + width_lanes * LANE + 8
    height = TOP * 2 + ROW * (len(nodes) - 1)
    edges, dots = [], []
    for n in nodes:
        cid = n["checkpoint_id"]
        x, y = LEFT + lane[cid] * LANE, TOP + row[cid] * ROW
        parent = n["parent_checkpoint_id"]
        if parent in row:
            px, py = LEFT + lane[parent] * LANE, TOP + row[parent] * ROW
            path = (
                f"M{px},{py} L{px},{py + ROW / 2} L{x},{py + ROW / 2} L{x},{y}"
                if px != x
                else f"M{px},{py} L{x},{y}"
            )
            kind = "fork" if lane[cid] != lane[parent] else "edge"
            edges.append(
                f'<path class="{kind}" data-from="{escape(parent)}" data-to="{escape(cid)}" d="{path}"/>'
            )
        writers = n.get("nodes", [])
        label = " · ".join(
            part
            for part in (
                f"step {n['step']}",
                n["source"] or "",
                ", ".join(writers),
                f"run {n['run_id'][:8]}" if n.get("run_id") else "",
            )
            if part
        )
        classes = ["node", f"lane-{lane[cid]}"]
        if cid == tree["head"]:
            classes.append("head")
        if not n["on_head_branch"]:
            classes.append("off-branch")
        dots.append(
            f'<a href="{escape(href(cid))}" class="{" ".join(classes)}" data-checkpoint="{escape(cid)}"'
            f' data-lane="{lane[cid]}"><title>{escape(cid)}</title>'
            f'<circle cx="{x}" cy="{y}" r="{RADIUS}"/>'
            f'<text x="{text_x}" y="{y + 4}">{escape(label)}'
            f'<tspan class="cid" dx="8">{escape(cid[-12:])}</tspan>'
            + ('<tspan class="head-label" dx="8">HEAD</tspan>' if cid == tree["head"] else "")
            + "</text></a>"
        )
    return (
        f'<svg class="tree" role="img" aria-label="checkpoint tree" width="{text_x + 560}"'
        f' height="{height}" data-lanes="{width_lanes}">'
        + "".join(edges)
        + "".join(dots)
        + "</svg>"
    )
