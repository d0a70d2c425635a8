"""What the fault proxy costs: multipart uploads through resilience.objectstore.proxy (no fault records)
against the same uploads sent to the S3 server directly.

One run uploads SIZE MiB in all, split over STREAMS threads each with its own client and key, in parts of
PART MiB (create, the parts, complete), and deletes the objects; the time is from the first create to the
last complete. Both ways run against one moto server on loopback, interleaved within each repeat so a
change of machine load hits them alike. moto's own speed bounds both: the figure is how much the proxy
adds to a real client talking to a real server, not the proxy's throughput alone.

    python -m benchmarks s3-proxy [--size-mib 1024] [--part-mib 8] [--streams 4] [--repeats 3] [--json FILE]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import platform
import statistics
import tempfile
import time

from resilience.commands.common import positive_int

MIB = 1 << 20
WAYS = ("direct", "proxy")
TARGET = 1.3  # the proxy's median time over the direct one's, at most
BUCKET = "bench-proxy"


def upload(endpoint: str, rank: int, key: str, size: int, part: int) -> None:
    """One client's multipart upload of `size` bytes in `part`-byte parts, then its delete."""
    from resilience.objectstore.client import s3_client
    from resilience.objectstore.requests import rank_access_key
    from resilience.objectstore.server import REGION, SECRET_KEY

    c = s3_client(endpoint, rank_access_key(rank), SECRET_KEY, REGION)
    body = os.urandom(part)
    upload_id = c.create_multipart_upload(Bucket=BUCKET, Key=key)["UploadId"]
    parts = []
    for n in range(1, max(1, size // part) + 1):
        etag = c.upload_part(Bucket=BUCKET, Key=key, UploadId=upload_id, PartNumber=n, Body=body)["ETag"]
        parts.append({"ETag": etag, "PartNumber": n})
    c.complete_multipart_upload(Bucket=BUCKET, Key=key, UploadId=upload_id, MultipartUpload={"Parts": parts})
    c.delete_object(Bucket=BUCKET, Key=key)


def timed(endpoint: str, size: int, part: int, streams: int) -> float:
    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(streams) as pool:
        jobs = [pool.submit(upload, endpoint, i, f"k{i}", size // streams, part) for i in range(streams)]
        for job in jobs:
            job.result()
    return time.perf_counter() - t0


def measure(size: int, part: int, streams: int, repeats: int) -> dict[str, list[float]]:
    """Seconds of each way's runs."""
    from resilience.objectstore.proxy import FaultProxy
    from resilience.objectstore.server import EmbeddedS3

    seconds: dict[str, list[float]] = {w: [] for w in WAYS}
    with EmbeddedS3() as s3, tempfile.TemporaryDirectory(prefix="bench-proxy-") as folder:
        s3.bucket(BUCKET)
        with FaultProxy(s3.endpoint, [], log=os.path.join(folder, "requests.jsonl")) as proxy:
            for _ in range(repeats):
                for way, endpoint in zip(WAYS, (s3.endpoint, proxy.endpoint)):
                    seconds[way].append(timed(endpoint, size, part, streams))
    return seconds


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks s3-proxy", description=__doc__.split("\n\n")[0])
    p.add_argument("--size-mib", type=positive_int, default=1024, metavar="N", help="bytes uploaded per run (MiB)")
    p.add_argument("--part-mib", type=positive_int, default=8, metavar="N", help="size of one part (MiB, >= 5)")
    p.add_argument("--streams", type=positive_int, default=4, metavar="N", help="clients uploading at once")
    p.add_argument("--repeats", type=positive_int, default=3, metavar="N", help="runs of each way")
    p.add_argument("--json", metavar="FILE", help="also write the figures to FILE")
    return p.parse_args(argv)


def run(size_mib: int, part_mib: int, streams: int, repeats: int) -> dict:
    """Measure and print both ways; the figures."""
    print(
        f"s3 proxy: {size_mib} MiB of multipart uploads in {part_mib} MiB parts, {streams} streams, {repeats} repeats"
    )
    seconds = measure(size_mib * MIB, part_mib * MIB, streams, repeats)
    fig: dict[str, dict] = {}
    for way in WAYS:
        med = statistics.median(seconds[way])
        fig[way] = {"median_s": med, "mib_per_s": size_mib / med, "runs_s": seconds[way]}
        runs = " ".join(f"{s:.3f}" for s in seconds[way])
        print(f"  {way:<7} median {med:.3f} s  {size_mib / med:8.1f} MiB/s  runs {runs}")
    value = fig["proxy"]["median_s"] / fig["direct"]["median_s"]
    paired = statistics.median(p / d for p, d in zip(seconds["proxy"], seconds["direct"]))
    met = value <= TARGET
    print(
        f"target proxy <= {TARGET:g}x the direct time: {value:.2f}x (run by run {paired:.2f}x, "
        f"load average {os.getloadavg()[0]:.1f}), {'met' if met else 'NOT met'}"
    )
    target = {"value": value, "paired": paired, "limit": TARGET, "met": met}
    return {"size_mib": size_mib, "part_mib": part_mib, "streams": streams, "ways": fig, "target": target}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    fig = run(args.size_mib, args.part_mib, args.streams, args.repeats)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"benchmark": "s3-proxy", "version": 1, **fig, "python": platform.python_version()}, f, indent=2)
    return 0
