"""vocab.contract: what a backend promises across topologies, stated or preset."""

import pytest

from resilience.errors import ConfigError
from resilience.vocab.combos import Combination
from resilience.vocab.contract import LOAD, REFUSE, TopologyContract


@pytest.mark.parametrize(
    "changed, promise",
    [
        (("tp",), REFUSE),
        (("dp",), LOAD),
        (("dp", "pp"), None),  # pp is not stated: either outcome passes
        (("dp", "tp"), REFUSE),  # one refused change refuses the transition
        ((), LOAD),
    ],
)
def test_a_transition_gets_the_promise_of_its_changes(changed, promise):
    contract = TopologyContract.parse({"tp": "refuse", "dp": "load"})
    assert contract.promise(changed) == promise


@pytest.mark.parametrize(
    "combo, loads",
    [
        ("LOCAL/torch/sync", set()),
        ("LEGACY/torch/sync", {"dp"}),
        ("GLOBAL/torch_dist/async", {"tp", "pp", "dp"}),
        ("TORCH_DCP/torch_dcp/sync", {"tp", "pp", "dp"}),
    ],
)
def test_the_preset_is_the_seeds_table(combo, loads):
    preset = TopologyContract.preset(Combination.parse(combo))
    assert {c for c in ("tp", "pp", "dp") if preset.promise((c,)) == LOAD} == loads
    assert preset.promise(("precision",)) is None
    assert combo in str(preset)


@pytest.mark.parametrize(
    "value, words",
    [
        ({"tensor": "load"}, "tp, pp, dp, ep, etp, cp, vpp, precision"),
        ({"tp": "maybe"}, "'load'"),
        (["tp"], "mapping"),
    ],
)
def test_a_bad_contract_is_one_clear_error(value, words):
    with pytest.raises(ConfigError) as e:
        TopologyContract.parse(value, where="mod:factory.contract")
    assert "mod:factory.contract" in str(e.value) and words in str(e.value)
