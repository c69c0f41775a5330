"""The mutation check's table (tests/guards.py) names clauses that still exist.

Running the mutants takes minutes and is done by hand (`python -m tests.guards`);
checking that every guard's text is still found, exactly once, takes
milliseconds, so an edit that moves a guard out from under its entry fails here.
"""

from __future__ import annotations

from pathlib import Path

from tests.guards import GUARDS, ROOT, check_texts


def test_every_guard_text_is_found_exactly_once() -> None:
    assert check_texts() == []


def test_every_guard_names_tests_that_exist() -> None:
    for guard in GUARDS:
        for node in guard.tests:
            path, _, name = node.partition("::")
            assert (ROOT / path).exists(), f"{guard.name}: {path} does not exist"
            function = name.split("[", 1)[0]
            assert f"def {function}(" in Path(ROOT / path).read_text(), (
                f"{guard.name}: no test {function} in {path}"
            )
