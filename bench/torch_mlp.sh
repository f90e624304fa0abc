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
ROUNDS=${ROUNDS:-5} THREADS=${THREADS:-"1 2"}
. bench/torch_lib.sh
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
torch_setup
run_torch() { # $1 threads; prints the median step of steps 3..
torch_env "$1" /usr/bin/python3 - "$out" "$STEPS" "$1" <<'PY'
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
run_m1() { meshrun "$1" mlp1.mesh "$out/m1.log" && median "$out/m1.log"; }
run_mesh() { meshrun "$1" mlp2.mesh "$out/m2.log" && median "$out/m2.log"; }
compare_rounds "[dp=2]" 0.8
