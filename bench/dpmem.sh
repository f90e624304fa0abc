#!/usr/bin/env bash
# Max RSS of `meshrun train` of a data-parallel MLP on [dp=N] virtual
# devices against the plan's total memory: the sum over devices of the
# peak `meshrun explain --json` reports (issue 10, goal 3: RSS <= 1.3x
# the plan's total at N = 256). Each rank holds a replica of two
# 512x1024 layers, its Adam states and its gradients (16 MiB at its
# peak), so the plan's total at N = 256 is 4 GiB.
#
#   bench/dpmem.sh                        # N=256, the meshrun of this checkout
#   N=32 ROUNDS=5 bench/dpmem.sh
#   BEFORE=/tmp/before/meshrun bench/dpmem.sh   # alternate with another binary
#
# Prints per round and binary: wall seconds, max RSS (GNU time's %M) and
# RSS / plan total; then min / median / max of the ratio per binary.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-256}
ROUNDS=${ROUNDS:-3}
STEPS=${STEPS:-3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ -z "${MESHRUN:-}" ]; then
	go build -o "$tmp/meshrun" ./cmd/meshrun
	MESHRUN=$tmp/meshrun
fi
if [ ! -x /usr/bin/time ]; then
	echo "dpmem: needs GNU time at /usr/bin/time for the RSS" >&2
	exit 1
fi
rows=$((16 * N))
cat >"$tmp/mlp.mesh" <<MESH
mesh M = [dp=$N]
input x : f32[$rows, 512] {S(0)} = normal(0, 1)
input t : f32[$rows, 512] {S(0)} = normal(0, 1)
param W1 : f32[512, 1024] {B} = normal(0, 0.02)
param W2 : f32[1024, 512] {B} = normal(0, 0.02)
param c : f32[512] {B} = zeros

train {
    loss = mse(relu(x @ W1) @ W2 + c, t)
    optimizer = adam(lr=0.001)
    steps = $STEPS
}
MESH
plan=$("$MESHRUN" explain --json --devices "$N" "$tmp/mlp.mesh" |
	python3 -c 'import json, sys; print(sum(m["peak_bytes"] for m in json.load(sys.stdin)["memory"]))')
blas=gonum
cache=$(/sbin/ldconfig -p 2>/dev/null || true) # not piped into grep -q: under pipefail that can fail
if [ "${MESHRUN_BLAS:-}" != gonum ] && [[ $cache == *libopenblas.so.0* ]]; then
	blas=openblas
fi
echo "dp=$N, $STEPS steps, BLAS $blas; plan total $((plan / 1048576)) MiB"
printf '%-8s %5s %9s %12s %9s\n' binary round seconds max_RSS_MiB RSS/plan
bins="after=$MESHRUN"
if [ -n "${BEFORE:-}" ]; then
	bins="before=$BEFORE $bins"
fi
for r in $(seq "$ROUNDS"); do
	order=$bins
	if [ $((r % 2)) -eq 0 ]; then # alternate which binary runs first
		order=$(echo "$bins" | tr ' ' '\n' | tac | tr '\n' ' ')
	fi
	for b in $order; do
		name=${b%%=*}
		bin=${b#*=}
		/usr/bin/time -f '%e %M' -o "$tmp/t" "$bin" train --timeout 30m --devices "$N" "$tmp/mlp.mesh" >/dev/null 2>"$tmp/err" ||
			{ echo "dpmem: $name failed:" >&2; tail -5 "$tmp/err" >&2; exit 1; }
		read -r secs kb <"$tmp/t"
		ratio=$(python3 -c "print(f'{$kb * 1024 / $plan:.2f}')")
		printf '%-8s %5d %9s %12d %9s\n' "$name" "$r" "$secs" $((kb / 1024)) "$ratio"
		echo "$ratio" >>"$tmp/$name"
	done
done
for b in $bins; do
	name=${b%%=*}
	sort -n "$tmp/$name" | python3 -c "
import sys
xs = [float(l) for l in sys.stdin]
n = len(xs)
med = xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2
print(f'$name: RSS / plan total min {xs[0]:.2f} median {med:.2f} max {xs[-1]:.2f} over {n} rounds')"
done
