#!/usr/bin/env bash
# bench/mpi.sh: meshrun on 4 MPI processes vs 4 local ranks (goroutines in
# one process), and meshrun's MPI collectives vs raw MPI calls. Ratios come
# from this one invocation: the two sides alternate (the order flips every
# round) and each figure is min / median / max over the rounds.
#
#   (a) the Megatron MLP, a 4-device variant of examples/megatron_mlp.mesh
#       ([dp=2, tp=4] rewritten to [dp=2, tp=2] in a temp dir): the time
#       `meshrun run` prints ("ran on 4 devices ... in T", one execution
#       including parameter initialisation, without process start-up),
#       and again with W1 and W2 loaded from .npy files (no random draws)
#   (b) the DP×TP training step, examples/train/megatron_dp_tp.mesh
#       ([dp=2, tp=2], 40 steps): the median step time of `meshrun train
#       --log` (steps 2..40; step 1 also initialises)
#   (c) bench/mpicoll under mpirun -np 4: meshrun's MPI all-reduce and
#       all-gather (rt.MPIComm's Group) vs rt/mpi's raw calls, GB/s
#
# Environment: ROUNDS (default 5), MPIRUN (the launcher; default the first
# of mpirun.openmpi, mpirun, mpiexec.mpich, mpiexec found). Skips, with a
# message and exit status 0, when no launcher or no MPI library is found.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-5}
np=4

mpirun=${MPIRUN:-}
if [[ -z $mpirun ]]; then
    for c in mpirun.openmpi mpirun mpiexec.mpich mpiexec; do
        if command -v "$c" >/dev/null 2>&1; then
            mpirun=$c
            break
        fi
    done
fi
if [[ -z $mpirun ]] || ! command -v "$mpirun" >/dev/null 2>&1; then
    echo "== MPI: no mpirun or mpiexec found (apt-get install openmpi-bin, or mpich); skipped"
    exit 0
fi
version=$("$mpirun" --version 2>&1 || true)
launch=("$mpirun")
if [[ $version == *"Open MPI"* || $version == *"OpenRTE"* ]]; then
    # 4 ranks on however many cores there are; shared memory only.
    launch+=(--oversubscribe)
    export OMPI_MCA_btl=${OMPI_MCA_btl:-self,vader}
    export OMPI_MCA_oob_tcp_if_include=${OMPI_MCA_oob_tcp_if_include:-lo}
    if [[ $(id -u) == 0 ]]; then
        export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    fi
fi
launch+=(-np "$np")

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/meshrun" ./cmd/meshrun
go build -o "$tmp/mpicoll" ./bench/mpicoll

# The MPI library must load in the ranks (meshrun dlopens it at run time).
probe=$("${launch[@]}" "$tmp/mpicoll" -sizes 0.0625 -rounds 1 -batch 1ms 2>&1 | tr -d '\0' || true)
if [[ $probe != *"mpicoll: $np ranks"* ]]; then
    echo "== MPI: $mpirun could not start $np ranks with an MPI library meshrun can load; skipped"
    printf '%s\n' "$probe" | tail -n 5 | sed 's/^/   /'
    exit 0
fi
vline=$(printf '%s\n' "$version" | awk '/[0-9]\./ { sub(/^[ \t]+/, ""); print; exit }')
echo "== MPI: $mpirun (${vline:-version unknown}); $np ranks; $(nproc) cores; $rounds rounds, alternating; $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "   $(printf '%s\n' "$probe" | head -n 1)"

# seconds DURATION: a Go duration (1.5s, 812.3ms, 95µs) in seconds.
seconds() {
    awk -v d="$1" 'BEGIN {
        n = d; sub(/[a-zµμ]+$/, "", n); u = substr(d, length(n) + 1)
        f = 1
        if (u == "ms") f = 1e-3; else if (u == "µs" || u == "μs" || u == "us") f = 1e-6; else if (u == "ns") f = 1e-9
        else if (u == "m") f = 60
        printf "%.9f\n", n * f }'
}
# spread: min / median / max of the numbers on stdin.
spread() {
    sort -g | awk -v fmt="${1:-%.3f}" '{ v[NR] = $1 } END {
        if (NR == 0) { print "n/a"; exit }
        m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
        printf fmt " / " fmt " / " fmt "\n", v[1], m, v[NR] }'
}
# ran: the "in T" of `meshrun run`'s summary line, in seconds.
ran() {
    local out
    out=$("$@" 2>&1) || { printf '%s\n' "$out" >&2; return 1; }
    local t
    t=$(printf '%s\n' "$out" | sed -n 's/^ran on .* in \([^;]*\);.*/\1/p' | head -n 1)
    [[ -n $t ]] || { printf 'no "ran on ... in T" line in:\n%s\n' "$out" >&2; return 1; }
    seconds "$t"
}
# step LOG: the median of the per-step seconds of steps 2.. in a --log file.
step() {
    sed -n 's/.*"seconds":\([0-9.eE+-]*\).*"step":\([0-9]*\).*/\2 \1/p' "$1" |
        awk '$1 > 1 { print $2 }' | spread '%.9f' | awk -F' / ' '{ print $2 }'
}

