"""Object storage: where a run's checkpoints go on S3 (an `s3://bucket/prefix` location whose keys never leave
it), the embedded S3 server a run starts on loopback (moto's server mode), the check an endpoint, a bucket
and credentials pass before any case runs, the storage seam's interface over a bucket (storage.py: no
rename, no folders, an object whole when its upload returns), and the fault-injecting proxy in front of a
server (proxy.py: a carrier of the faults' records at each request, carrier.py; a log of every request and
what a loader sees after a kill, journal.py; a request's operation and rank, requests.py)."""

from __future__ import annotations

from .url import S3Location, check_relative

__all__ = ["S3Location", "check_relative"]
