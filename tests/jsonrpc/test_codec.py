"""decode / classify / encode: the JSON-RPC 2.0 envelope rules, one case per row."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import orjson
import pytest

from acp_agent.errors import INVALID_REQUEST, PARSE_ERROR, RequestError
from acp_agent.jsonrpc import (
    MISSING,
    ErrorResponse,
    Invalid,
    Message,
    Notification,
    Request,
    Response,
    classify,
    decode,
    encode,
    encode_error,
    encode_notification,
    encode_notification_json,
    encode_request,
    encode_result,
    is_request_id,
)

PARSE = Invalid(None, PARSE_ERROR, "Parse error")


def one(line: bytes) -> Message | Invalid:
    out = decode(line)
    assert len(out) == 1
    return out[0]


def code_of(item: Message | Invalid) -> tuple[Any, int, bool]:
    assert isinstance(item, Invalid), item
    return item.id, item.code, item.answerable


# --- valid messages ---------------------------------------------------------------------------

VALID: list[tuple[bytes, Message]] = [
    (b'{"jsonrpc":"2.0","id":1,"method":"m","params":{"a":1}}', Request(1, "m", {"a": 1})),
    (b'{"jsonrpc":"2.0","id":"x","method":"m","params":[1]}', Request("x", "m", [1])),
    (b'{"jsonrpc":"2.0","id":null,"method":"m"}', Request(None, "m", None)),
    (b'{"jsonrpc":"2.0","id":0,"method":"m","params":null}', Request(0, "m", None)),
    (b'{"jsonrpc":"2.0","id":-5,"method":""}', Request(-5, "", None)),
    (b'{"jsonrpc":"2.0","method":"n"}', Notification("n", None)),
    (b'{"jsonrpc":"2.0","method":"n","params":{}}', Notification("n", {})),
    (b'{"jsonrpc":"2.0","id":3,"result":null}', Response(3, None)),
    (b'{"jsonrpc":"2.0","id":3,"result":{"ok":true}}', Response(3, {"ok": True})),
    (
        b'{"jsonrpc":"2.0","id":4,"error":{"code":-32601,"message":"nope"}}',
        ErrorResponse(4, {"code": -32601, "message": "nope"}),
    ),
    (
        b'{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}',
        ErrorResponse(None, {"code": -32700, "message": "Parse error"}),
    ),
    # unknown members are ignored
    (b'{"jsonrpc":"2.0","method":"n","extra":1}', Notification("n", None)),
]


@pytest.mark.parametrize(("line", "expected"), VALID)
def test_valid(line: bytes, expected: Message) -> None:
    assert one(line) == expected


def test_id_null_is_a_request_not_a_notification() -> None:
    assert isinstance(one(b'{"jsonrpc":"2.0","id":null,"method":"m"}'), Request)
    assert isinstance(one(b'{"jsonrpc":"2.0","method":"m"}'), Notification)


def test_malformed_error_object_is_kept_raw() -> None:
    item = one(b'{"jsonrpc":"2.0","id":4,"error":"boom"}')
    assert item == ErrorResponse(4, "boom")
    assert isinstance(item, ErrorResponse)
    assert RequestError.from_wire(item.error).message == "malformed error object"


# --- invalid frames: (line, id answered with, code, answerable) ------------------------------

INVALID: list[tuple[bytes, Any, int, bool]] = [
    (b"not json", None, PARSE_ERROR, True),
    (b'{"jsonrpc":"2.0","id":1,"method":"m"', None, PARSE_ERROR, True),
    (b'"\xff\xfe"', None, PARSE_ERROR, True),
    (b'{"jsonrpc":"2.0","id":1,"method":"\xc3\x28"}', None, PARSE_ERROR, True),
    (b"NaN", None, PARSE_ERROR, True),
    (b"[" * 5000, None, PARSE_ERROR, True),
    (b"42", None, INVALID_REQUEST, True),
    (b'"x"', None, INVALID_REQUEST, True),
    (b"null", None, INVALID_REQUEST, True),
    (b"true", None, INVALID_REQUEST, True),
    (b"[]", None, INVALID_REQUEST, True),
    (b'{"foo":"bar"}', None, INVALID_REQUEST, True),
    (b"{}", None, INVALID_REQUEST, True),
    # bool / float / structured ids are never ids
    (b'{"jsonrpc":"2.0","id":true,"method":"m"}', None, INVALID_REQUEST, True),
    (b'{"jsonrpc":"2.0","id":false,"method":"m"}', None, INVALID_REQUEST, True),
    (b'{"jsonrpc":"2.0","id":1.5,"method":"m"}', None, INVALID_REQUEST, True),
    (b'{"jsonrpc":"2.0","id":1.0,"method":"m"}', None, INVALID_REQUEST, True),
    (b'{"jsonrpc":"2.0","id":{"a":1},"method":"m"}', None, INVALID_REQUEST, True),
    (b'{"jsonrpc":"2.0","id":[1],"method":"m"}', None, INVALID_REQUEST, True),
    # beyond 64 bits orjson reads a float
    (b'{"jsonrpc":"2.0","id":18446744073709551616,"method":"m"}', None, INVALID_REQUEST, True),
    # jsonrpc member wrong or missing: the id is kept when valid
    (b'{"id":7,"method":"m"}', 7, INVALID_REQUEST, True),
    (b'{"jsonrpc":"1.0","id":"q","method":"m"}', "q", INVALID_REQUEST, True),
    (b'{"jsonrpc":2.0,"id":7,"method":"m"}', 7, INVALID_REQUEST, True),
    # method not a string
    (b'{"jsonrpc":"2.0","id":8,"method":1}', 8, INVALID_REQUEST, True),
    (b'{"jsonrpc":"2.0","method":null}', None, INVALID_REQUEST, True),
    (b'{"jsonrpc":"2.0","method":1,"params":"bar"}', None, INVALID_REQUEST, True),
    # params not structured
    (b'{"jsonrpc":"2.0","id":9,"method":"m","params":"s"}', 9, INVALID_REQUEST, True),
    (b'{"jsonrpc":"2.0","id":9,"method":"m","params":3}', 9, INVALID_REQUEST, True),
    (b'{"jsonrpc":"2.0","id":9,"method":"m","params":false}', 9, INVALID_REQUEST, True),
    # ...on a notification: recognised, but never answered
    (b'{"jsonrpc":"2.0","method":"n","params":"s"}', None, INVALID_REQUEST, False),
    # responses with both or neither of result / error, or a bad id
    (b'{"jsonrpc":"2.0","id":5,"result":1,"error":{}}', 5, INVALID_REQUEST, True),
    (b'{"jsonrpc":"2.0","id":5}', 5, INVALID_REQUEST, True),
    (b'{"jsonrpc":"2.0","id":true,"result":1}', None, INVALID_REQUEST, True),
    (b'{"jsonrpc":"2.0","result":1}', None, INVALID_REQUEST, True),
]


@pytest.mark.parametrize(("line", "id", "code", "answerable"), INVALID)
def test_invalid(line: bytes, id: Any, code: int, answerable: bool) -> None:
    assert code_of(one(line)) == (id, code, answerable)


def test_parse_error_message() -> None:
    assert one(b"{") == PARSE


def test_invalid_request_message_says_why() -> None:
    item = one(b'{"jsonrpc":"2.0","id":true,"method":"m"}')
    assert isinstance(item, Invalid)
    assert item.message.startswith("Invalid request")
    assert '"id"' in item.message


def test_batch_each_element_on_its_own() -> None:
    line = (
        b'[{"jsonrpc":"2.0","id":1,"method":"a"},'
        b' {"jsonrpc":"2.0","method":"b"},'
        b" 42,"
        b' {"jsonrpc":"2.0","id":2,"result":{}}]'
    )
    out = decode(line)
    assert out[0] == Request(1, "a", None)
    assert out[1] == Notification("b", None)
    assert code_of(out[2]) == (None, INVALID_REQUEST, True)
    assert out[3] == Response(2, {})
    assert len(out) == 4


def test_nested_batch_element_is_invalid() -> None:
    out = decode(b"[[1]]")
    assert len(out) == 1
    assert code_of(out[0]) == (None, INVALID_REQUEST, True)


def test_classify_accepts_non_orjson_values() -> None:
    assert code_of(classify(object())) == (None, INVALID_REQUEST, True)
    assert code_of(classify({1: 2})) == (None, INVALID_REQUEST, True)


def test_is_request_id() -> None:
    good: list[object] = [0, -1, 2**70, "", "a", None]
    bad: list[object] = [True, False, 1.0, [], {}, b"1"]
    assert all(is_request_id(v) for v in good)
    assert not any(is_request_id(v) for v in bad)


def test_messages_are_frozen() -> None:
    req = Request(1, "m", None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        req.method = "x"  # type: ignore[misc]
    assert not hasattr(req, "__dict__")


# --- encoding ---------------------------------------------------------------------------------


def test_encode_request() -> None:
    frame = encode_request(1, "m", {"a": [1, 2]})
    assert frame.endswith(b"\n")
    assert frame.count(b"\n") == 1
    assert orjson.loads(frame) == {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "m",
        "params": {"a": [1, 2]},
    }
    assert orjson.loads(encode_request("s", "m")) == {"jsonrpc": "2.0", "id": "s", "method": "m"}


def test_encode_notification_omits_none_params() -> None:
    assert orjson.loads(encode_notification("n")) == {"jsonrpc": "2.0", "method": "n"}
    assert orjson.loads(encode_notification("n", [])) == {
        "jsonrpc": "2.0",
        "method": "n",
        "params": [],
    }


def test_encode_result_keeps_null() -> None:
    assert orjson.loads(encode_result(2, None)) == {"jsonrpc": "2.0", "id": 2, "result": None}


def test_encode_error_data_only_when_given() -> None:
    plain = orjson.loads(encode_error(None, -32700, "Parse error"))
    assert plain == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32700, "message": "Parse error"},
    }
    with_null = orjson.loads(encode_error(3, -32603, "x", None))
    assert with_null["error"] == {"code": -32603, "message": "x", "data": None}
    with_data = orjson.loads(encode_error(3, -32603, "x", {"k": 1}))
    assert with_data["error"]["data"] == {"k": 1}
    assert repr(MISSING) == "MISSING"


def test_round_trip_through_decode() -> None:
    assert decode(encode_request(5, "m", {"a": 1})) == [Request(5, "m", {"a": 1})]
    assert decode(encode_notification("n")) == [Notification("n", None)]
    assert decode(encode_result("r", [1])) == [Response("r", [1])]
    assert decode(encode_error(6, -1, "e")) == [ErrorResponse(6, {"code": -1, "message": "e"})]


def test_newlines_inside_strings_are_escaped() -> None:
    frame = encode_result(1, "a\nb\r\u2028c")
    assert frame.count(b"\n") == 1
    assert decode(frame[:-1]) == [Response(1, "a\nb\r\u2028c")]


def test_non_finite_floats_are_written_as_null() -> None:
    # Documented orjson behaviour: JSON has no NaN / Infinity, orjson writes null.
    frame = encode_result(1, [math.nan, math.inf, -math.inf, 1.5])
    assert orjson.loads(frame)["result"] == [None, None, None, 1.5]


def test_unencodable_value_raises_type_error() -> None:
    with pytest.raises(TypeError, match="cannot encode a JSON-RPC frame"):
        encode_result(1, {1, 2})
    with pytest.raises(TypeError, match="cannot encode"):
        encode({"n": 2**70})
    with pytest.raises(TypeError, match="cannot encode"):
        encode({1: "non-str key"})


def test_default_hook() -> None:
    class Point:
        def __init__(self, x: int) -> None:
            self.x = x

    def default(value: Any) -> Any:
        if isinstance(value, Point):
            return {"x": value.x}
        raise TypeError(f"no encoding for {type(value).__name__}")

    frame = encode_result(1, {"p": Point(3)}, default=default)
    assert orjson.loads(frame)["result"] == {"p": {"x": 3}}
    assert orjson.loads(encode_request(1, "m", Point(1), default=default))["params"] == {"x": 1}
    with pytest.raises(TypeError, match="cannot encode"):
        encode_result(1, object(), default=default)


def test_a_spliced_notification_is_the_same_frame() -> None:
    params = {"sessionId": "s", "update": {"sessionUpdate": "x", "text": "é\n\u2028"}}
    spliced = encode_notification_json("session/update", orjson.dumps(params))
    assert spliced == encode_notification("session/update", params)
