"""The golden corpus on real ranks: written, verified clean, and failing on one wrong value (in the expected
fingerprints, or in a checkpoint file with its checksum forged), on a newly refused load, on a bad file."""

import json
import os
import shutil

import pytest
import torch

from resilience.checkpoint.manifest import Manifest, file_digest
from resilience.checkpoint.reference import ReferenceBackend
from resilience.cli import main
from resilience.cluster.corpus import (
    BIT_EXACT,
    CORPUS_FILE,
    REFUSED_CLEARLY,
    WRONG,
    Corpus,
    verify_corpus,
    write_corpus,
)
from resilience.errors import TopologyChangeRefused
from resilience.state import Topology

pytestmark = pytest.mark.multiprocess

COMBOS = ["LEGACY/torch/sync", "GLOBAL/torch_dist/sync"]
TOPOLOGIES = ["tp2pp1dp1", "tp1pp1dp2"]  # tp2 -> dp2 and back: LEGACY refuses, GLOBAL reshards


@pytest.fixture(scope="module")
def golden(tmp_path_factory):
    folder = tmp_path_factory.mktemp("golden") / "corpus"
    report = write_corpus(str(folder), combos=COMBOS, topologies=TOPOLOGIES, timeout=120)
    return folder, report


@pytest.fixture
def corpus(golden, tmp_path):
    """A copy of the golden corpus this test may damage."""
    copy = tmp_path / "corpus"
    shutil.copytree(golden[0], copy)
    return copy


def _outcomes(report) -> dict:
    return {(c.entry, c.load_on): (c.outcome, c.ok) for c in report.checks}


def test_write_records_checkpoints_fingerprints_versions_and_baseline(golden):
    folder, report = golden
    assert report.ok
    doc = json.loads((folder / CORPUS_FILE).read_text())
    assert doc["kind"] == "resilience-corpus" and doc["format_version"] == 1
    assert set(doc["written_by"]) >= {"python", "torch", "resilience", "backend", "backend_version"}
    assert doc["written_by"]["torch"] == torch.__version__ and doc["written_by"]["backend"] == "reference"
    corpus = Corpus.read(str(folder))
    assert sorted(e.id for e in corpus.entries) == sorted(
        f"{t}/{c.replace('/', '-')}" for t in TOPOLOGIES for c in COMBOS
    )
    assert len({e.fingerprint for e in corpus.entries}) == 1  # the state is topology-invariant
    for e in corpus.entries:
        assert (folder / e.path).is_dir() and e.iteration == 3 and e.keys
    assert corpus.baseline["tp2pp1dp1/LEGACY-torch-sync"]["tp1pp1dp2"]["outcome"] == REFUSED_CLEARLY


def test_verify_is_clean_under_the_same_versions(corpus, capsys):
    report = verify_corpus(str(corpus), timeout=120)
    assert report.ok, [c for c in report.checks if not c.ok]
    out = _outcomes(report)
    assert out[("tp2pp1dp1/LEGACY-torch-sync", "tp2pp1dp1")] == (BIT_EXACT, True)
    assert out[("tp2pp1dp1/LEGACY-torch-sync", "tp1pp1dp2")] == (REFUSED_CLEARLY, True)
    assert out[("tp2pp1dp1/GLOBAL-torch_dist-sync", "tp1pp1dp2")] == (BIT_EXACT, True)
    assert report.counts()[BIT_EXACT] == 6 and report.counts()[REFUSED_CLEARLY] == 2
    assert main(["corpus", "verify", str(corpus), "--json", str(corpus / "v.json"), "--out", str(corpus.parent)]) == 0
    text = capsys.readouterr().out
    assert "written by python" in text and "(same versions)" in text and "8 loads: 6 bit-exact" in text
    assert json.loads((corpus / "v.json").read_text())["ok"] is True
    (run_dir,) = corpus.parent.glob("*-corpus-verify")
    assert {p.name for p in run_dir.iterdir()} == {"report.html", "report.md", "verification.json"}
    assert f"report: {run_dir / 'report.md'}" in text


