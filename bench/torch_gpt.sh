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
if ! /usr/bin/python3 -c 'import torch, numpy' 2>/dev/null; then
    echo "torch_gpt.sh: needs PyTorch: apt-get install python3-torch python3-numpy" >&2
    exit 1
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
/usr/bin/python3 bench/torch_gpt.py prepare "$out" "$STEPS"
go build -o "$out/meshrun" ./cmd/meshrun
go build -o "$out/blasinfo" ./bench/blasinfo
# PyTorch (Debian's, BLAS_INFO=generic) calls libblas.so.3; when that is
# OpenBLAS it gets the kernels meshrun chose (see rt.chooseCoreType)
export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-$("$out/blasinfo" -coretype)}
"$out/blasinfo"
/usr/bin/python3 bench/torch_blas.py

py() { /usr/bin/python3 -c "$1" "${@:2}"; }
# median of the "seconds" of steps 3.. in a JSON-lines log
median() { py 'import sys,json,statistics; print(statistics.median([json.loads(l)["seconds"] for l in open(sys.argv[1])][2:]))' "$1"; }
meshrun() { # $1 threads, $2 mesh file, $3 log
    GOMAXPROCS=$1 MESHRUN_BLAS_THREADS=$1 "$out/meshrun" train "$out/$2" --log "$3" >/dev/null
}
twin() { # $1 threads, $2 log
    OMP_NUM_THREADS=$1 OPENBLAS_NUM_THREADS=$1 OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 bench/torch_gpt.py train "$out" "$STEPS" "$1" >"$2"
}

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

for th in $THREADS; do
    echo "== $th thread(s): median step per run (ms) and meshrun/PyTorch per round"
    r1=() r4=()
    for round in $(seq "$ROUNDS"); do
        order=(m1 m4 t)
        order=("${order[@]:$((round % 3))}" "${order[@]:0:$((round % 3))}")
        for w in "${order[@]}"; do
            case $w in
            m1) meshrun "$th" gpt1.mesh "$out/m1.log" ;;
            m4) meshrun "$th" gpt.mesh "$out/m4.log" ;;
            t) twin "$th" "$out/t.log" ;;
            esac
        done
        read -r a b c x y < <(py 'import sys; a,b,c=map(float,sys.argv[1:]); print(f"{a*1e3:.2f} {b*1e3:.2f} {c*1e3:.2f} {a/c:.3f} {b/c:.3f}")' \
            "$(median "$out/m1.log")" "$(median "$out/m4.log")" "$(median "$out/t.log")")
        echo "round $round (${order[*]}): meshrun 1 device $a, [dp=2, tp=2] $b, PyTorch $c -> $x, $y"
        r1+=("$x") r4+=("$y")
    done
    py '
import sys, statistics
for name, xs in (("1 device", sys.argv[2].split()), ("[dp=2, tp=2]", sys.argv[3].split())):
    xs = sorted(map(float, xs))
    print(f"{sys.argv[1]} thread(s), meshrun {name} / PyTorch: min {xs[0]:.2f} median {statistics.median(xs):.2f} max {xs[-1]:.2f} ({len(xs)} rounds; goal <= 1.0)")
' "$th" "${r1[*]}" "${r4[*]}"
done
