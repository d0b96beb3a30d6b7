import math

import pytest

from corral import _codec
from corral.errors import InvalidOptionError


def test_compact_json_like_json_stringify() -> None:
    assert _codec.dumps({"a": [1, None, True], "b": "é"}) == '{"a":[1,null,true],"b":"é"}'
    assert _codec.dumps(None) == "null"


def test_loads_absent_field_is_none() -> None:
    assert _codec.loads(None) is None
    assert _codec.loads("") is None
    assert _codec.loads('{"x":[1,2]}') == {"x": [1, 2]}


@pytest.mark.parametrize(
    "bad",
    [{1, 2}, b"bytes", object(), {"n": math.nan}, [math.inf], {"deep": [{"x": -math.inf}]}],
    ids=["set", "bytes", "object", "nan", "inf", "nested-inf"],
)
def test_encode_data_refuses_what_json_cannot_carry(bad: object) -> None:
    with pytest.raises(InvalidOptionError, match="data must be JSON-serializable"):
        _codec.encode_data(bad)


def test_encode_data_keeps_null_and_unicode() -> None:
    assert _codec.encode_data({"x": None, "t": "日本語 🚀"}) == '{"x":null,"t":"日本語 🚀"}'
