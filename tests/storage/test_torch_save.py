"""The reference writes torch.save archives without their CRC32 pass (storage.torch_save); torch's switch
is the writing thread's alone and is put back as it was."""

import io
import threading
import zipfile

import torch
from torch.utils.serialization import config

from resilience.storage import torch_save
from resilience.storage.torch_save import save_tensor, without_crc32


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


def _torch_save(t) -> bytes:
    b = io.BytesIO()
    torch.save(t, b)
    return b.getvalue()


def _save_tensor(t) -> bytes:
    b = io.BytesIO()
    save_tensor(t, b)
    return b.getvalue()


_SHAPES = [
    (torch.float32, (3,)),  # its bytes too small to be left out of the template: found in the archive
    (torch.float32, (300, 100)),
    (torch.bfloat16, (257, 300)),
    (torch.int64, (7,)),
    (torch.bool, (5,)),
    (torch.complex64, (4, 4)),
]


def test_tensor_archives_are_torch_saves_bytes_for_every_tensor_of_a_shape():
    torch_save._TEMPLATES.clear()
    gen = torch.Generator().manual_seed(0)
    with without_crc32():
        for dtype, shape in _SHAPES:
            for _ in range(3):  # the first takes the shape's template; the others are written around it
                t = (torch.rand(shape, generator=gen) * 10).to(dtype)
                written = _save_tensor(t)
                assert written == _torch_save(t), (dtype, shape)
                assert torch.equal(torch.load(io.BytesIO(written), weights_only=True), t)
    assert len(torch_save._TEMPLATES) == len(_SHAPES) and all(torch_save._TEMPLATES.values())  # all from templates


def test_tensors_a_template_cannot_stand_for_are_torch_saves_own():
    base = torch.arange(60.0).reshape(6, 10)
    others = [
        base[1:3],  # a view into a larger storage
        base.t(),  # not contiguous
        torch.nn.Parameter(base.clone()),  # a subclass
        torch.ones(3, requires_grad=True),
        torch.zeros(0),
    ]
    torch_save._TEMPLATES.clear()
    with without_crc32():
        for t in others:
            assert _save_tensor(t) == _torch_save(t)
    assert not torch_save._TEMPLATES
    t = torch.arange(100000.0)
    assert _save_tensor(t) == _torch_save(t)  # CRC on (torch's default): torch.save, CRCs and all
    assert not torch_save._TEMPLATES and any(_crcs(t))
