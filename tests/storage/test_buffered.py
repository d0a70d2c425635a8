"""The buffered stream a reference save writes through: small writes reach the seam coalesced, as from a
file opened with open(path, "wb"), and a failed write's own error reaches the caller of torch.save."""

from __future__ import annotations

import errno
import io

import pytest
import torch
import xxhash

from resilience.faults import IOFailure, RankCrash, Target, Trigger
from resilience.faults.inject import FaultyFileSystem
from resilience.faults.oplog import OpLog, read_ops
from resilience.storage import LocalFileSystem
from resilience.storage.buffered import BUFFER_SIZE, BufferedStream, unmasked


class _Counting:
    """A WriteStream over a BytesIO that records each write it is handed; fails the `fail_at`th."""

    def __init__(self, fail_at: int | None = None):
        self.path, self.size, self.digest = "mem", 0, None
        self.got = io.BytesIO()
        self.writes: list[int] = []
        self.flushes = self.fsyncs = self.closes = 0
        self.fail_at = fail_at

    def write(self, data) -> int:
        self.writes.append(len(memoryview(data).cast("B")))
        if len(self.writes) == self.fail_at:
            raise OSError(errno.ENOSPC, "No space left on device", self.path)
        return self.got.write(data)

    def tell(self) -> int:
        return self.got.tell()

    def flush(self) -> None:
        self.flushes += 1

    def fsync(self) -> None:
        self.fsyncs += 1

    def fileno(self) -> int:
        return -1

    def close(self) -> None:
        self.closes += 1


def test_small_writes_coalesce_and_tell_counts_the_buffer():
    inner = _Counting()
    s = BufferedStream(inner)
    for _ in range(100):
        assert s.write(b"x" * 30) == 30
    assert inner.writes == [] and s.tell() == 3000
    s.write(memoryview(torch.arange(4, dtype=torch.float32).numpy()))  # any buffer, counted in bytes
    assert s.tell() == 3016
    s.flush()
    assert inner.writes == [3016] and inner.flushes == 1 and s.tell() == 3016
    s.close()
    s.close()
    assert inner.closes == 1


def test_the_buffer_goes_down_when_full_and_large_writes_go_straight():
    inner = _Counting()
    s = BufferedStream(inner)
    s.write(b"a" * (BUFFER_SIZE - 10))
    s.write(b"b" * 20)  # does not fit: the buffer goes down, this one waits
    assert inner.writes == [BUFFER_SIZE - 10]
    s.write(b"c" * (3 * BUFFER_SIZE))
    assert inner.writes == [BUFFER_SIZE - 10, 20, 3 * BUFFER_SIZE]
    s.write(b"d")
    s.fsync()
    assert inner.writes[-1] == 1 and inner.fsyncs == 1
    assert inner.got.getvalue() == b"a" * (BUFFER_SIZE - 10) + b"b" * 20 + b"c" * (3 * BUFFER_SIZE) + b"d"


def test_a_failed_write_drops_its_bytes_and_close_releases_the_file():
    inner = _Counting(fail_at=1)
    s = BufferedStream(inner)
    s.write(b"lost")
    with pytest.raises(OSError) as e:
        s.close()
    assert e.value.errno == errno.ENOSPC and s.error is e.value
    assert inner.closes == 1 and inner.got.getvalue() == b""


@pytest.mark.parametrize("fail_at", [1, 2, 3])
def test_torch_save_raises_the_failed_writes_error(fail_at):
    """torch.save alone raises its zip writer's RuntimeError for any failed write but the first."""
    tensor = torch.arange(3 * BUFFER_SIZE, dtype=torch.uint8)
    s = BufferedStream(_Counting(fail_at=fail_at))
    with pytest.raises(OSError) as e, unmasked(s):
        torch.save({"t": tensor}, s)  # type: ignore[arg-type]  # file-like
    assert e.value.errno == errno.ENOSPC


def test_unmasked_passes_other_failures():
    s = BufferedStream(_Counting())
    with pytest.raises(ValueError), unmasked(s):
        raise ValueError("not a write")


def _faulty(tmp_path, *faults, kill=None):
    log = OpLog(tmp_path / "ops", 0)
    return FaultyFileSystem(LocalFileSystem(), list(faults), oplog=log, kill=kill or (lambda: None)), log


def test_the_fault_layer_sees_coalesced_writes_and_crashes_at_the_byte(tmp_path):
    """A crash after 256 bytes of the file leaves exactly 256 bytes, the operation log agrees, and a
    torch.save reaches the seam in a few writes rather than dozens."""
    died = []
    crash = RankCrash(target=Target(path="*.pt"), trigger=Trigger(at_byte=256))
    fs, log = _faulty(tmp_path, crash, kill=lambda: died.append(True))
    path = str(tmp_path / "x.pt")
    with BufferedStream(fs.open_write(path)) as s:
        torch.save({"t": torch.arange(1000, dtype=torch.float32)}, s)  # type: ignore[arg-type]  # file-like
    log.close()
    assert died
    writes = [o for o in read_ops(tmp_path / "ops") if o.op == "write"]
    assert 1 < len(writes) <= 3, writes
    assert writes[0].length == 256  # cut at the byte, then the (unkilled) test goes on


def test_an_io_error_on_the_first_write_fails_the_save(tmp_path):
    fault = IOFailure(errno="ENOSPC", target=Target(op="write", path="*.pt"))
    fs, log = _faulty(tmp_path, fault)
    path = str(tmp_path / "x.pt")
    s = BufferedStream(fs.open_write(path))
    with pytest.raises(OSError) as e, s, unmasked(s):
        torch.save({"t": torch.arange(5000, dtype=torch.float32)}, s)  # type: ignore[arg-type]  # file-like
    assert e.value.errno == errno.ENOSPC and "injected" in str(e.value)
    assert s.closed and fs.firings()[0]["action"] == "raise ENOSPC"
    log.close()


def test_a_good_save_records_size_and_digest(tmp_path):
    path = str(tmp_path / "x.pt")
    s = BufferedStream(LocalFileSystem().open_write(path))
    with s:
        torch.save({"t": torch.arange(5000, dtype=torch.float32)}, s)  # type: ignore[arg-type]  # file-like
    raw = open(path, "rb").read()
    assert s.size == len(raw) and s.digest == xxhash.xxh3_128_hexdigest(raw)
    assert torch.equal(torch.load(path, weights_only=True)["t"], torch.arange(5000, dtype=torch.float32))
