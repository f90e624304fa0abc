#!/usr/bin/env bash
# The one prepared check of the CUDA backend on a GPU machine. Run from the
# repository root; needs the NVIDIA driver and CUDA's NVRTC and cuBLAS
# (CUDA 13 or 12: a toolkit, or the nvidia/* pip packages PyTorch
# installs; see cuda/doc.go for the search), and no Go: the binaries come
# from bench/gpu_build.sh (BIN, default bench/gpu_bin). Writes everything
# it prints to $OUT/gpu.log (OUT: a temp dir unless set), and nothing else
# there: the runs' outputs and the kernel cache go to a temporary folder,
# since the device machine's tool brings back only a few files of $OUT
# (the runs write dozens of .npy files). About 2-4 minutes:
#
#  1. meshrun devices (what NVML sees), and the links explain --link gpus
#     takes from it;
#  2. package cuda's tests with MESHRUN_TEST_GPU=1 MESHRUN_REQUIRE_GPU=1:
#     every op against the CPU backend, and whole examples (inference and
#     training) on the GPU against the CPU, all ranks sharing GPU 0;
#  3. meshrun check --backend cuda on examples: the mesh run on the GPU
#     against the one-device CPU run (PASS/FAIL);
#  4. meshrun run/train --backend cuda and --backend cpu on examples,
#     outputs compared by bench/npydiff.py (python3, no numpy needed);
#  5. the backend's matmul against raw cuBLAS GEMMs (time ratio, min /
#     median / max over alternating rounds) in f32, TF32 (--tf32), bf16
#     and f64 and, when PyTorch with CUDA is here, torch.matmul's TFLOP/s
#     on the same shapes (TF32: allow_tf32);
#  6. the collectives of logical ranks sharing the GPU (all-reduce,
#     all-gather, reduce-scatter of 64 MiB per member, 2/4/8 members)
#     against a device-to-device copy, in GB/s (bytes read + written);
#  7. when PyTorch with CUDA is here: the tiny GPT's training step
#     (examples/train/gpt/gpt.mesh, on one device and on its [dp=2, tp=2]
#     mesh, all four ranks on GPU 0) against its PyTorch eager twin
#     (bench/torch_gpt.py, the same parameters and data) on the GPU: the
#     losses of the first steps must agree, then GPT_ROUNDS alternating
#     rounds (default 5) of each run's median step (steps 3..) and
#     meshrun/PyTorch as min / median / max (issue 9's goal: <= 1.25);
#  7. meshrun trace --backend cuda on the tiny GPT and the Megatron MLP:
#     the timeline in GPU time (CUDA events), checked and summarised per
#     rank by bench/gputime.py (GPU compute time vs the step's span).
# Exit status 0 only when every step passed.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
BIN=$(realpath "${BIN:-bench/gpu_bin}")
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
work=$(mktemp -d)
exec > >(tee "$OUT/gpu.log") 2>&1
tee_pid=$!
export MESHRUN_CUDA_CACHE=${MESHRUN_CUDA_CACHE:-$work/kernel-cache}
# the library search looks in $VIRTUAL_ENV's site-packages for NVIDIA's pip
# wheels (PyTorch's nvidia/* packages): point it at python3's environment
# when no virtual environment is active
if [ -z "${VIRTUAL_ENV:-}" ] && command -v python3 >/dev/null; then
	VIRTUAL_ENV=$(python3 -c 'import sys; print(sys.prefix)' 2>/dev/null) && export VIRTUAL_ENV
fi
status=0
# DEADLINE (seconds, default 420): the device machine's lease is short, so
# every step's timeout is cut to what is left, and steps that would start
# with under 10 s left are skipped (said, and counted as failures)
DEADLINE=${DEADLINE:-420}
step() { echo; echo "=== $* (at ${SECONDS}s)"; }
fail() { echo "FAILED: $*"; status=1; }
# tmo N CMD...: timeout N, or less when the deadline is nearer
tmo() {
	local left=$((DEADLINE - SECONDS)) n=$1
	shift
	if [ "$left" -lt 10 ]; then echo "SKIPPED (deadline ${DEADLINE}s): $*"; return 124; fi
	[ "$n" -gt "$left" ] && n=$left
	timeout "$n" "$@"
}

