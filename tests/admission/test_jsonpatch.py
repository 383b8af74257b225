"""JSON Pointer and JSON Patch as the webhook, the controller and the tests' API server use them:
escaping that survives any key, ``add`` undone by ``remove``, and a ``test`` that guards."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from admission import jsonpatch

KEYS = st.text(max_size=12) | st.sampled_from(["~", "/", "~0", "~1", "~01", "a/b~c", "-", "0"])
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3),
    max_leaves=12,
)
OBJECTS = st.dictionaries(KEYS, JSON, max_size=5)


@given(KEYS)
def test_escape_round_trips_and_leaves_no_separator(key: str) -> None:
    escaped = jsonpatch.escape(key)
    assert "/" not in escaped
    assert jsonpatch.unescape(escaped) == key


@given(st.lists(KEYS | st.integers(min_value=0, max_value=99), max_size=6))
def test_tokens_read_back_every_part_of_a_pointer(parts: list[str | int]) -> None:
    assert jsonpatch.tokens(jsonpatch.pointer(parts)) == [str(p) for p in parts]


@given(OBJECTS, KEYS, JSON)
def test_add_then_remove_of_a_new_member_is_the_document(doc: dict[str, Any], key: str,
                                                       value: Any) -> None:
    assume(key not in doc)
    before = copy.deepcopy(doc)
    path = jsonpatch.pointer([key])
    added = jsonpatch.apply(doc, [{"op": "add", "path": path, "value": value}])
    assert added[key] == value
    assert jsonpatch.apply(added, [{"op": "remove", "path": path}]) == doc
    assert doc == before  # applied to a copy


@given(st.lists(JSON, max_size=5), st.data(), JSON)
def test_add_then_remove_in_a_list_is_the_document(items: list[Any], data: st.DataObject,
                                                  value: Any) -> None:
    doc = {"spec": {"items": items}}
    index = data.draw(st.integers(min_value=0, max_value=len(items)))
    token = data.draw(st.sampled_from([str(index), "-"] if index == len(items) else [str(index)]))
    ops: list[jsonpatch.PatchOp] = [
        {"op": "add", "path": f"/spec/items/{token}", "value": value},
        {"op": "remove", "path": f"/spec/items/{index}"},
    ]
    assert jsonpatch.apply(doc, ops[:1])["spec"]["items"][index] == value
    assert jsonpatch.apply(doc, ops) == doc


@given(OBJECTS, KEYS, JSON)
def test_a_failed_test_raises_and_a_passing_one_applies(doc: dict[str, Any], key: str,
                                                      value: Any) -> None:
    doc = {**doc, key: value}
    path = jsonpatch.pointer([key])
    then: jsonpatch.PatchOp = {"op": "add", "path": "/after", "value": 1}
    with pytest.raises(jsonpatch.PatchConflict, match="test failed"):
        jsonpatch.apply(doc, [{"op": "test", "path": path, "value": [value]}, then])
    assert jsonpatch.apply(doc, [{"op": "test", "path": path, "value": value}, then])["after"] == 1


def test_pointers_escape_tilde_and_slash() -> None:
    path = jsonpatch.pointer(["metadata", "annotations", "berth.dev/a~b"])
    assert path == "/metadata/annotations/berth.dev~1a~0b"
    doc = jsonpatch.apply({"metadata": {"annotations": {}}},
                          [{"op": "add", "path": path, "value": "x"}])
    assert doc == {"metadata": {"annotations": {"berth.dev/a~b": "x"}}}
    assert jsonpatch.unescape("~01") == "~1"  # ~1 is read first, as RFC 6901 says


def test_dash_appends_and_an_index_inserts() -> None:
    doc = {"gates": [{"name": "a"}]}
    doc = jsonpatch.apply(doc, [{"op": "add", "path": "/gates/-", "value": {"name": "c"}},
                                {"op": "add", "path": "/gates/1", "value": {"name": "b"}}])
    assert doc["gates"] == [{"name": "a"}, {"name": "b"}, {"name": "c"}]


def test_replace_sets_and_test_compares_json_values() -> None:
    doc = jsonpatch.apply({"a": [1, 2], "n": 1},
                          [{"op": "replace", "path": "/a/1", "value": 3},
                           {"op": "test", "path": "/n", "value": 1.0}])
    assert doc["a"] == [1, 3]
    with pytest.raises(jsonpatch.PatchConflict):
        jsonpatch.apply({"n": 1}, [{"op": "test", "path": "/n", "value": True}])


def test_a_missing_member_tests_as_null_as_on_the_api_server() -> None:
    assert jsonpatch.apply({"metadata": {}},
                           [{"op": "test", "path": "/metadata/uid", "value": None}])
    with pytest.raises(jsonpatch.PatchConflict):
        jsonpatch.apply({"metadata": {}}, [{"op": "test", "path": "/metadata/uid", "value": "u"}])


@pytest.mark.parametrize("op", [
    {"op": "add", "path": "/metadata/labels/x", "value": "v"},  # no labels map
    {"op": "remove", "path": "/metadata/name"},  # nothing there
    {"op": "remove", "path": "/spec/gates/1"},  # past the end
    {"op": "add", "path": "/spec/gates/2", "value": {}},  # past one after the end
    {"op": "add", "path": "/spec/gates/x", "value": {}},  # not an index
    {"op": "replace", "path": "/spec/gates/1", "value": {}},
    {"op": "add", "path": "", "value": {}},  # the whole document
    {"op": "add", "path": "/metadata/x"},  # no value
    {"op": "move", "from": "/spec", "path": "/x"},
])
def test_an_op_that_does_not_apply_raises(op: dict[str, Any]) -> None:
    doc = {"metadata": {}, "spec": {"gates": [{"name": "a"}]}}
    with pytest.raises(jsonpatch.PatchError) as raised:
        jsonpatch.apply(doc, [op])
    assert not isinstance(raised.value, jsonpatch.PatchConflict)
