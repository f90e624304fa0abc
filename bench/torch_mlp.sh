#!/usr/bin/env bash
# One training step of the same MLP (x @ W1 -> gelu -> @ W2, MSE, Adam) in
# meshrun (1 device, and 2 virtual devices data-parallel) and in PyTorch,
# on the same inputs, timed in one invocation; prints the meshrun/PyTorch
# ratio of the median step time. Installs Debian's python3-torch if it is
# missing; never a dependency of meshrun or of its tests.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! /usr/bin/python3 -c 'import torch, numpy' 2>/dev/null; then
    echo "installing python3-torch and python3-numpy (Debian)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-torch python3-numpy >/dev/null
fi
out=bench/out
mkdir -p "$out"
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
median() { /usr/bin/python3 -c "import sys,json,statistics; s=[json.loads(l)['seconds'] for l in open(sys.argv[1])][2:]; print(statistics.median(s))" "$1"; }
torch_step() {
/usr/bin/python3 - "$out" "$STEPS" <<'PY'
import sys, time, statistics, numpy as np, torch
out, steps = sys.argv[1], int(sys.argv[2])
torch.set_num_threads(2)
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
    times.append(time.perf_counter() - t0)
print(statistics.median(times[2:]))
PY
}
# rounds alternate the three runs so that the machine's noise falls on all of them
ratios1=(); ratios2=()
for round in 1 2 3; do
    "$out/meshrun" train "$out/mlp1.mesh" --log "$out/m1.log" >/dev/null
    t=$(torch_step)
    "$out/meshrun" train "$out/mlp2.mesh" --log "$out/m2.log" >/dev/null
    m1=$(median "$out/m1.log"); m2=$(median "$out/m2.log")
    r=$(/usr/bin/python3 -c "print(f'{$m1/$t:.2f} {$m2/$t:.2f}')")
    echo "round $round: median step meshrun 1 device $(/usr/bin/python3 -c "print(f'{$m1*1e3:.1f}')") ms, 2 devices $(/usr/bin/python3 -c "print(f'{$m2*1e3:.1f}')") ms, PyTorch $(/usr/bin/python3 -c "print(f'{$t*1e3:.1f}')") ms -> ratios $r"
    ratios1+=("${r% *}"); ratios2+=("${r#* }")
done
/usr/bin/python3 -c "
import statistics, sys
a = [float(x) for x in '${ratios1[*]}'.split()]; b = [float(x) for x in '${ratios2[*]}'.split()]
print(f'meshrun/PyTorch, median of rounds: {statistics.median(a):.2f} (1 device), {statistics.median(b):.2f} (2 virtual devices); goal <= 1.0')
"
