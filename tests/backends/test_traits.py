"""What a factory says about itself (resilience.backends.base.FactoryTraits): each optional attribute read
and checked by traits_of, and a wrong one a ConfigError naming it."""

from __future__ import annotations

import pytest

from resilience.backends.base import FactoryTraits, traits_of
from resilience.backends.options import Option
from resilience.errors import ConfigError
from resilience.vocab.combos import Combination
from resilience.vocab.contract import LOAD, REFUSE, TopologyContract

LOCAL = Combination.parse("LOCAL/torch/sync")
DIST = Combination.parse("GLOBAL/torch_dist/sync")
THREADS = Option("thread_count", 1, "writer threads", between=(1, 8))


def factory_with(**attributes):
    def factory(combo):
        raise AssertionError("never made")

    for name, value in attributes.items():
        setattr(factory, name, value)
    return factory


def test_a_factory_that_says_nothing_has_the_defaults():
    assert traits_of(factory_with()) == FactoryTraits()
    assert FactoryTraits().combinations is None and FactoryTraits().io_through_seam is False


@pytest.mark.parametrize(
    "attribute, value, read",
    [
        ("combinations", ("LOCAL/torch/sync", "GLOBAL/torch_dist/sync"), (LOCAL, DIST)),
        ("combinations", ["local/torch/sync"], (LOCAL,)),
        ("combinations", (DIST,), (DIST,)),
        ("combinations", (), None),  # none declared: all six
        ("contract", {"tp": "refuse", "pp": "refuse", "dp": "load"}, {"tp": "refuse", "pp": "refuse", "dp": "load"}),
        ("keep_last", 1, 1),
        ("keep_last", None, None),
        ("layout_hints", {"metadata": ["*.meta", "index.json"]}, {"metadata": ("*.meta", "index.json")}),
        ("io_through_seam", True, True),
        ("options", (THREADS,), (THREADS,)),
        ("options", [THREADS], (THREADS,)),
        ("writer", "thread", "thread"),
        ("writer", {"LOCAL/torch/sync": "inline"}, {LOCAL: "inline"}),
    ],
)
def test_each_attribute_is_read(attribute, value, read):
    assert getattr(traits_of(factory_with(**{attribute: value})), attribute) == read


@pytest.mark.parametrize(
    "attribute, value, says",
    [
        ("combinations", "LOCAL/torch/sync", "must be a tuple of combination strings"),
        ("combinations", ("LOCAL/torch_dist/sync",), "'LOCAL/torch_dist/sync'"),
        ("combinations", ("LOCAL",), "cannot read 'LOCAL'"),
        ("contract", {"tp": "maybe"}, "unknown promise 'maybe'"),
        ("contract", ["tp", "load"], "must be a mapping of change to promise"),
        ("keep_last", 0, "must be a positive integer, got 0"),
        ("keep_last", True, "must be a positive integer, got True"),
        ("keep_last", "1", "must be a positive integer, got '1'"),
        ("layout_hints", ["metadata"], "must be a mapping of role to file globs"),
        ("layout_hints", {"metadata": "*.meta"}, "entry 'metadata'"),
        ("layout_hints", {"metadata": [1]}, "entry 'metadata'"),
        ("io_through_seam", "yes", "must be True or False, got 'yes'"),
        ("io_through_seam", 1, "must be True or False, got 1"),
        ("options", THREADS, "must be a tuple of Option"),
        ("options", ({"name": "thread_count"},), "must be a tuple of Option"),
        ("writer", "fork", "'fork' is no writer kind"),
        ("writer", 3, "must be a string, a mapping or a function"),
        ("writer", {"LOCAL/torch/sync": "threads"}, "'threads' (for LOCAL/torch/sync) is no writer kind"),
        ("writer", {"LOCAL/torch_dist/sync": "thread"}, "'LOCAL/torch_dist/sync'"),
    ],
)
def test_a_wrong_attribute_is_one_clear_error_naming_it(attribute, value, says):
    with pytest.raises(ConfigError) as raised:
        traits_of(factory_with(**{attribute: value}), where="backend pkg.mod:factory")
    assert str(raised.value.field).startswith(f"backend pkg.mod:factory: {attribute}"), raised.value.field
    assert says in raised.value.problem, raised.value.problem
    assert raised.value.fix


def test_a_contract_is_the_stated_one_or_a_function_of_the_combination_or_the_preset():
    stated = traits_of(factory_with(contract={"dp": "load"}))
    assert stated.contract_for(LOCAL, "c", "stated").promise(["dp"]) == LOAD
    per_combo = traits_of(factory_with(contract=lambda c: {"dp": "load" if c == LOCAL else "refuse"}))
    assert per_combo.contract_for(LOCAL, "c", "s").promise(["dp"]) == LOAD
    assert per_combo.contract_for(DIST, "c", "s").promise(["dp"]) == REFUSE
    assert traits_of(factory_with()).contract_for(DIST, "c", "s") == TopologyContract.preset(DIST)


def test_a_function_contract_that_does_not_read_is_an_error_when_asked():
    bad = traits_of(factory_with(contract=lambda c: {"tp": "maybe"}))
    with pytest.raises(ConfigError, match="unknown promise 'maybe'"):
        bad.contract_for(LOCAL, "backend x: contract", "stated by x")


def test_a_writer_is_one_kind_a_kind_per_combination_or_a_function_of_it():
    assert traits_of(factory_with(writer="process")).writer_for(DIST, "w") == "process"
    per = traits_of(factory_with(writer={"LOCAL/torch/sync": "inline"}))
    assert per.writer_for(LOCAL, "w") == "inline" and per.writer_for(DIST, "w") is None  # not declared: learned
    by = traits_of(factory_with(writer=lambda c: "thread" if c == DIST else None))
    assert by.writer_for(DIST, "w") == "thread" and by.writer_for(LOCAL, "w") is None
    with pytest.raises(ConfigError) as raised:
        traits_of(factory_with(writer=lambda c: "forked")).writer_for(DIST, "backend x: writer")
    assert raised.value.field == "backend x: writer" and "'forked'" in raised.value.problem
