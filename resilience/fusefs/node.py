"""`python -m resilience.fusefs.node [options] -- COMMAND ...`: run COMMAND (a node's torchrun) with the
fault-injecting file system mounted for as long as it runs, and unmount when it ends, however it ends.

A cluster validation through the file system (`resilience validate --io fuse`) wraps each node's
torchrun line in this: the mount outlives every rank process and torchrun's restarts, so a fault fired
in the first attempt is not fired again, and the ranks of every attempt tell the file system who they
are. Exit status: COMMAND's (a signal ending it: 128 + the signal), 2 for a bad option, 1 when the mount
cannot be made (with why)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys

from ..errors import ResilienceError

# Set for COMMAND: the mount point, so every process it starts (torchrun's workers) finds this node's mount
# whatever rank torchrun's rendezvous gives the node.
MOUNT_ENV = "RESILIENCE_FUSE_MOUNT"


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    if "--" not in argv:
        raise SystemExit("usage: python -m resilience.fusefs.node [options] -- COMMAND ... (the -- is required)")
    at = argv.index("--")
    p = argparse.ArgumentParser(prog="python -m resilience.fusefs.node", description=__doc__.split("\n\n")[0])
    p.add_argument("--backing", required=True, help="the folder the mount passes through to")
    p.add_argument("--mountpoint", required=True, help="where it is mounted (an empty folder; made if missing)")
    p.add_argument("--log", required=True, help="the file system's log folder (outside the mount point)")
    p.add_argument("--report", help="where fault firings go (default: LOG/firings.jsonl)")
    p.add_argument("--faults", default="[]", help="fault records, a JSON list")
    p.add_argument("--arm-at", default="null", help="per record, the rank operation it counts from (JSON list)")
    args = p.parse_args(argv[:at])
    command = argv[at + 1 :]
    if not command:
        p.error("no command after --")
    try:
        args.faults, args.arm_at = json.loads(args.faults), json.loads(args.arm_at)
    except ValueError as e:
        p.error(f"--faults and --arm-at take JSON: {e}")
    return args, command


def main(argv: list[str] | None = None) -> int:
    from .mount import mounted
    from .mounts import clean_stale_mounts

    args, command = parse_args(list(sys.argv[1:] if argv is None else argv))
    os.makedirs(args.backing, exist_ok=True)
    os.makedirs(args.mountpoint, exist_ok=True)
    clean_stale_mounts(args.mountpoint)  # what a killed earlier run of this node left at the same place
    child: subprocess.Popen | None = None

    def forward(signum, frame) -> None:  # the command decides how to stop (torchrun stops its workers)
        if child is not None and child.poll() is None:
            child.send_signal(signum)

    try:
        with mounted(
            args.backing,
            args.mountpoint,
            faults=args.faults,
            arm_at=args.arm_at,
            log=args.log,
            report=args.report,
            paths_as=args.backing,
        ):
            for sig in (signal.SIGINT, signal.SIGTERM):
                signal.signal(sig, forward)
            child = subprocess.Popen(command, env=dict(os.environ, **{MOUNT_ENV: os.path.abspath(args.mountpoint)}))
            code = child.wait()
    except (ResilienceError, OSError) as e:
        print(f"resilience.fusefs.node: error: {e}", file=sys.stderr)
        return 1
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main())