mkdir -p "$tmp/mlp4"
sed 's/^mesh M = \[dp=2, tp=4\]/mesh M = [dp=2, tp=2]/' examples/megatron_mlp.mesh >"$tmp/mlp4/megatron_mlp4.mesh"
cp examples/x.npy "$tmp/mlp4/"
grep -q '^mesh M = \[dp=2, tp=2\]' "$tmp/mlp4/megatron_mlp4.mesh" || { echo "mpi.sh: could not make the 4-device Megatron MLP" >&2; exit 1; }
# The same with W1 and W2 loaded from .npy files (written once by meshrun)
# instead of drawn from normal(0, 0.02) at every run: drawing them is most
# of one run's time, which hides the execution.
cat >"$tmp/mlp4/gen.mesh" <<'MESH'
mesh M = [a=1]
input A : f32[512, 2048] = normal(0, 0.02)
input B : f32[2048, 512] = normal(0, 0.02)
W1 = A + 0
W2 = B + 0
output W1
output W2
MESH
"$tmp/meshrun" run "$tmp/mlp4/gen.mesh" --launcher local --out "$tmp/mlp4" >/dev/null
sed 's/^\(param \(W[12]\) .*}\) *= normal(0, 0.02)/\1 = load("\2.npy")/' "$tmp/mlp4/megatron_mlp4.mesh" >"$tmp/mlp4/megatron_mlp4_load.mesh"
[[ $(grep -c 'load("W[12].npy")' "$tmp/mlp4/megatron_mlp4_load.mesh") == 2 ]] || { echo "mpi.sh: could not make the loading variant" >&2; exit 1; }
train=examples/train/megatron_dp_tp.mesh

: >"$tmp/run.local"; : >"$tmp/run.mpi"; : >"$tmp/run.ratio"
: >"$tmp/load.local"; : >"$tmp/load.mpi"; : >"$tmp/load.ratio"
: >"$tmp/train.local"; : >"$tmp/train.mpi"; : >"$tmp/train.ratio"
for ((r = 0; r < rounds; r++)); do
    order=(local mpi)
    if ((r % 2 == 1)); then order=(mpi local); fi
    declare -A runT loadT stepT
    for side in "${order[@]}"; do
        if [[ $side == local ]]; then
            runT[$side]=$(ran "$tmp/meshrun" run "$tmp/mlp4/megatron_mlp4.mesh" --launcher local)
            loadT[$side]=$(ran "$tmp/meshrun" run "$tmp/mlp4/megatron_mlp4_load.mesh" --launcher local)
            "$tmp/meshrun" train "$train" --launcher local --log "$tmp/log.jsonl" >/dev/null
        else
            runT[$side]=$(ran "${launch[@]}" "$tmp/meshrun" run "$tmp/mlp4/megatron_mlp4.mesh" --launcher mpi)
            loadT[$side]=$(ran "${launch[@]}" "$tmp/meshrun" run "$tmp/mlp4/megatron_mlp4_load.mesh" --launcher mpi)
            "${launch[@]}" "$tmp/meshrun" train "$train" --launcher mpi --log "$tmp/log.jsonl" >/dev/null
        fi
        stepT[$side]=$(step "$tmp/log.jsonl")
    done
    echo "${runT[local]}" >>"$tmp/run.local"
    echo "${runT[mpi]}" >>"$tmp/run.mpi"
    awk -v a="${runT[mpi]}" -v b="${runT[local]}" 'BEGIN { print a / b }' >>"$tmp/run.ratio"
    echo "${loadT[local]}" >>"$tmp/load.local"
    echo "${loadT[mpi]}" >>"$tmp/load.mpi"
    awk -v a="${loadT[mpi]}" -v b="${loadT[local]}" 'BEGIN { print a / b }' >>"$tmp/load.ratio"
    echo "${stepT[local]}" >>"$tmp/train.local"
    echo "${stepT[mpi]}" >>"$tmp/train.mpi"
    awk -v a="${stepT[mpi]}" -v b="${stepT[local]}" 'BEGIN { print a / b }' >>"$tmp/train.ratio"
    printf '   round %d: megatron_mlp4 local %.1f ms, mpi %.1f ms; weights loaded: local %.1f ms, mpi %.1f ms; dp_tp step local %.3f ms, mpi %.3f ms\n' "$((r + 1))" \
        "$(awk -v s="${runT[local]}" 'BEGIN { print s * 1e3 }')" "$(awk -v s="${runT[mpi]}" 'BEGIN { print s * 1e3 }')" \
        "$(awk -v s="${loadT[local]}" 'BEGIN { print s * 1e3 }')" "$(awk -v s="${loadT[mpi]}" 'BEGIN { print s * 1e3 }')" \
        "$(awk -v s="${stepT[local]}" 'BEGIN { print s * 1e3 }')" "$(awk -v s="${stepT[mpi]}" 'BEGIN { print s * 1e3 }')"
done
ms() { awk '{ print $1 * 1e3 }' "$1" | spread '%.2f'; }
echo "(a) Megatron MLP, 4-device variant [dp=2, tp=2] (meshrun run, 'ran in', ms, min / median / max)"
echo "    local $(ms "$tmp/run.local")   mpi $(ms "$tmp/run.mpi")"
echo "    mpi/local per round: $(spread <"$tmp/run.ratio")"
echo "    the same with W1, W2 loaded from .npy instead of drawn at random:"
echo "    local $(ms "$tmp/load.local")   mpi $(ms "$tmp/load.mpi")"
echo "    mpi/local per round: $(spread <"$tmp/load.ratio")"
echo "(b) DP×TP training step, $train [dp=2, tp=2] (median step of 2..40, ms, min / median / max over rounds)"
echo "    local $(ms "$tmp/train.local")   mpi $(ms "$tmp/train.mpi")"
echo "    mpi/local per round: $(spread <"$tmp/train.ratio")"
echo "(c) collectives under $mpirun -np $np: meshrun's MPI Group vs raw rt/mpi calls (goal meshrun/raw >= 0.9)"
"${launch[@]}" "$tmp/mpicoll" -rounds "$((rounds < 5 ? 5 : rounds))" | sed 's/^/    /'
