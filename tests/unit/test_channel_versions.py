"""`next_version`: versions keep the width of the thread's. A new thread gets
InMemorySaver's long form, or the short one with `compact_forms=True`, and
either is continued in its width, so that one thread never mixes widths:
LangGraph takes each new version from the largest of a checkpoint's and
compares them as text, and a long version sorts below a short one."""

from __future__ import annotations

import re

from langgraph.checkpoint.memory import InMemorySaver

from langgraph_colosseum._core.store import SHORT_VERSION_DIGITS, next_version

SHORT = re.compile(r"\d{12}\.[0-9a-f]{16}")
LONG = re.compile(r"\d{32}\.\S{16,}")  # the tail: a float, as InMemorySaver's


def short_version(number: int) -> str:
    """A version as a release that writes the short form makes it."""
    return f"{number:0{SHORT_VERSION_DIGITS}}.{number:016x}"


def test_a_new_thread_gets_long_versions_that_sort_as_text() -> None:
    versions = [next_version(None)]
    for _ in range(1200):
        versions.append(next_version(versions[-1]))
    assert all(LONG.fullmatch(v) for v in versions)
    assert int(versions[-1].split(".")[0]) == 1201
    assert versions == sorted(versions)
    # ints and floats (a checkpoint put with numeric versions) as before
    assert LONG.fullmatch(next_version(7)) and next_version(7).startswith("0" * 31 + "8.")


def test_a_thread_with_short_versions_keeps_them() -> None:
    versions = [short_version(1)]
    for _ in range(1200):
        versions.append(next_version(versions[-1]))
    assert all(SHORT.fullmatch(v) for v in versions)
    assert int(versions[-1].split(".")[0]) == 1201
    assert versions == sorted(versions)
    assert len({v.split(".")[1] for v in versions[1:]}) == len(versions) - 1  # fresh tails
    # what goes wrong in a release that does not continue them: a long one sorts below
    assert InMemorySaver().get_next_version(versions[-1], None) < versions[-1]


def test_a_thread_with_long_versions_keeps_them() -> None:
    long = InMemorySaver().get_next_version(None, None)
    after = next_version(long)
    assert LONG.fullmatch(after) and after > long
    assert int(after.split(".")[0]) == 2


def test_a_marked_version_keeps_its_width() -> None:
    """State-version migrations name a channel at `version~checkpoint_id...`."""
    marked = "~1f000000-0000-6000-8000-000000000000"
    assert SHORT.fullmatch(next_version(short_version(3) + marked))
    assert LONG.fullmatch(next_version(InMemorySaver().get_next_version(None, None) + marked))


def test_compact_forms_give_a_new_channel_the_short_form() -> None:
    first = next_version(None, compact=True)
    assert SHORT.fullmatch(first) and int(first.split(".")[0]) == 1
    assert SHORT.fullmatch(next_version(first, compact=True))
    assert SHORT.fullmatch(next_version(first))  # a process without them continues it
    # a thread's existing width wins: long and numeric versions go on long
    long = InMemorySaver().get_next_version(None, None)
    assert LONG.fullmatch(next_version(long, compact=True))
    assert LONG.fullmatch(next_version(7, compact=True))


def test_a_short_first_version_sorts_above_a_long_thread() -> None:
    """LangGraph versions a never-written channel it must snapshot from None
    (pregel._checkpoint.create_checkpoint): in a thread of long versions the
    short one sorts above them all, and the versions after it go on short."""
    long = "9" * 20
    highest = f"{long:0>32}.0.5"  # the largest long version below 10**20
    first = next_version(None, compact=True)
    assert first > highest
    assert next_version(max(first, highest)) > first
