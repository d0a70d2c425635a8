"""A case's objects as files, and back: what lets the runner's work at rest (damage a checkpoint, keep the
evidence) be done once, on files, for the disk and the object store alike.

`pull` copies every object of a place into a local folder (that folder then holds the store as a loader would
list it); `push` puts back what changed there: a file new or different is uploaded whole, a file gone is
deleted. Keys come from a listing of the store, which is untrusted: each is checked to stay under the prefix
(url.S3Location.relative) before it becomes a path."""

from __future__ import annotations

import json
import os

import xxhash

from .store import CaseStore

PULLED = ".pulled.json"  # beside a pulled folder: the relative paths the last pull brought from the store


def _digest(path: str) -> str:
    h = xxhash.xxh3_128()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _files(folder: str) -> dict[str, str]:
    """Every file under `folder`: its relative path -> its digest."""
    out = {}
    for dirpath, _, names in os.walk(folder):
        for n in names:
            path = os.path.join(dirpath, n)
            out[os.path.relpath(path, folder)] = _digest(path)
    return out


def _listed(store: CaseStore, client) -> list[dict]:
    """Every object under the place's prefix, as the store lists them (Key, Size, ...)."""
    head = f"{store.prefix}/" if store.prefix else ""
    found: list[dict] = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=store.bucket, Prefix=head):
        found += page.get("Contents", [])
    return found


def keys(store: CaseStore, client=None) -> list[str]:
    """Every key under the place's prefix."""
    return [o["Key"] for o in _listed(store, client or store.client())]


def sizes(store: CaseStore, root: str, client=None) -> dict[str, int]:
    """path under `root` -> size of every object of the place: what a watcher of the folder would see."""
    listed = _listed(store, client or store.client())
    return {os.path.join(root, store.location.relative(o["Key"])): o["Size"] for o in listed}


def pull(store: CaseStore, folder: str) -> dict[str, str]:
    """Make `folder` hold the place's objects, and what it holds then (relative path -> digest). Files an
    earlier pull brought that are no longer objects go; files that never were objects stay (what a rank
    wrote locally, as the marker a hostile pickle's command leaves beside the checkpoint)."""
    client = store.client()
    record = folder.rstrip(os.sep) + PULLED
    before = set(_read_json(record))
    now = keys(store, client)
    rels = [store.location.relative(k) for k in now]
    for rel in before - set(rels):
        path = os.path.join(folder, rel)
        if os.path.isfile(path):
            os.unlink(path)
            try:
                os.removedirs(os.path.dirname(path))  # its folders, where now empty (the folder is made again below)
            except OSError:
                pass
    os.makedirs(folder, exist_ok=True)
    for key, rel in zip(now, rels):
        path = os.path.join(folder, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        client.download_file(store.bucket, key, path)
    with open(record, "w") as f:
        json.dump(sorted(rels), f)
    return _files(folder)


def _read_json(path: str) -> list:
    try:
        with open(path) as f:
            return list(json.load(f))
    except (OSError, ValueError):
        return []


def push(store: CaseStore, folder: str, pulled: dict[str, str]) -> list[str]:
    """Put back what changed in `folder` since `pull` returned `pulled`; the relative paths it touched."""
    client = store.client()
    now = _files(folder)
    changed = sorted(rel for rel, d in now.items() if pulled.get(rel) != d)
    gone = sorted(set(pulled) - set(now))
    for rel in changed:
        client.upload_file(os.path.join(folder, rel), store.bucket, store.location.key(rel))
    for rel in gone:
        client.delete_object(Bucket=store.bucket, Key=store.location.key(rel))
    return changed + gone


def remove(store: CaseStore) -> int:
    """Delete every object of the place (a cluster's prefix is left as it was found); how many."""
    client = store.client()
    found = keys(store, client)
    for start in range(0, len(found), 1000):
        batch = [{"Key": k} for k in found[start : start + 1000]]
        client.delete_objects(Bucket=store.bucket, Delete={"Objects": batch, "Quiet": True})
    return len(found)


__all__ = ["keys", "pull", "push", "remove", "sizes"]
