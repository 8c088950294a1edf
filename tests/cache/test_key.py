"""cache_key: stable under reordering and JSON round trips, different when any ingredient changes."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dayzero.cache import cache_key
from dayzero.errors import DayzeroError

INGREDIENTS = {"config": {"layers": 6}, "weights": "abc123", "options": {"kv": "fp8", "max_batch": 8},
               "rank": [0, 1], "world": [1, 2], "plugins": "f00d", "torch": "2.13.0", "triton": "3.9",
               "cuda": "12.8", "arch": "sm_90"}

json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=4)
                           | st.floats(allow_nan=False, allow_infinity=False),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                                         max_size=3),
                           max_leaves=8)
ingredient_dicts = st.dictionaries(st.text(max_size=5), json_values, min_size=1, max_size=6)


def test_key_is_sha256_hex():
    key = cache_key(INGREDIENTS)
    assert len(key) == 64 and int(key, 16) >= 0 and key == cache_key(json.loads(json.dumps(INGREDIENTS)))


@pytest.mark.parametrize("ingredient", list(INGREDIENTS))
def test_any_changed_ingredient_changes_the_key(ingredient):
    changed = {**INGREDIENTS, ingredient: [INGREDIENTS[ingredient], "changed"]}
    assert cache_key(changed) != cache_key(INGREDIENTS)
    dropped = {name: value for name, value in INGREDIENTS.items() if name != ingredient}
    assert cache_key(dropped) != cache_key(INGREDIENTS)


@settings(max_examples=60, deadline=None)
@given(ingredient_dicts)
def test_key_ignores_order_and_round_trips(ingredients):
    reordered = dict(reversed(list(ingredients.items())))
    assert cache_key(reordered) == cache_key(ingredients) == cache_key(json.loads(json.dumps(ingredients)))


@settings(max_examples=60, deadline=None)
@given(ingredient_dicts, st.data())
def test_key_sees_every_value(ingredients, data):
    name = data.draw(st.sampled_from(sorted(ingredients)))
    assert cache_key({**ingredients, name: [ingredients[name]]}) != cache_key(ingredients)


@pytest.mark.parametrize("bad", [{"weights": object()}, {"dtype": {1, 2}}, {"x": math.nan}, {"nested": {1: "a"}}],
                         ids=["object", "set", "nan", "int-dict-key"])
def test_non_json_ingredient_is_a_user_error(bad):
    with pytest.raises(DayzeroError, match="cache key ingredients"):
        cache_key(bad)
