# Shared by bench/torch_gpt.sh and bench/torch_mlp.sh (sourced, not run):
# the build, the BLAS both sides run, the thread settings of each side,
# and the rounds of alternating runs with their ratios.
#
# The sourcing script sets out (a temporary folder), ROUNDS and THREADS,
# and defines run_m1, run_mesh and run_torch: each takes a thread count,
# runs once, and prints that run's median step in seconds.

if ! /usr/bin/python3 -c 'import torch, numpy' 2>/dev/null; then
    echo "$(basename "$0"): needs PyTorch: apt-get install python3-torch python3-numpy" >&2
    exit 1
fi

py() { /usr/bin/python3 -c "$1" "${@:2}"; }

# median of the "seconds" of steps 3.. in a meshrun JSON-lines log
median() { py 'import sys,json,statistics; print(statistics.median([json.loads(l)["seconds"] for l in open(sys.argv[1])][2:]))' "$1"; }

# torch_setup builds meshrun and says which BLAS each side runs. PyTorch
# (Debian's, BLAS_INFO=generic) calls libblas.so.3; when that is OpenBLAS
# it gets the kernels meshrun chose (see rt.chooseCoreType).
torch_setup() {
    go build -o "$out/meshrun" ./cmd/meshrun
    go build -o "$out/blasinfo" ./bench/blasinfo
    export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-$("$out/blasinfo" -coretype)}
    "$out/blasinfo"
    /usr/bin/python3 bench/torch_blas.py
}

# meshrun THREADS FILE LOG trains FILE (in $out) with THREADS threads.
meshrun() {
    GOMAXPROCS=$1 MESHRUN_BLAS_THREADS=$1 "$out/meshrun" train "$out/$2" --log "$3" >/dev/null
}

# torch_env THREADS CMD... runs CMD with PyTorch's threads pinned.
torch_env() {
    local th=$1
    shift
    OMP_NUM_THREADS=$th OPENBLAS_NUM_THREADS=$th OMP_WAIT_POLICY=PASSIVE "$@"
}

# compare_rounds MESH_NAME GOAL: for each thread count, ROUNDS rounds of
# the three runs in an order rotating every round; prints each round's
# medians and ratios, then meshrun/PyTorch as min / median / max.
compare_rounds() {
    local mesh=$1 goal=$2 th round w a b c x y m1 mm tt
    for th in $THREADS; do
        echo "== $th thread(s): median step per run (ms) and meshrun/PyTorch per round"
        local r1=() rmesh=()
        for round in $(seq "$ROUNDS"); do
            local order=(m1 mesh t)
            order=("${order[@]:$((round % 3))}" "${order[@]:0:$((round % 3))}")
            for w in "${order[@]}"; do
                case $w in
                m1) m1=$(run_m1 "$th") ;;
                mesh) mm=$(run_mesh "$th") ;;
                t) tt=$(run_torch "$th") ;;
                esac
            done
            read -r a b c x y < <(py 'import sys; a,b,c=map(float,sys.argv[1:]); print(f"{a*1e3:.2f} {b*1e3:.2f} {c*1e3:.2f} {a/c:.3f} {b/c:.3f}")' "$m1" "$mm" "$tt")
            echo "round $round (${order[*]}): meshrun 1 device $a, $mesh $b, PyTorch $c -> $x, $y"
            r1+=("$x") rmesh+=("$y")
        done
        py '
import sys, statistics
for name, xs in (("1 device", sys.argv[2].split()), (sys.argv[4], sys.argv[3].split())):
    xs = sorted(map(float, xs))
    print(f"{sys.argv[1]} thread(s), meshrun {name} / PyTorch: min {xs[0]:.2f} median {statistics.median(xs):.2f} max {xs[-1]:.2f} ({len(xs)} rounds; goal <= {sys.argv[5]})")
' "$th" "${r1[*]}" "${rmesh[*]}" "$mesh" "$goal"
    done
}
