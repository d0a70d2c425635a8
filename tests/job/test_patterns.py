"""The job's output read for its curve, its acknowledged saves and its resume point: the built-in patterns
of the example jobs, torchtitan and Megatron-LM, patterns given on the command line, and bad ones."""

import math

import pytest

from resilience.errors import ConfigError
from resilience.job.patterns import Patterns, read_lines

BUILT_IN = Patterns.from_options()


@pytest.mark.parametrize(
    "line, step, loss",
    [
        ("step 3 loss 0.125000", 3, 0.125),
        ("[rank0] step 12 loss nan", 12, math.nan),
        ("\x1b[32m[titan] step:  7  loss:  2.5000  memory: 1.2GiB\x1b[39m", 7, 2.5),
        (
            " iteration       20/     100 | consumed samples: 160 | elapsed time per iteration (ms): 12.0 | "
            "learning rate: 1.0E-04 | lm loss: 9.876543E+00 | loss scale: 1.0 |",
            20,
            9.876543,
        ),
    ],
)
def test_built_in_metric_lines(line, step, loss):
    obs = read_lines(BUILT_IN, [line])
    [p] = obs.points
    assert p.step == step and (p.loss == loss or (math.isnan(p.loss) and math.isnan(loss)))


def test_acks_and_the_resume_point():
    obs = read_lines(
        BUILT_IN,
        [
            "resumed from step 8",
            "step 9 loss 1.0",
            "saved checkpoint step 10",
            " successfully saved checkpoint from iteration      20 to /ckpt [ t 1/1, p 1/1 ]",
        ],
    )
    assert [a.step for a in obs.acks] == [10, 20] and obs.resume_step() == (8, True)
    megatron = read_lines(BUILT_IN, ["  successfully loaded checkpoint from /ckpt [ t 1/1, p 1/1 ] at iteration 40"])
    assert megatron.resume_step() == (40, True)


def test_without_a_resume_line_the_resume_is_the_step_before_the_first_reported():
    obs = read_lines(BUILT_IN, ["step 5 loss 1.0", "step 6 loss 1.0", "step 5 loss 2.0"])
    assert obs.resume_step() == (4, False)
    assert obs.curve() == {5: 1.0, 6: 1.0}  # the first report of a step (another rank printing it again)


def test_a_pattern_given_replaces_the_built_ins_of_its_kind_and_keeps_other_groups():
    mine = Patterns.from_options(metric=[r"it=(?P<step>\d+) l=(?P<loss>\S+) lr=(?P<lr>\S+)"])
    obs = read_lines(mine, ["it=4 l=0.5 lr=0.01", "step 5 loss 1.0", "saved checkpoint step 4"])
    assert [(p.step, p.loss, dict(p.extra)) for p in obs.points] == [(4, 0.5, {"lr": "0.01"})]
    assert [a.step for a in obs.acks] == [4]  # the built-in acks stay


@pytest.mark.parametrize(
    "option, pattern, says",
    [
        ("metric", r"step (\d+) loss (\S+)", "has no named group 'step'"),
        ("metric", r"step (?P<step>\d+)", "has no named group 'loss'"),
        ("ack", r"saved (?P<step", "is not a regular expression"),
        ("resumed", r"resumed", "has no named group 'step'"),
    ],
)
def test_a_bad_pattern_is_one_error_naming_its_option(option, pattern, says):
    with pytest.raises(ConfigError) as e:
        Patterns.from_options(**{option: [pattern]})
    assert e.value.field == f"--{option}" and says in str(e.value)