def test_one_wrong_expected_value_fails_the_verification(corpus, capsys):
    doc = json.loads((corpus / CORPUS_FILE).read_text())
    victim = next(e for e in doc["entries"] if e["id"] == "tp1pp1dp2/GLOBAL-torch_dist-sync")
    key = "optimizer.exp_avg.decoder.layers.1.mlp.linear_fc1.weight"
    victim["keys"][key] = "0" * 32
    victim["fingerprint"] = "f" * 32
    (corpus / CORPUS_FILE).write_text(json.dumps(doc))
    assert main(["corpus", "verify", str(corpus), "--out", str(corpus.parent)]) == 1
    out = capsys.readouterr().out
    bad = [ln for ln in out.splitlines() if ln.endswith("<-- FAIL")]
    assert len(bad) == 2 and all(ln.split()[0] == victim["id"] and " wrong: value: " in ln and key in ln for ln in bad)
    from tests.report.dom import parse

    (run_dir,) = corpus.parent.glob("*-corpus-verify")
    rows = parse((run_dir / "report.html").read_text()).by_id("loads").find_all("tr", **{"data-verdict": "FAIL"})
    assert len(rows) == 2 and all(r.find("b", cls="cause").text == "value" and key in r.text for r in rows)
    assert "FAIL: 2 loads wrong, failed or newly refused under same versions" in out


def test_one_wrong_value_in_a_checkpoint_with_a_forged_checksum_loads_wrong(corpus):
    # what a silent corruption or a changed serializer would do: the file still checks out, a value differs
    folder = corpus / "tp2pp1dp1" / "LEGACY-torch-sync" / "iter_0000003"
    rel = os.path.join("mp_rank_00", "model_optim_rng.pt")
    doc = torch.load(folder / rel, weights_only=True)
    key = "model.decoder.layers.0.input_layernorm.weight"
    doc["tensors"][key]["data"][0] += 1.0
    torch.save(doc, folder / rel)
    manifest = Manifest.read(str(folder))
    size, digest = file_digest(str(folder / rel))
    manifest.files[rel] = {"size": size, "xxh3_128": digest}
    manifest.write(str(folder))
    report = verify_corpus(str(corpus), timeout=120)
    assert not report.ok
    bad = [c for c in report.checks if not c.ok]
    assert [(c.entry, c.load_on, c.outcome) for c in bad] == [("tp2pp1dp1/LEGACY-torch-sync", "tp2pp1dp1", WRONG)]
    assert key in bad[0].detail


class _RefusesEveryChange:
    """A backend that refuses any topology change, as a regressed release might."""

    def __init__(self, combo):
        self.inner = ReferenceBackend(combo)
        self.name = "refuses-every-change"
        self.in_flight_iteration = None

    def save(self, state, root):
        self.inner.save(state, root)

    def finalize(self, *, blocking=True):
        return self.inner.finalize(blocking=blocking)

    def list_checkpoints(self, root):
        return self.inner.list_checkpoints(root)

    def load(self, state, root):
        saved = Topology.from_dict(self.list_checkpoints(root)[0].manifest.topology)
        if saved != state.topo:
            raise TopologyChangeRefused(f"{root}: saved on {saved}, will not load on {state.topo}")
        return self.inner.load(state, root)


def refuses_every_change(combo):
    return _RefusesEveryChange(combo)


def test_a_newly_refused_load_fails_the_verification(corpus, capsys):
    backend = f"{__name__}:refuses_every_change"
    assert main(["corpus", "verify", str(corpus), "--backend", backend, "--out", str(corpus.parent)]) == 1
    out = capsys.readouterr().out
    newly = [ln for ln in out.splitlines() if "newly refused: refused: " in ln and ln.endswith("<-- FAIL")]
    assert len(newly) == 2 and all("GLOBAL-torch_dist-sync" in ln for ln in newly)
    assert f"backend reference -> {backend}" in out


def test_the_version_pair_is_reported(corpus, capsys):
    doc = json.loads((corpus / CORPUS_FILE).read_text())
    doc["written_by"]["torch"] = "2.12.0"
    (corpus / CORPUS_FILE).write_text(json.dumps(doc))
    assert main(["corpus", "verify", str(corpus), "--out", str(corpus.parent)]) == 0
    assert f"torch 2.12.0 -> {torch.__version__}" in capsys.readouterr().out


def test_bad_input_is_one_clear_error(corpus, tmp_path, capsys):
    assert main(["corpus", "write", str(corpus), "--out", str(tmp_path)]) == 2
    assert "is not empty" in capsys.readouterr().err
    (corpus / CORPUS_FILE).write_text("{not json")
    assert main(["corpus", "verify", str(corpus), "--out", str(tmp_path)]) == 2
    assert main(["corpus", "verify", str(tmp_path / "nowhere"), "--out", str(tmp_path)]) == 2
    assert not list(tmp_path.glob("*-corpus-*"))  # bad input made no report folder
    err = capsys.readouterr().err
    assert "corpus parse failed" in err and "resilience corpus write" in err and "Traceback" not in err
