"""Finding the request id in the head of a line too long to read."""

from __future__ import annotations

import pytest

from acp_agent.errors import OversizedLine
from acp_agent.jsonrpc import LineBuffer, sniff_id


@pytest.mark.parametrize(
    ("head", "expected"),
    [
        (b'{"jsonrpc":"2.0","id":78,"method":"x","params":{"a":"yyy', 78),
        (b'{"method":"x", "id" : "ab\\"c", "params"', 'ab"c'),
        (b'{"x":"\\"id\\":4","id":9,', 9),
        (b'{"params":{"id":5,"x":"yy', None),  # nested: not the request's id
        (b'{"id":12', None),  # the number may go on past the head
        (b'{"id":null,', None),
        (b'{"id":true,', None),
        (b'{"id":1.5,', None),
        (b'[{"id":3}', None),  # a batch: no single id
        (b"", None),
        (b"garbage", None),
    ],
)
def test_sniff_id(head: bytes, expected: object) -> None:
    assert sniff_id(head) == expected


def test_oversized_line_keeps_its_head_when_fed_in_chunks() -> None:
    buf = LineBuffer(max_line=64)
    line = b'{"jsonrpc":"2.0","id":"big","method":"m","params":{"p":"' + b"y" * 200 + b'"}}\n'
    out: list[object] = []
    for i in range(0, len(line), 7):
        out += buf.feed(line[i : i + 7])
    out += buf.feed(b'{"jsonrpc":"2.0","id":2,"method":"n"}\n')
    assert isinstance(out[0], OversizedLine)
    assert sniff_id(out[0].head) == "big"
    assert out[1] == b'{"jsonrpc":"2.0","id":2,"method":"n"}'
