#!/usr/bin/env bash
# Before/after of a GEMM change: two test binaries of ./bench (go test -c
# -o OLD.test ./bench on the old tree, and on the new one) run alternately
# — the order flips every round — on one of the GEMM benchmarks, and for
# each shape and binary the per-round value of its metric printed as min /
# median / max over the rounds.
#   bench/abgemm.sh OLD.test NEW.test [ROUNDS=5] [BENCH=MatmulBackendVsRawBLAS] [BENCHTIME=300x]
# MatmulBackendVsRawBLAS: median_raw/backend and mean_raw/backend per
# round (MESHRUN_BLAS=asm for our own SGEMM). AsmGEMMVsOpenBLAS: asm/blas
# per round (run it with GOMAXPROCS=1; ASM_KERNEL=avx2 for the AVX2 kernel).
set -euo pipefail
old=$(realpath "$1") new=$(realpath "$2")
rounds=${3:-5} bench=${4:-MatmulBackendVsRawBLAS} bt=${5:-300x}
cd "$(dirname "$0")"
rows=$(mktemp)
trap 'rm -f "$rows"' EXIT
source ./ab_lib.sh
# one WHICH ROUND BIN: a run's benchmark lines, labelled
one() {
    "$3" -test.run '^$' -test.bench "$bench" -test.benchtime "$bt" |
        awk -v w="$1" '/^Benchmark/ {print w, $0}' >>"$rows"
}
ab_rounds "$rounds" "$old" "$new" one
/usr/bin/python3 - "$rows" <<'PY'
import collections, statistics, sys
by = collections.defaultdict(lambda: collections.defaultdict(lambda: collections.defaultdict(list)))
for line in open(sys.argv[1]):
    f = line.split()
    w, name = f[0], f[1].split("/", 1)[-1]
    for v, unit in zip(f[3::2], f[4::2]):  # value, unit pairs after the iterations
        if unit != "ns/op":
            by[name][unit][w].append(float(v))
for name, units in by.items():
    for unit, d in units.items():
        if not unit.startswith(("median", "mean", "asm/")):
            continue
        line = f"{name} {unit}:"
        for w in ("old", "new"):
            v = d[w]
            if v:
                line += f"  {w} min {min(v):.3f} median {statistics.median(v):.3f} max {max(v):.3f} ({len(v)})"
        print(line)
PY