step "build"; cat "$BIN/COMMIT" 2>/dev/null || echo "no $BIN/COMMIT: run bench/gpu_build.sh"
step "machine"
uname -srm; nproc; echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"; echo "VIRTUAL_ENV=${VIRTUAL_ENV:-}"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
echo "--- CUDA libraries present"
{ ldconfig -p | grep -E 'libcuda\.so|libnvidia-ml|libnvrtc|libcublas|libnccl' | sed 's/^\s*//'
  timeout 20 find /usr /opt /usr/local -xdev \( -name 'libnvrtc.so*' -o -name 'libcublas*.so*' -o -name 'libnccl.so*' -o -name 'libcuda.so*' \) 2>/dev/null; } | sort -u | head -40
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available())' 2>&1 | tail -1
step "meshrun devices"
tmo 60 "$BIN/meshrun" devices || fail "meshrun devices"
echo "--- explain --link gpus (the links NVML's topology gives the mesh)"
links=$(tmo 60 "$BIN/meshrun" explain examples/megatron_mlp.mesh --link gpus 2>&1)
rc=$?
echo "$links" | sed -n '1,/^$/p'
# without NVML (trying this script on the fake driver) that is an answer
[ $rc = 0 ] || grep -q 'no NVIDIA driver' <<<"$links" || fail "explain --link gpus"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv

step "package cuda's tests on the GPU"
(cd cuda && MESHRUN_TEST_GPU=1 MESHRUN_REQUIRE_GPU=1 tmo 240 "$BIN/cuda.test" \
    -test.v -test.run '^(TestBackend|TestHalf|TestExamples|TestCLI)' 2>&1 | grep -v '^=== RUN') || fail "cuda tests"

step "meshrun check --backend cuda (mesh on the GPU vs one CPU device)"
for ex in examples/dp_mlp.mesh examples/megatron_mlp.mesh examples/dp_tp_block.mesh examples/train/mlp_dp.mesh examples/train/megatron_dp_tp.mesh; do
    echo "--- $ex"
    tmo 120 "$BIN/meshrun" check "$ex" --backend cuda || fail "check $ex"
done

step "run/train --backend cuda vs --backend cpu, outputs compared"
for ex in examples/megatron_mlp.mesh examples/long_attention.mesh train:examples/train/mlp_dp.mesh train:examples/train/gpt/gpt.mesh; do
    cmd=run
    [[ $ex == train:* ]] && cmd=train && ex=${ex#train:}
    name=$(basename "$ex" .mesh)
    mkdir -p "$work/$name"
    for be in cuda cpu; do
        t0=$(date +%s.%N)
        tmo 120 "$BIN/meshrun" $cmd "$ex" --backend $be --out "$work/$name/$be" > "$work/$name/$be.txt" 2>&1 \
            || { fail "$cmd $ex --backend $be"; tail -5 "$work/$name/$be.txt"; }
        echo "$cmd $ex --backend $be: $(awk "BEGIN{printf \"%.2f\", $(date +%s.%N) - $t0}") s wall; $(tail -1 "$work/$name/$be.txt")"
    done
    python3 bench/npydiff.py "$work/$name/cpu" "$work/$name/cuda" || fail "compare $ex"
done

step "matmul: the backend vs raw cuBLAS"
(cd cuda && MESHRUN_TEST_GPU=1 tmo 180 "$BIN/cuda.test" -test.run '^$' -test.bench MatmulVsCublas \
    -test.benchtime 1x -test.v) || fail "matmul benchmark"

step "collectives among logical ranks on the GPU vs a device-to-device copy"
(cd cuda && MESHRUN_TEST_GPU=1 tmo 120 "$BIN/cuda.test" -test.run '^$' -test.bench CollectivesVsCopy \
    -test.benchtime 1x -test.v 2>&1 | grep -E 'comm_bench_test|^(ok|PASS|FAIL)|panic') || fail "collectives benchmark"

step "PyTorch matmul on the same shapes (when torch has CUDA)"
tmo 120 python3 - <<'PY' || echo "(no PyTorch with CUDA here)"
import time, torch
assert torch.cuda.is_available()
# the device's copy ceiling, bytes read plus written (1 GiB each way)
x = torch.empty(1 << 28, device="cuda"); y = torch.empty_like(x)
for _ in range(3): y.copy_(x)
best = 1e9
for _ in range(10):
    torch.cuda.synchronize(); t = time.perf_counter(); y.copy_(x); torch.cuda.synchronize(); best = min(best, time.perf_counter() - t)
print(f"torch device-to-device copy: {2 * x.numel() * 4 / best / 1e9:.0f} GB/s (read + write)")
del x, y
for name, dt, tf32 in (("f32", torch.float32, False), ("tf32", torch.float32, True), ("bf16", torch.bfloat16, False), ("f64", torch.float64, False)):
    torch.backends.cuda.matmul.allow_tf32 = tf32
    for m, k, n in ((4096, 4096, 4096), (8192, 1024, 4096), (16 * 512, 768, 3072)):
        a = torch.randn(m, k, device="cuda", dtype=dt); b = torch.randn(k, n, device="cuda", dtype=dt)
        for _ in range(3): a @ b
        best = 1e9
        for _ in range(7):
            torch.cuda.synchronize(); t = time.perf_counter()
            for _ in range(20): a @ b
            torch.cuda.synchronize(); best = min(best, time.perf_counter() - t)
        print(f"torch {name} {m}x{k}x{n}: {2*m*k*n*20/best/1e12:.2f} TFLOP/s")
PY

step "tiny GPT training step on the GPU: meshrun --backend cuda vs PyTorch eager (when torch has CUDA)"
gpt_vs_torch() {
    # TORCH_DEVICE=cpu runs the twin on the CPU: only to try this step on
    # a machine without a GPU (with the fake driver), never for a figure
    local d=$work/gpt steps=20 rounds=${GPT_ROUNDS:-5} dev=${TORCH_DEVICE:-cuda} r m1 m4 tt
    python3 -c "import torch, numpy; assert '$dev' == 'cpu' or torch.cuda.is_available()" 2>/dev/null || { echo "(no PyTorch with CUDA and numpy here)"; return 0; }
    mkdir -p "$d"
    python3 bench/torch_gpt.py prepare "$d" $steps || { fail "torch_gpt.py prepare"; return; }
    med() { python3 -c 'import sys,json,statistics; print(statistics.median([json.loads(l)["seconds"] for l in open(sys.argv[1])][2:]))' "$1"; }
    for r in $(seq "$rounds"); do
        # the order rotates every round, so drift on the machine falls on each run alike
        for w in $(seq 0 2 | awk -v r="$r" '{print ($1 + r) % 3}'); do
            case $w in
            0) tmo 120 "$BIN/meshrun" train "$d/gpt1.mesh" --backend cuda --log "$d/m1.$r" >/dev/null 2>"$d/m1.err" || { fail "meshrun train gpt1.mesh --backend cuda"; tail -3 "$d/m1.err"; return; } ;;
            1) tmo 120 "$BIN/meshrun" train "$d/gpt.mesh" --backend cuda --log "$d/m4.$r" >/dev/null 2>"$d/m4.err" || { fail "meshrun train gpt.mesh --backend cuda"; tail -3 "$d/m4.err"; return; } ;;
            2) tmo 120 python3 bench/torch_gpt.py train "$d" $steps 1 "$dev" >"$d/t.$r" || { fail "torch_gpt.py train on $dev"; return; } ;;
            esac
        done
        m1=$(med "$d/m1.$r") m4=$(med "$d/m4.$r") tt=$(med "$d/t.$r")
        echo "round $r: median step meshrun 1 device $m1 s, [dp=2, tp=2] $m4 s, PyTorch $tt s"
        echo "$m1 $m4 $tt" >>"$d/rounds"
    done
    python3 - "$d/m1.1" "$d/m4.1" "$d/t.1" "$d/rounds" <<'PY' || fail "GPT losses differ from PyTorch's"
