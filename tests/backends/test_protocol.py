"""The backend protocol: every shipped implementation satisfies it, make_backend is the one entry point."""

from __future__ import annotations

import pytest

from resilience.backends import CheckpointBackend, with_defaults
from resilience.backends.megatron import available as megatron_available
from resilience.broken import CATALOGUE
from resilience.checkpoint import ReferenceBackend
from resilience.errors import ConfigError
from resilience.runner.adapters import make_backend, resolve, supported_combinations
from resilience.vocab import Combination
from resilience.vocab.combos import valid_combinations

DCP_SYNC = Combination.parse("TORCH_DCP/torch_dcp/sync")
DIST_ASYNC = Combination.parse("GLOBAL/torch_dist/async")


@pytest.mark.parametrize("combo", valid_combinations(), ids=str)
def test_reference_is_a_backend(combo):
    backend = make_backend("reference", combo)
    assert isinstance(backend, ReferenceBackend)
    assert isinstance(backend, CheckpointBackend)
    assert backend.in_flight_iteration is None


@pytest.mark.parametrize("name", sorted(CATALOGUE))
def test_broken_ones_are_backends(name):
    combo = Combination.parse(CATALOGUE[name].witness)
    assert isinstance(make_backend(f"broken:{name}", combo), CheckpointBackend)


@pytest.mark.parametrize("name", ["dcp", "dcp-threads", "resilience.backends.stock_dcp:make"])
def test_stock_dcp_is_a_backend(name):
    backend = make_backend(name, DCP_SYNC)
    assert isinstance(backend, CheckpointBackend)
    assert backend.name.startswith("dcp")


def test_stock_dcp_declares_and_enforces_its_combinations():
    assert [str(c) for c in supported_combinations("dcp")] == ["TORCH_DCP/torch_dcp/sync", "TORCH_DCP/torch_dcp/async"]
    with pytest.raises(ConfigError, match="stock DCP does not implement GLOBAL/torch_dist/sync"):
        make_backend("dcp", Combination.parse("GLOBAL/torch_dist/sync"))


def test_default_combinations():
    assert supported_combinations("reference") is None
    assert [str(c) for c in supported_combinations("broken:ignores_topology")] == ["LEGACY/torch/sync"]
    assert resolve("megatron") == "resilience.backends.megatron:make"


class SyncOnly:
    """A user's minimal backend: no finalize, no in_flight_iteration."""

    name = "sync-only"

    def __init__(self, combo):
        self.combo = combo

    def save(self, state, root):
        pass

    def load(self, state, root):
        raise NotImplementedError

    def list_checkpoints(self, root):
        return []


def sync_only(combo):
    return SyncOnly(combo)


class NoLoad:
    def save(self, state, root):
        pass


def no_load(combo):
    return NoLoad()


def test_optional_members_are_supplied():
    backend = make_backend(f"{__name__}:sync_only", DCP_SYNC)
    assert isinstance(backend, CheckpointBackend)
    assert backend.finalize() is True and backend.in_flight_iteration is None
    assert backend.combo == DCP_SYNC and backend.name == "sync-only"
    assert with_defaults(ReferenceBackend(DCP_SYNC)).__class__ is ReferenceBackend


def test_missing_required_method_is_one_clear_error():
    with pytest.raises(ConfigError, match="NoLoad has no load, list_checkpoints"):
        make_backend(f"{__name__}:no_load", DCP_SYNC)


@pytest.mark.parametrize(
    "name, message",
    [
        ("nonsense", "cannot read 'nonsense'"),
        ("no.such.module:make", "cannot import 'no.such.module:make'"),
        ("resilience.backends.stock_dcp:nothing", "cannot import"),
        ("broken:nothing", "no broken implementation 'nothing'"),
    ],
)
def test_bad_backend_names(name, message):
    with pytest.raises(ConfigError, match=message):
        make_backend(name, DCP_SYNC)


@pytest.mark.skipif(not megatron_available(), reason="megatron-core is not installed (pip install '.[megatron]')")
def test_megatron_is_a_backend():
    backend = make_backend("megatron", DIST_ASYNC)
    assert isinstance(backend, CheckpointBackend)
    with pytest.raises(ConfigError, match="does not implement TORCH_DCP"):
        make_backend("megatron", DCP_SYNC)


LOCAL = Combination.parse("LOCAL/torch/sync")


@pytest.mark.parametrize(
    "backend, package, combo, says",
    [
        ("megatron", "megatron", DIST_ASYNC, r"megatron-core is not installed.*\[megatron\]"),
        ("nvrx", "nvidia_resiliency_ext", LOCAL, r"nvidia-resiliency-ext is not installed.*\[nvrx\]"),
    ],
)
def test_a_missing_library_is_a_clear_error(monkeypatch, backend, package, combo, says):
    import builtins

    real = builtins.__import__

    def missing(name, *args, **kwargs):
        if name.startswith(package):
            raise ImportError(f"No module named {package!r}")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", missing)
    with pytest.raises(ConfigError, match=says):
        make_backend(backend, combo)
