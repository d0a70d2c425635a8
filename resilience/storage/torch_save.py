"""torch.save without the CRC32 of its zip records, while a checkpoint of the reference is written.

torch.load never checks that CRC (a flipped byte loads as it is), and every file the reference writes is
hashed as it is written (xxh3-128, kept in the manifest) and checked before a load trusts it: the CRC is a
second pass over every byte that nothing reads, some 40% of a save's CPU (0.54 of 1.38 CPU seconds for a
1 GiB save over 4 ranks; `python -m benchmarks checkpoint` prints it). Files written without it load in
torch.load, dcp.load and megatron-core alike; only zip tools that test archives (`unzip -t`) complain.

torch's switch (torch.utils.serialization.config) holds per thread: it is off in the thread that writes,
for as long as it writes, and nothing else in the process sees it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


@contextlib.contextmanager
def without_crc32() -> Iterator[None]:
    from torch.utils.serialization import config

    before = config.save.compute_crc32
    config.save.compute_crc32 = False
    try:
        yield
    finally:
        config.save.compute_crc32 = before