import sys, json, statistics
m1, m4, t = ([json.loads(l)["loss"] for l in open(f)] for f in sys.argv[1:4])
for i, (a, b, c) in enumerate(zip(m1[:5], m4[:5], t[:5])):
    r = max(abs(a - c), abs(b - c)) / abs(c)
    print(f"step {i+1}: loss meshrun {a:.7f} mesh {b:.7f} PyTorch {c:.7f}  rel {r:.1e}")
    if r > 1e-4:
        sys.exit(f"step {i+1}: not the same model")
rows = [list(map(float, l.split())) for l in open(sys.argv[4])]
for name, k in (("1 device", 0), ("[dp=2, tp=2]", 1)):
    q = sorted(r[k] / r[2] for r in rows)
    print(f"meshrun {name} / PyTorch, per round: min {q[0]:.2f} median {statistics.median(q):.2f} max {q[-1]:.2f} (goal <= 1.25)")
PY
}
gpt_vs_torch

step "GPU time on the timeline: meshrun trace --backend cuda (CUDA events around every instruction)"
# the second step of each (the first pays the GPU's set-up), all ranks on GPU 0;
# bench/gputime.py checks the trace (device-timed, in order, no overlap per
# rank) and prints each rank's GPU compute time against the step's span
for ex in examples/train/gpt/gpt.mesh examples/megatron_mlp.mesh; do
    name=$(basename "$ex" .mesh)
    tmo 60 "$BIN/meshrun" trace "$ex" --backend cuda -o "$work/trace-$name.json" >"$work/trace-$name.txt" 2>&1 \
        || { fail "trace $ex --backend cuda"; tail -5 "$work/trace-$name.txt"; continue; }
    python3 bench/gputime.py "$work/trace-$name.json" "$ex" || fail "GPU timeline of $ex"
done

step "done in ${SECONDS}s: status $status"
exec >&- 2>&- # let tee write the log's last lines before the script ends
wait "$tee_pid"
rm -rf "$work"
exit $status
