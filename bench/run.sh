#!/usr/bin/env bash
# Runs meshrun's benchmarks with the gonum BLAS and, when libopenblas.so.0
# can be loaded, with OpenBLAS. Every figure is a ratio against a reference
# measured in the same run.
set -euo pipefail
cd "$(dirname "$0")/.."
time=${BENCHTIME:-3x}
echo "== gonum BLAS"
MESHRUN_BLAS=gonum go test ./bench -run '^$' -bench . -benchtime "$time" -v | grep -E 'Benchmark|efficiency|over_single|raw/backend|devices|mesh '
# Read the cache into a variable and match it in bash: piping into
# `grep -q` let grep exit at the first match, ldconfig die of SIGPIPE, and
# pipefail turn the match into a failure, so OpenBLAS was sometimes
# skipped (issue 10).
libs=$(ldconfig -p 2>/dev/null || true)
if [[ $libs == *libopenblas.so.0* ]]; then
    echo "== OpenBLAS"
    go test ./bench -run '^$' -bench . -benchtime "$time" -v | grep -E 'Benchmark|efficiency|over_single|raw/backend|devices|mesh '
else
    echo "== OpenBLAS: libopenblas.so.0 not installed (apt-get install libopenblas0); skipped"
fi
