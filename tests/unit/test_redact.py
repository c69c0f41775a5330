"""One redaction rule for every text that leaves the package (issue 19 item 5,
issue 12 item 8)."""

from __future__ import annotations

import logging

import pytest

from langgraph_colosseum._redact import printable, redact, safe
from langgraph_colosseum.errors import ColosseumError, DatabaseUnavailableError


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("postgresql://app:hunter2@db:5432/prod", "postgresql://app:***@db:5432/prod"),
        (
            "postgres://app:p%40ss@db/prod?sslmode=require",
            "postgres://app:***@db/prod?sslmode=require",
        ),
        ("redis://default:S3cret@cache:6379/0", "redis://default:***@cache:6379/0"),
        ("rediss://:S3cret@cache:6380", "rediss://:***@cache:6380"),
        ("postgresql://app:p@ss@db/prod", "postgresql://app:***@db/prod"),  # an unescaped @
        (
            "host=db user=app password=hunter2 dbname=prod",
            "host=db user=app password=*** dbname=prod",
        ),
        ("password='two words' host=db", "password=*** host=db"),
        (
            "postgresql://app@db/prod?password=hunter2&x=1",
            "postgresql://app@db/prod?password=***&x=1",
        ),
        # an unquoted password runs to the next blank: ")" may be part of it
        ("PGPASSWORD=hunter2 psql", "PGPASSWORD=*** psql"),
        ("postgresql://app@db/prod", "postgresql://app@db/prod"),  # nothing to hide
        (
            "postgresql://postgres:@/postgres?host=/run",
            "postgresql://postgres:@/postgres?host=/run",
        ),
        ("unix:///run/valkey.sock", "unix:///run/valkey.sock"),
    ],
)
def test_redact(text: str, shown: str) -> None:
    assert redact(text) == shown
    assert redact(f"cannot reach {text}: timeout") == f"cannot reach {shown}: timeout"


def test_printable_shows_control_characters_instead_of_sending_them() -> None:
    assert printable("a\x1b[2Jb\x07c\u202ed\x00") == "a\\x1b[2Jb\\x07c\\u202ed\\x00"
    assert printable("line 1\n\tline 2") == "line 1\n\tline 2"
    assert printable("line 1\nline 2", keep_newlines=False) == "line 1\\x0aline 2"
    assert printable("[bold]not markup[/] é ✓") == "[bold]not markup[/] é ✓"


def test_our_errors_never_show_a_password() -> None:
    error = DatabaseUnavailableError("postgresql://app:hunter2@db/prod", "FATAL: no")
    assert "hunter2" not in str(error) and "postgresql://app:***@db/prod" in str(error)
    assert "hunter2" not in str(ColosseumError("via redis://:hunter2@cache:6379"))


def test_our_log_lines_never_show_a_password_or_a_control_character(
    caplog: pytest.LogCaptureFixture,
) -> None:
    logger = logging.getLogger("langgraph_colosseum")
    with caplog.at_level(logging.INFO, logger="langgraph_colosseum"):
        logger.warning("Redis %s failed: %s", "redis://u:hunter2@cache", "x\x1b]0;title\x07")
        try:
            raise RuntimeError("password=hunter2")
        except RuntimeError:
            logger.exception("sweep failed for %s", "postgresql://a:hunter2@db/x")
    assert "hunter2" not in caplog.text and "\x1b" not in caplog.text
    formatted = "\n".join(logging.Formatter().format(r) for r in caplog.records)
    assert "hunter2" not in formatted and "password=***" in formatted
    assert safe("redis://u:hunter2@cache\x1b") == "redis://u:***@cache\\x1b"
