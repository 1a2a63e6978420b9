"""Property: any bytes in yields lines / OversizedLine, and messages / Invalid, nothing else.

And whatever garbage came before, a valid request on its own line is still recognised.
"""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given
from hypothesis import strategies as st

from acp_agent.errors import OversizedLine
from acp_agent.jsonrpc import (
    ErrorResponse,
    Invalid,
    LineBuffer,
    Notification,
    Request,
    Response,
    decode,
)

KINDS = (Request, Notification, Response, ErrorResponse, Invalid)
VALID_REQUEST = b'{"jsonrpc":"2.0","id":"probe","method":"session/prompt","params":{}}'

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)

envelope_like = st.fixed_dictionaries(
    {},
    optional={
        "jsonrpc": st.sampled_from(["2.0", "1.0", 2]) | json_values,
        "id": json_values,
        "method": st.sampled_from(["m", ""]) | json_values,
        "params": json_values,
        "result": json_values,
        "error": json_values,
    },
)

garbage = st.one_of(
    st.binary(max_size=300),
    json_values.map(orjson.dumps),
    envelope_like.map(orjson.dumps),
    st.lists(envelope_like, max_size=3).map(orjson.dumps),
)


def run(chunks: list[bytes], max_line: int) -> list[Any]:
    buf = LineBuffer(max_line)
    out: list[Any] = []
    for chunk in chunks:
        out += buf.feed(chunk)
    return out + buf.close()


@given(chunks=st.lists(garbage, max_size=10), max_line=st.integers(min_value=1, max_value=400))
def test_any_bytes_give_only_lines_and_messages(chunks: list[bytes], max_line: int) -> None:
    for item in run(chunks, max_line):
        assert isinstance(item, (bytes, OversizedLine))
        if isinstance(item, bytes):
            assert b"\n" not in item
            assert len(item) <= max_line
            for message in decode(item):
                assert isinstance(message, KINDS)


@given(chunks=st.lists(garbage, max_size=10), cut=st.integers(min_value=0, max_value=100))
def test_valid_request_after_garbage_is_recognised(chunks: list[bytes], cut: int) -> None:
    data = b"".join(chunks) + b"\n" + VALID_REQUEST + b"\n"
    cut = min(cut, len(data))
    lines = run([data[:cut], data[cut:]], max_line=1024)
    last = lines[-1]
    assert isinstance(last, bytes)
    assert decode(last) == [Request("probe", "session/prompt", {})]


@given(value=envelope_like)
def test_decode_never_raises_on_envelopes(value: dict[str, Any]) -> None:
    out = decode(orjson.dumps(value))
    assert len(out) == 1
    assert isinstance(out[0], KINDS)
