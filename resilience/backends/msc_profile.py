"""NVIDIA's multi-storage-client (MSC) pointed at the case's object store: a profile written for this rank
process (its endpoint, the fault proxy's; its key, the rank's own), so a library that names checkpoints
`msc://profile/key` (Megatron-Bridge, DCP through MSC's writer) reaches the same bucket as the seam. MSC's
default profile maps to a local path, which is how tests on it missed its object-store bugs: here the
profile is an S3 one, on a real server."""

from __future__ import annotations

import atexit
import json
import os
import tempfile

PROFILE = "resilience-case"
_WRITTEN: dict[int, str] = {}  # pid -> the config file this process wrote (forked ranks write their own)


def _config(store) -> dict:
    client = store.fsspec_options.get("client_kwargs", {})
    return {
        "profiles": {
            PROFILE: {
                "storage_provider": {
                    "type": "s3",
                    "options": {
                        "base_path": store.location.bucket,
                        "endpoint_url": client.get("endpoint_url", ""),
                        "region_name": client.get("region_name", "us-east-1"),
                    },
                },
                "credentials_provider": {
                    "type": "S3Credentials",
                    "options": {
                        "access_key": store.fsspec_options.get("key") or os.environ.get("AWS_ACCESS_KEY_ID", ""),
                        "secret_key": store.fsspec_options.get("secret") or os.environ.get("AWS_SECRET_ACCESS_KEY", ""),
                    },
                },
            }
        }
    }


def _remove(path: str) -> None:
    if os.path.exists(path):
        os.unlink(path)


def msc_url(store, path: str) -> str:
    """`path` under the store as an msc:// URL, the profile written (once per process) where MSC reads it."""
    if os.getpid() not in _WRITTEN:
        fd, config = tempfile.mkstemp(prefix="resilience-msc-", suffix=".json")
        with os.fdopen(fd, "w") as f:
            json.dump(_config(store), f)
        atexit.register(_remove, config)
        os.environ["MSC_CONFIG"] = config
        _WRITTEN[os.getpid()] = config
    return f"msc://{PROFILE}/{store.key(path)}"


__all__ = ["PROFILE", "msc_url"]
