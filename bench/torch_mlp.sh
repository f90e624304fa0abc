#!/usr/bin/env bash
# One training step of the same MLP (x @ W1 -> gelu -> @ W2, MSE, Adam) in
# meshrun (1 device, and 2 virtual devices data-parallel) and in PyTorch
# eager, on the same inputs, with 1 and with 2 threads on each side
# (meshrun: GOMAXPROCS and MESHRUN_BLAS_THREADS, handed to
# openblas_set_num_threads; PyTorch: torch.set_num_threads,
# OMP_NUM_THREADS and OPENBLAS_NUM_THREADS, since Debian's torch calls
# OpenBLAS, whose own threads torch.set_num_threads does not limit; and
# OMP_WAIT_POLICY=PASSIVE: OpenMP's spinning workers made PyTorch's
# 2-thread step 10-60x slower on this loaded 2-core machine). ROUNDS rounds (default 5), the order rotating every
# round; each run's figure is its median step of steps 3..STEPS; prints
# meshrun/PyTorch per round as min / median / max (goal <= 0.8) and which
# BLAS each side ran. Needs /usr/bin/python3 with torch and numpy (Debian:
# apt-get install python3-torch); never a dependency of meshrun or its tests.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! /usr/bin/python3 -c 'import torch, numpy' 2>/dev/null; then
    echo "torch_mlp.sh: needs PyTorch: apt-get install python3-torch python3-numpy" >&2
    exit 1
fi
ROUNDS=${ROUNDS:-5} THREADS=${THREADS:-"1 2"}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
B=${B:-256} D=${D:-512} H=${H:-1024} STEPS=${STEPS:-12}
/usr/bin/python3 - "$out" "$B" "$D" "$H" <<'PY'
import sys, numpy as np
out, B, D, H = sys.argv[1], *map(int, sys.argv[2:])
rng = np.random.default_rng(0)
for name, shape, s in [("x", (B, D), 1), ("t", (B, D), 1), ("W1", (D, H), D**-0.5), ("W2", (H, D), H**-0.5)]:
    np.save(f"{out}/{name}.npy", (rng.standard_normal(shape) * s).astype(np.float32))
PY
prog() { # $1 = mesh, $2 = placement of the batch
cat <<MESH
mesh M = [$1]
input x : f32[$B, $D] $2 = load("x.npy")
input t : f32[$B, $D] $2 = load("t.npy")
param W1 : f32[$D, $H] = load("W1.npy")
param W2 : f32[$H, $D] = load("W2.npy")
train {
    loss = mse(gelu(x @ W1) @ W2, t)
    optimizer = adam(lr=0.001)
    steps = $STEPS
}
MESH
}
prog "dp=1" "" > "$out/mlp1.mesh"
prog "dp=2" "{S(0)}" > "$out/mlp2.mesh"
go build -o "$out/meshrun" ./cmd/meshrun
go build -o "$out/blasinfo" ./bench/blasinfo
export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-$("$out/blasinfo" -coretype)}
"$out/blasinfo"
/usr/bin/python3 bench/torch_blas.py
py() { /usr/bin/python3 -c "$1" "${@:2}"; }
median() { py 'import sys,json,statistics; print(statistics.median([json.loads(l)["seconds"] for l in open(sys.argv[1])][2:]))' "$1"; }
meshrun() { # $1 threads, $2 mesh file, $3 log
    GOMAXPROCS=$1 MESHRUN_BLAS_THREADS=$1 "$out/meshrun" train "$out/$2" --log "$3" >/dev/null
}
torch_step() { # $1 threads; prints the median step of steps 3..
OMP_NUM_THREADS=$1 OPENBLAS_NUM_THREADS=$1 OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 - "$out" "$STEPS" "$1" <<'PY'
import sys, time, statistics, numpy as np, torch
out, steps, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
torch.set_num_threads(threads)
x, t = (torch.from_numpy(np.load(f"{out}/{n}.npy")) for n in ("x", "t"))
W1 = torch.from_numpy(np.load(f"{out}/W1.npy")).requires_grad_()
W2 = torch.from_numpy(np.load(f"{out}/W2.npy")).requires_grad_()
opt = torch.optim.Adam([W1, W2], lr=0.001)
times = []
for _ in range(steps):
    t0 = time.perf_counter()
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(torch.nn.functional.gelu(x @ W1) @ W2, t)
    loss.backward()
    opt.step()
    loss.item()
    times.append(time.perf_counter() - t0)
print(statistics.median(times[2:]))
PY
}
for th in $THREADS; do
    echo "== $th thread(s): median step per run (ms) and meshrun/PyTorch per round"
    r1=() r2=()
    for round in $(seq "$ROUNDS"); do
        order=(m1 m2 t)
        order=("${order[@]:$((round % 3))}" "${order[@]:0:$((round % 3))}")
        for w in "${order[@]}"; do
            case $w in
            m1) meshrun "$th" mlp1.mesh "$out/m1.log" ;;
            m2) meshrun "$th" mlp2.mesh "$out/m2.log" ;;
            t) tt=$(torch_step "$th") ;;
            esac
        done
        read -r a b c x y < <(py 'import sys; a,b,c=map(float,sys.argv[1:]); print(f"{a*1e3:.2f} {b*1e3:.2f} {c*1e3:.2f} {a/c:.3f} {b/c:.3f}")' \
            "$(median "$out/m1.log")" "$(median "$out/m2.log")" "$tt")
        echo "round $round (${order[*]}): meshrun 1 device $a, [dp=2] $b, PyTorch $c -> $x, $y"
        r1+=("$x") r2+=("$y")
    done
    py '
import sys, statistics
for name, xs in (("1 device", sys.argv[2].split()), ("[dp=2]", sys.argv[3].split())):
    xs = sorted(map(float, xs))
    print(f"{sys.argv[1]} thread(s), meshrun {name} / PyTorch: min {xs[0]:.2f} median {statistics.median(xs):.2f} max {xs[-1]:.2f} ({len(xs)} rounds; goal <= 0.8)")
' "$th" "${r1[*]}" "${r2[*]}"
done
