#!/usr/bin/env bash
# Runs meshrun's benchmarks (bench_test.go, dp_test.go, asmgemm_amd64_test.go)
# once per BLAS: gonum, meshrun's own assembly SGEMM, and OpenBLAS when
# libopenblas.so.0 can be loaded; each section starts with the BLAS that
# ran (bench/blasinfo). Every figure is a ratio against a reference
# measured in the same run. BENCHTIME sets the rounds (default 5x); DP_MAX
# caps the data-parallel sweep (default 64).
set -euo pipefail
cd "$(dirname "$0")/.."
time=${BENCHTIME:-5x}
pattern='Benchmark|raw/backend|asm/BLAS|over_single|mesh/single|dp=|devices'
section() { # $1 = MESHRUN_BLAS value ("" = the default)
    echo "== $(MESHRUN_BLAS=$1 go run ./bench/blasinfo)"
    MESHRUN_BLAS=$1 go test ./bench -run '^$' -bench . -benchtime "$time" -timeout 60m -v | grep -E "$pattern"
}
section gonum
section asm
# Read the cache into a variable and match it in bash: piping into
# `grep -q` let grep exit at the first match, ldconfig die of SIGPIPE, and
# pipefail turn the match into a failure, so OpenBLAS was sometimes
# skipped (issue 10).
libs=$(ldconfig -p 2>/dev/null || true)
if [[ $libs == *libopenblas.so.0* ]]; then
    section ""
else
    echo "== OpenBLAS: libopenblas.so.0 not installed (apt-get install libopenblas0-pthread); skipped"
fi
