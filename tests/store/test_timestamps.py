"""Store timestamps: fixed-width ISO 8601 UTC text, strictly increasing."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

from acp_agent.store.base import Timestamps

ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


def test_system_clock_text_is_iso_utc_and_close_to_now() -> None:
    stamps = Timestamps()
    before = datetime.now(timezone.utc)
    text = stamps.now()
    after = datetime.now(timezone.utc)
    assert ISO.match(text), text
    parsed = datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc)
    assert before - timedelta(milliseconds=1) <= parsed <= after + timedelta(milliseconds=1)


def test_system_clock_is_strictly_increasing_even_within_one_microsecond() -> None:
    stamps = Timestamps()
    texts = [stamps.now() for _ in range(20_000)]
    assert texts == sorted(texts)
    assert len(set(texts)) == len(texts)


def test_injected_clock_gets_the_same_format_and_never_repeats() -> None:
    fixed = datetime(2026, 1, 2, 3, 4, 5, 678_901, tzinfo=timezone.utc)
    stamps = Timestamps(lambda: fixed)
    assert [stamps.now() for _ in range(3)] == [
        "2026-01-02T03:04:05.678901Z",
        "2026-01-02T03:04:05.678902Z",
        "2026-01-02T03:04:05.678903Z",
    ]
