#!/usr/bin/env python3
"""Summarises a GPU-timed Chrome trace (meshrun trace --backend cuda -o
FILE): per rank, the GPU time of its compute instructions, of all its
instructions, and the step's span (its first instruction's start to its
last one's end), in milliseconds. Checks what must hold of such a trace:
every instruction event is timed on the device ("clock": "device"), and a
rank's events are in order and do not overlap. Exit status 1 when not.

    bench/gputime.py TRACE.json [LABEL]

The python3 standard library only (bench/gpu.sh runs it on the GPU
machine)."""
import json
import sys
from collections import defaultdict


def main(path, label):
    doc = json.load(open(path))
    tracks = defaultdict(list)
    for e in doc["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") not in ("ring", "pipeline"):
            tracks[e["tid"]].append(e)
    if not tracks:
        sys.exit(f"{path}: no instruction events")
    bad = 0
    print(f"{label}: per rank, GPU time (CUDA events around each instruction) vs the step's span")
    for tid in sorted(tracks):
        evs = sorted(tracks[tid], key=lambda e: e["ts"])
        off = [e["name"] for e in evs if e.get("args", {}).get("clock") != "device"]
        if off:
            print(f"  rank {tid}: {len(off)} events on the host's clock, e.g. {off[0]}")
            bad += 1
        for a, b in zip(evs, evs[1:]):
            if a["ts"] + a["dur"] > b["ts"] + 1e-3:  # the JSON's microseconds are rounded
                print(f"  rank {tid}: {b['name']} starts before {a['name']} ends")
                bad += 1
                break
        compute = sum(e["dur"] for e in evs if e["cat"] == "compute") / 1e3
        busy = sum(e["dur"] for e in evs) / 1e3
        span = (evs[-1]["ts"] + evs[-1]["dur"] - evs[0]["ts"]) / 1e3
        if compute > span + 1e-6:
            print(f"  rank {tid}: compute {compute} ms exceeds the step's {span} ms")
            bad += 1
        print(f"  rank {tid}: {len(evs)} instructions; GPU compute {compute:.3f} ms, all instructions {busy:.3f} ms, "
              f"step span {span:.3f} ms; compute {100 * compute / span if span else 0:.1f}% of the step")
    if bad:
        sys.exit(f"{path}: {bad} problem(s)")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else sys.argv[1])
