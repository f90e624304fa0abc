#!/usr/bin/env bash
# Before/after of a runtime change on the Go step benchmarks: two test
# binaries of ./bench (go test -c -o OLD.test ./bench on the old tree, and
# on the new one), run alternately — the order flips every round — and
# new/old ns/op per round printed as min / median / max, with each side's
# median ms, B/op and allocs/op.
#   bench/abstep.sh OLD.test NEW.test [ROUNDS=5] [BENCH=GPTStep] [BENCHTIME=50x]
# GOMAXPROCS defaults to 1 (set it to compare at 2).
set -euo pipefail
old=$(realpath "$1") new=$(realpath "$2")
rounds=${3:-5} bench=${4:-GPTStep} bt=${5:-50x}
cd "$(dirname "$0")"
rows=$(mktemp)
trap 'rm -f "$rows"' EXIT
source ./ab_lib.sh
# one WHICH ROUND BIN: a run's benchmark lines, labelled
one() {
    GOMAXPROCS=${GOMAXPROCS:-1} "$3" -test.run '^$' -test.bench "$bench" -test.benchtime "$bt" -test.benchmem |
        awk -v w="$1" '/^Benchmark/ {print w, $1, $3, $5, $7}' >>"$rows"
}
ab_rounds "$rounds" "$old" "$new" one
/usr/bin/python3 - "$rows" <<'PY'
import collections, statistics, sys
by = collections.defaultdict(lambda: collections.defaultdict(list))
for line in open(sys.argv[1]):
    w, name, ns, b, allocs = line.split()
    by[name][w].append((float(ns), int(b), int(allocs)))
for name, d in by.items():
    if not d["old"] or not d["new"]:
        print(f"{name}: only in the {'new' if d['new'] else 'old'} binary, not compared")
        continue
    r = sorted(n[0] / o[0] for o, n in zip(d["old"], d["new"]))
    med = lambda side: statistics.median(x[0] for x in d[side]) / 1e6
    print(f"{name}: new/old min {r[0]:.2f} median {statistics.median(r):.2f} max {r[-1]:.2f} ({len(r)} rounds); "
          f"median ms old {med('old'):.2f} new {med('new'):.2f}; B/op {d['old'][0][1]} -> {d['new'][0][1]}; "
          f"allocs/op {d['old'][0][2]} -> {d['new'][0][2]}")
PY
