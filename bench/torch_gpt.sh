#!/usr/bin/env bash
# The tiny GPT (examples/train/gpt/gpt.mesh) trained by meshrun, on one
# device and on the example's [dp=2, tp=2] mesh, and by its PyTorch eager
# twin (bench/torch_gpt.py), from the same initial parameters and data
# (.npy files written once). First checks that the twin is the same model:
# its losses must match meshrun's one-device losses (rtol 1e-4 over the
# first 5 steps, 1e-3 after). Then, with 1 and with 2 threads on each side
# (meshrun: GOMAXPROCS and MESHRUN_BLAS_THREADS, which meshrun hands to
# openblas_set_num_threads; PyTorch: torch.set_num_threads,
# OMP_NUM_THREADS and OPENBLAS_NUM_THREADS, since Debian's torch calls
# OpenBLAS, whose own threads torch.set_num_threads does not limit; and
# OMP_WAIT_POLICY=PASSIVE: OpenMP's spinning workers made PyTorch's
# 2-thread step 10-60x slower on this loaded 2-core machine), ROUNDS rounds of the three runs, the order rotating
# every round; each run's figure is its median step of steps 3..STEPS;
# prints meshrun/PyTorch per round as min / median / max (goal <= 1.0).
# Needs /usr/bin/python3 with torch and numpy (Debian: apt-get install
# python3-torch); never a dependency of meshrun or of its tests.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-5} STEPS=${STEPS:-20} THREADS=${THREADS:-"1 2"}
. bench/torch_lib.sh
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
/usr/bin/python3 bench/torch_gpt.py prepare "$out" "$STEPS"
torch_setup
twin() { # $1 threads, $2 log
    torch_env "$1" /usr/bin/python3 bench/torch_gpt.py train "$out" "$STEPS" "$1" >"$2"
}
run_m1() { meshrun "$1" gpt1.mesh "$out/m1.log" && median "$out/m1.log"; }
run_mesh() { meshrun "$1" gpt.mesh "$out/m4.log" && median "$out/m4.log"; }
run_torch() { twin "$1" "$out/t.log" && median "$out/t.log"; }

echo "== same model: losses of meshrun (1 device, [dp=2, tp=2]) and the twin"
meshrun 1 gpt1.mesh "$out/m1.log"
meshrun 1 gpt.mesh "$out/m4.log"
twin 1 "$out/t.log"
py '
import sys, json
m1, m4, t = ([json.loads(l)["loss"] for l in open(f)] for f in sys.argv[1:4])
worst = 0
for i, (a, b, c) in enumerate(zip(m1, m4, t)):
    r = max(abs(a - c), abs(b - c)) / abs(c)
    worst = max(worst, r)
    if i < 5: print(f"step {i+1}: meshrun {a:.7f} mesh {b:.7f} PyTorch {c:.7f}  rel {r:.1e}")
    if r > (1e-4 if i < 5 else 1e-3):
        sys.exit(f"step {i+1}: losses differ by {r:.1e}: not the same model")
print(f"all {len(t)} steps agree, worst relative difference {worst:.1e}")
' "$out/m1.log" "$out/m4.log" "$out/t.log"

compare_rounds "[dp=2, tp=2]" 1.0
