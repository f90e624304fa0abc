#!/usr/bin/env bash
# Builds the binaries bench/gpu.sh runs on a GPU machine that has no Go:
# meshrun and the test binary of package cuda (go test -c), with cgo (the
# CUDA libraries are dlopened at run time: nothing from CUDA is needed
# here). Into DIR (default bench/gpu_bin, ignored by git: binaries are
# never committed), with the commit they were built from.
#
#   bench/gpu_build.sh [DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-bench/gpu_bin}
mkdir -p "$dir"
export CGO_ENABLED=1
go build -trimpath -ldflags='-s -w' -o "$dir/meshrun" ./cmd/meshrun
go test -c -trimpath -ldflags='-s -w' -o "$dir/cuda.test" ./cuda
{ git rev-parse HEAD; git status --porcelain | sed 's/^/dirty: /'; } > "$dir/COMMIT"
ls -l "$dir"
