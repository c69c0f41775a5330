"""The hot cache's circuit breaker, without Redis: when it skips, what it remembers."""

from __future__ import annotations

import logging

import pytest

from langgraph_colosseum._core.io import CacheCall, CacheDrop
from langgraph_colosseum.cache import FIRST_BACKOFF, MAX_BACKOFF, Breaker
from langgraph_colosseum.cache import logger as cache_logger

READ = CacheCall("read", "colosseum:{t1}", ())
ADVANCE = CacheCall("advance", "colosseum:{t2}", ())
DROP = CacheDrop(("colosseum:{t3}",))


def test_closed_breaker_admits_everything() -> None:
    breaker = Breaker()
    assert breaker.admit(READ) == []
    assert breaker.admit(DROP) == ["colosseum:{t3}"]


def test_an_outage_skips_redis_and_remembers_the_writes_it_missed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    breaker = Breaker()
    with caplog.at_level(logging.INFO, logger=cache_logger.name):
        breaker.failed(ADVANCE, [], ConnectionError("refused"))
        for _ in range(5):
            assert breaker.admit(READ) is None  # reads skip Redis, nothing to remember
        # Writes and drops are tried all the same (their failure is remembered).
        deletions = breaker.admit(DROP)
        assert deletions is not None and "colosseum:{t3}" in deletions
        breaker.failed(DROP, deletions, ConnectionError("refused"))
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, "one warning per outage"
    assert breaker.missed == {"colosseum:{t2}", "colosseum:{t3}"}
    assert breaker.backoff == 2 * FIRST_BACKOFF

    breaker.retry_at = 0.0  # the backoff has passed: one probe goes through
    probe = breaker.admit(READ)
    assert probe is not None and sorted(probe) == ["colosseum:{t2}", "colosseum:{t3}"]
    assert breaker.admit(READ) is None, "only one probe per backoff"
    breaker.recovered()
    assert breaker.backoff == 0.0 and breaker.admit(READ) == []


def test_deletions_that_failed_are_kept_for_the_next_recovery() -> None:
    breaker = Breaker()
    breaker.failed(ADVANCE, [], ConnectionError("down"))
    breaker.retry_at = 0.0
    deletions = breaker.admit(READ)
    assert deletions == ["colosseum:{t2}"]
    breaker.failed(READ, deletions, TimeoutError("still down"))
    assert breaker.missed == {"colosseum:{t2}"}


def test_backoff_doubles_up_to_its_cap() -> None:
    breaker = Breaker()
    for _ in range(20):
        breaker.failed(READ, [], ConnectionError("down"))
    assert breaker.backoff == MAX_BACKOFF
