"""The reference writes torch.save archives without their CRC32 pass (storage.torch_save); torch's switch
is the writing thread's alone and is put back as it was."""

import io
import threading
import zipfile

import torch
from torch.utils.serialization import config

from resilience.storage.torch_save import without_crc32


def _crcs(obj) -> list[int]:
    b = io.BytesIO()
    torch.save(obj, b)
    return [i.CRC for i in zipfile.ZipFile(io.BytesIO(b.getvalue())).infolist()]


def test_archives_written_inside_have_no_crc_and_load_alike():
    t = torch.arange(1000.0)
    assert any(_crcs(t))  # torch's default: every record's CRC computed
    with without_crc32():
        assert not any(_crcs(t))
        b = io.BytesIO()
        torch.save(t, b)
    assert torch.equal(torch.load(io.BytesIO(b.getvalue()), weights_only=True), t)
    assert any(_crcs(t))


def test_another_thread_keeps_its_crc_and_a_users_own_setting_is_kept():
    seen = []
    with without_crc32():
        other = threading.Thread(target=lambda: seen.append(any(_crcs(torch.ones(3)))))
        other.start()
        other.join(10)
    assert seen == [True]  # a thread the writer did not run in: torch's default
    config.save.compute_crc32 = False  # a user's own choice: kept
    try:
        with without_crc32():
            pass
        assert config.save.compute_crc32 is False
    finally:
        config.save.compute_crc32 = True


def test_a_reference_save_writes_no_crc_and_loads_back(tmp_path):
    from resilience.checkpoint.reference import ReferenceBackend
    from resilience.state import ModelSpec, ParallelGroups, Topology, TrainingState
    from resilience.state.fingerprints import fingerprint
    from resilience.vocab import Combination

    state = TrainingState(ModelSpec(), Topology(), 0, groups=ParallelGroups.without_collectives())
    state.train(1)
    backend = ReferenceBackend(Combination.parse("LEGACY/torch/sync"))
    backend.save(state, str(tmp_path))
    (archive,) = [p for p in tmp_path.rglob("*.pt") if zipfile.is_zipfile(p)]
    assert not any(i.CRC for i in zipfile.ZipFile(archive).infolist())
    assert config.save.compute_crc32 is True  # back after the save
    fresh = TrainingState(ModelSpec(), Topology(), 0, groups=ParallelGroups.without_collectives())
    assert backend.load(fresh, str(tmp_path)).iteration == 1
    assert fingerprint(fresh.sharded_state_dict()) == fingerprint(state.sharded_state_dict())
