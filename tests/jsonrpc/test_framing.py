"""LineBuffer: the same lines however the bytes are split, and a cap that holds."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from acp_agent.errors import OversizedLine
from acp_agent.jsonrpc import LineBuffer

Out = list[bytes | OversizedLine]


def feed_whole(data: bytes, max_line: int = 1024) -> Out:
    buf = LineBuffer(max_line)
    return buf.feed(data) + buf.close()


def feed_split(data: bytes, cuts: list[int], max_line: int = 1024) -> Out:
    buf = LineBuffer(max_line)
    out: Out = []
    start = 0
    for cut in sorted(set(cuts)):
        out += buf.feed(data[start:cut])
        start = cut
    out += buf.feed(data[start:])
    return out + buf.close()


def feed_bytewise(data: bytes, max_line: int = 1024) -> Out:
    buf = LineBuffer(max_line)
    out: Out = []
    for i in range(len(data)):
        out += buf.feed(data[i : i + 1])
    return out + buf.close()


def normal(out: Out) -> list[bytes | tuple[str, int, int]]:
    """OversizedLine compares by identity; compare by (size, limit) instead."""
    return [("oversized", x.size, x.limit) if isinstance(x, OversizedLine) else x for x in out]


SAMPLE = b'{"a":1}\n\n  \r\n{"b":2}\r\n\t\nx\ry\xe2\x80\xa8z\n' + b"L" * 40 + b"\nlast"


def test_basic_lines() -> None:
    assert feed_whole(b"one\ntwo\n") == [b"one", b"two"]


def test_sample_whole_bytewise_split_agree() -> None:
    expected = normal(feed_whole(SAMPLE, max_line=32))
    assert expected == [
        b'{"a":1}',
        b'{"b":2}',
        b"x\ry\xe2\x80\xa8z",  # neither a lone \r nor U+2028 ends a line
        ("oversized", 40, 32),
        b"last",
    ]
    assert normal(feed_bytewise(SAMPLE, max_line=32)) == expected
    assert normal(feed_split(SAMPLE, [3, 7, 8, 9, 20, 50, 51], max_line=32)) == expected


def test_crlf_strips_one_cr_only() -> None:
    assert feed_whole(b"a\r\nb\r\r\n") == [b"a", b"b\r"]


def test_blank_and_whitespace_lines_skipped() -> None:
    assert feed_whole(b"\n\n \n\t\r\n\r\n\x0b\x0c\nz\n") == [b"z"]


def test_trailing_garbage_delivered_by_close() -> None:
    buf = LineBuffer()
    assert buf.feed(b'{"ok":1}\n{"trunc') == [b'{"ok":1}']
    assert buf.buffered == len(b'{"trunc')
    assert buf.close() == [b'{"trunc']
    assert buf.buffered == 0
    assert buf.close() == []


def test_close_on_whitespace_tail_gives_nothing() -> None:
    buf = LineBuffer()
    assert buf.feed(b"a\n  \r") == [b"a"]
    assert buf.close() == []


def test_empty_feed() -> None:
    buf = LineBuffer()
    assert buf.feed(b"") == []
    assert buf.buffered == 0


@pytest.mark.parametrize("chunk", [1, 7, 64, 1000, 10_000])
def test_oversized_line_between_two_good_lines(chunk: int) -> None:
    data = b"good-1\n" + b"B" * 5000 + b"\ngood-2\n"
    buf = LineBuffer(max_line=100)
    out: Out = []
    peak = 0
    for i in range(0, len(data), chunk):
        out += buf.feed(data[i : i + chunk])
        peak = max(peak, buf.buffered)
    out += buf.close()
    assert normal(out) == [b"good-1", ("oversized", 5000, 100), b"good-2"]
    assert peak <= 100


def test_oversized_reported_once_at_its_end() -> None:
    buf = LineBuffer(max_line=10)
    first = buf.feed(b"x" * 11)
    assert first == []  # not reported until the line ends
    assert buf.buffered == 0  # but already dropped
    assert buf.feed(b"y" * 100) == []
    out = buf.feed(b"zz\nok\n")
    assert normal(out) == [("oversized", 113, 10), b"ok"]


def test_oversized_at_eof_reported_by_close() -> None:
    buf = LineBuffer(max_line=10)
    assert buf.feed(b"ok\n" + b"x" * 50) == [b"ok"]
    assert normal(buf.close()) == [("oversized", 50, 10)]


def test_line_exactly_at_the_cap_is_accepted() -> None:
    assert feed_whole(b"x" * 10 + b"\n", max_line=10) == [b"x" * 10]
    assert normal(feed_split(b"x" * 10 + b"\n", [4, 9], max_line=10)) == [b"x" * 10]
    assert normal(feed_whole(b"x" * 11 + b"\n", max_line=10)) == [("oversized", 11, 10)]
    assert normal(feed_split(b"x" * 11 + b"\n", [5, 10], max_line=10)) == [("oversized", 11, 10)]


def test_oversized_completed_by_tail_of_partial() -> None:
    # the partial is under the cap, the chunk holding its newline pushes it over
    buf = LineBuffer(max_line=10)
    assert buf.feed(b"x" * 8) == []
    assert normal(buf.feed(b"xxxx\nok\n")) == [("oversized", 12, 10), b"ok"]


def test_oversized_line_entirely_inside_one_chunk() -> None:
    out = feed_whole(b"a\n" + b"x" * 30 + b"\nb\n", max_line=10)
    assert normal(out) == [b"a", ("oversized", 30, 10), b"b"]


def test_invalid_max_line() -> None:
    with pytest.raises(ValueError):
        LineBuffer(0)


@given(
    lines=st.lists(st.binary(max_size=60).map(lambda b: b.replace(b"\n", b"")), max_size=20),
    cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=30),
)
def test_random_splits_give_the_same_lines(lines: list[bytes], cuts: list[int]) -> None:
    data = b"\n".join(lines)
    expected = normal(feed_whole(data, max_line=40))
    assert normal(feed_split(data, [c for c in cuts if c <= len(data)], max_line=40)) == expected
    assert normal(feed_bytewise(data, max_line=40)) == expected


@given(
    chunks=st.lists(st.binary(min_size=1, max_size=300), max_size=40),
    max_line=st.integers(min_value=1, max_value=200),
)
def test_memory_bound(chunks: list[bytes], max_line: int) -> None:
    buf = LineBuffer(max_line)
    for chunk in chunks:
        buf.feed(chunk)
        # between calls, at most max_line bytes of a partial line are held
        assert buf.buffered <= max_line


def test_big_line_in_64k_chunks_arrives_whole() -> None:
    # Its speed is the benchmark's to show (S5), not a timed unit test's.
    chunk = b"x" * 65536
    total = 50 * 1024 * 1024
    buf = LineBuffer()
    for _ in range(total // len(chunk)):
        assert buf.feed(chunk) == []
    assert buf.buffered == total
    out = buf.feed(b"\n")
    assert len(out) == 1
    line = out[0]
    assert isinstance(line, bytes)
    assert len(line) == total
    assert buf.buffered == 0


def test_many_small_lines_per_chunk() -> None:
    line = b'{"jsonrpc":"2.0","method":"session/update","params":{}}\n'
    data = line * 2000
    buf = LineBuffer()
    out = buf.feed(data)
    assert len(out) == 2000
    assert out[0] == line[:-1]
    assert buf.buffered == 0
