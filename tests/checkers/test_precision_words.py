"""checkers.precision.names_precision: which words an implementation said count as a word on precision."""

import pytest

from resilience.checkers.precision import names_precision


@pytest.mark.parametrize(
    "heard, says",
    [
        ("warning UserWarning: casting bf16 parameters to fp32", True),
        ("log WARNING megatron: main_param missing, using the model's dtype", True),
        # an unclosed file in a case folder named after the transition says nothing about the data
        (
            "warning ResourceWarning: unclosed file <_io.TextIOWrapper name='/runs/0003-to-fp32/ckpt/step-3/DONE'>",
            False,
        ),
        ("warning UserWarning: slow read of /runs/0003-to-fp32/ckpt/shard-0.bin", False),
        ("warning DeprecationWarning: torch.load without weights_only casts nothing", False),
    ],
)
def test_only_words_about_the_data_count(heard, says):
    assert names_precision(heard) is says
