"""The manifest file's format (folders.MANIFEST): versioned JSON, a digest over its body.

    {"kind": "resilience-checkpoint-manifest", "format_version": 1, "digest": xxh3-128 of the
     canonical body, "body": {"combination", "topology", "model", "iteration", "files", ...}}

The reference writes and verifies it (checkpoint.manifest); a fault that forges one (a file list naming
a path outside the folder, a replaced file's new checksum) rewrites the body with the digest to match."""

from __future__ import annotations

import json

import xxhash

KIND = "resilience-checkpoint-manifest"
FORMAT_VERSION = 1


def body_digest(body: dict) -> str:
    """xxh3-128 of the body's canonical JSON (sorted keys, no spaces). ValueError, TypeError or
    RecursionError for a body JSON cannot hold."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return xxhash.xxh3_128_hexdigest(canonical.encode())


def manifest_text(body: dict) -> str:
    """The manifest file holding `body`."""
    return json.dumps(
        {"kind": KIND, "format_version": FORMAT_VERSION, "digest": body_digest(body), "body": body}, indent=1
    )
