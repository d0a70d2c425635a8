"""What a loader can see after a kill, read from the proxy's log of requests (objectstore.journal.crash_view):
hand-written logs, no server."""

from resilience.objectstore.journal import RequestLog, crash_view, read_requests


def req(op, key, end, *, server=200, client=200, bucket="bk", **more):
    return {"op": op, "bucket": bucket, "key": key, "end": end, "server_status": server, "status": client, **more}


def test_what_the_server_did_is_seen_whether_or_not_the_client_heard_it():
    log = [
        req("put", "a.pt", 1),
        req("put", "lost.pt", 2, client=None),  # its answer was lost on the way back
        req("put", "cut.pt", 3, server=None, client=None),  # reset mid-body: never completed
        req("put", "refused.pt", 4, server=None, client=503),  # answered SlowDown by the proxy
        req("copy", "b.pt", 5, client=None),  # the client was killed after the server copied
        req("put", "denied.pt", 6, server=403, client=403),
        req("get", "a.pt", 7),
    ]
    assert crash_view(log) == {
        "objects": [
            {"bucket": "bk", "key": "a.pt", "op": "put", "acknowledged": True},
            {"bucket": "bk", "key": "b.pt", "op": "copy", "acknowledged": False},
            {"bucket": "bk", "key": "lost.pt", "op": "put", "acknowledged": False},
        ],
        "deleted": [],
        "orphans": [],
    }


def test_an_upload_never_completed_is_an_orphan_with_the_parts_the_server_stored():
    log = [
        req("mpu_create", "big.pt", 1, upload_id="U1"),
        req("mpu_part", "big.pt", 2, upload_id="U1", part=1),
        req("mpu_part", "big.pt", 4, upload_id="U1", part=3),
        req("mpu_part", "big.pt", 3, upload_id="U1", part=2, server=None, client=None),  # its sender was killed
        req("mpu_create", "done.pt", 5, upload_id="U2"),
        req("mpu_part", "done.pt", 6, upload_id="U2", part=1),
        req("mpu_complete", "done.pt", 7, upload_id="U2", client=None),  # done, its answer lost
        req("mpu_create", "gone.pt", 8, upload_id="U3"),
        req("mpu_abort", "gone.pt", 9, upload_id="U3", server=204, client=204),
    ]
    view = crash_view(log)
    assert view["objects"] == [{"bucket": "bk", "key": "done.pt", "op": "mpu_complete", "acknowledged": False}]
    assert view["orphans"] == [{"bucket": "bk", "key": "big.pt", "upload_id": "U1", "parts": [1, 3]}]


def test_deletes_in_the_order_the_server_did_them():
    log = [
        req("put", "a.pt", 1),
        req("put", "b.pt", 2),
        req("put", "c.pt", 6),
        req("delete", "", 4, server=200, keys=["a.pt", "c.pt"]),  # a multi-delete, before c.pt was written
        req("delete", "old.pt", 5, server=204, client=None),
        req("delete", "b.pt", 3, server=500, client=500),  # refused: b.pt stays
    ]
    view = crash_view(list(reversed(log)))  # the log's order is the order requests ended; `end` decides
    assert [o["key"] for o in view["objects"]] == ["b.pt", "c.pt"]
    assert view["deleted"] == [
        {"bucket": "bk", "key": "a.pt", "acknowledged": True},
        {"bucket": "bk", "key": "old.pt", "acknowledged": False},
    ]


def test_the_log_is_json_lines_and_a_torn_last_line_is_skipped(tmp_path):
    path = str(tmp_path / "requests.jsonl")
    log = RequestLog(path)
    log.write(req("put", "a.pt", 1))
    log.write(req("get", "a.pt", 2))
    log.close()
    with open(path, "ab") as f:
        f.write(b'{"op": "pu')
    assert [r["op"] for r in read_requests(path)] == ["put", "get"]
    assert read_requests(tmp_path / "absent.jsonl") == [] and read_requests(None) == []
    RequestLog(None).write({"nothing": "written"})
