"""Bounded YAML: every limit refuses just past it and accepts at it, with the line of the problem."""

import pytest

from resilience import safe_yaml
from resilience.safe_yaml import MAX_ALIASES, MAX_BYTES, MAX_DEPTH, MAX_VALUES, Refused, load


def refused(text) -> list[tuple]:
    with pytest.raises(Refused) as e:
        load(text)
    return [(p.line, p.problem) for p in e.value.problems]


def test_plain_data_with_the_line_of_each_value():
    doc = load("name: x\nsteps:\n  - train: 2\n  - save\nmodel: {hidden: 8}\n")
    assert doc.data == {"name": "x", "steps": [{"train": 2}, "save"], "model": {"hidden": 8}}
    assert doc.lines[("name",)] == 1 and doc.lines[("steps", 1)] == 4 and doc.lines[("model", "hidden")] == 5
    assert doc.line_of(("steps", 0, "train", "deeper")) == 3


def test_core_scalars_are_read_as_safe_load_reads_them():
    text = "a: 1\nb: 1.5\nc: true\nd: null\ne: '7'\nf: !!str 8\ng: !!int '9'\nh: .inf\ni: 0x10\n"
    import yaml

    assert load(text).data == yaml.safe_load(text)


@pytest.mark.parametrize(
    "text, words",
    [
        ("a: !!python/object/apply:os.system ['true']\n", "!!python/object/apply:os.system"),
        ("a: !!python/name:os.system\n", "!!python/name:os.system"),
        ("a: !custom [1]\n", "!custom"),
        ("a: !!binary aGk=\n", "!!binary"),
        ("a: !!set {x}\n", "!!set"),
    ],
)
def test_only_core_tags(text, words):
    [(line, problem)] = refused(text)
    assert line == 1 and words in problem and "not allowed" in problem


def test_aliases_within_the_budget_are_copies():
    doc = load("a: &x [1, 2]\nb: *x\n")
    assert doc.data == {"a": [1, 2], "b": [1, 2]} and doc.data["a"] is not doc.data["b"]
    text = "a: &x 1\nb: [" + ", ".join(["*x"] * MAX_ALIASES) + "]\n"
    assert len(load(text).data["b"]) == MAX_ALIASES
    assert "more than 100 aliases" in refused(text.replace("*x]", "*x, *x]"))[0][1]


def test_an_alias_bomb_is_refused_before_it_expands():
    levels = ["l0: &l0 [" + ", ".join(["x"] * 10) + "]"]
    levels += [f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]" for i in range(1, 9)]
    [(line, problem)] = refused("\n".join(levels) + "\n")
    assert f"more than {MAX_VALUES} values once its aliases are expanded" in problem and line <= 5


def test_a_recursive_alias_is_refused():
    [(line, problem)] = refused("steps: &s\n  - train: 1\n  - *s\n")
    assert line == 3 and "recursive alias" in problem


def test_nesting_is_bounded_in_block_and_flow_style():
    load("[" * MAX_DEPTH + "]" * MAX_DEPTH)
    assert "deeper than 50" in refused("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1))[0][1]
    assert "deeper than 50" in refused("[" * 5000)[0][1]
    block = "".join(" " * (2 * i) + "- \n" for i in range(MAX_DEPTH + 5))
    assert "deeper than 50" in refused(block)[0][1]


def test_keys_are_plain_and_given_once():
    assert refused("? [a, b]\n: 1\n") == [(1, "a list or mapping is used as a key")]
    [(line, problem)] = refused("steps: 1\nname: x\nsteps: 2\n")
    assert line == 3 and "'steps' is given twice (first on line 1)" in problem


def test_every_problem_that_does_not_stop_the_reading_is_reported():
    problems = refused("a: !!python/name:os.system\nb: 1\nb: 2\nc: !foo 3\n")
    assert [line for line, _ in problems] == [1, 3, 4]


def test_text_must_be_utf8_and_small():
    assert refused(b"name: \xff\xfe\n") == [(1, "is not UTF-8 text: byte 0xff at offset 6")]
    assert refused(b"a: 1\nb: \xc3\n")[0][0] == 2
    assert "larger than the limit" in refused(b"a" * (MAX_BYTES + 1))[0][1]
    assert load("\ufeffa: 1\n".encode()).data == {"a": 1}
    assert refused("a: \udcff\n") == [(1, "is not UTF-8 text: '\\udcff' at character 3")]


def test_one_document_and_no_control_characters():
    assert "more than one YAML document" in refused("a: 1\n---\nb: 2\n")[0][1]
    [(line, problem)] = refused("a: 1\nb: \x07\n")
    assert line == 2 and "character" in problem


def test_many_values_are_refused_quickly():
    assert "more than 10000 values" in refused("[" + "1," * (MAX_VALUES + 1) + "]")[0][1]


def test_the_pure_python_parser_gives_the_same_answers(monkeypatch):
    import yaml

    monkeypatch.setattr(safe_yaml, "_Loader", yaml.SafeLoader)
    assert load("a: &x [1]\nb: *x\n").data == {"a": [1], "b": [1]}
    assert "deeper than 50" in refused("[" * 200)[0][1]
    assert refused("b: 1\na: \x00\n")[0][0] == 2
    assert "recursive alias" in refused("s: &s [*s]\n")[0][1]
