#!/usr/bin/env bash
# Times `meshrun explain --devices 4096` on the generated GPT (bench/gptsrc)
# of L = 12, 24, 48, 96 layers on [dp=64, pipeline pp=8, tp=8] and
# [dp=512, tp=8]: wall seconds and max RSS (GNU time's %e %M), the median
# over ROUNDS runs (issue 10, goal 4: < 2 s and < 1 GB at 96 layers).
# With BEFORE, each round runs that binary and this one in turn (which
# goes first alternates) and the last columns give after/before seconds
# per round as min/median/max.
#
#   bench/lowscale.sh                 # the meshrun of this checkout
#   MESHRUN=/tmp/before/meshrun bench/lowscale.sh
#   ROUNDS=5 LAYERS="12 96" bench/lowscale.sh
#   BEFORE=/tmp/before/meshrun ROUNDS=5 LAYERS=96 bench/lowscale.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
LAYERS=${LAYERS:-"12 24 48 96"}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ -z "${MESHRUN:-}" ]; then
	go build -o "$tmp/meshrun" ./cmd/meshrun
	MESHRUN=$tmp/meshrun
fi
go build -o "$tmp/gptgen" ./bench/gptgen
if [ ! -x /usr/bin/time ]; then
	echo "lowscale: needs GNU time at /usr/bin/time for the RSS" >&2
	exit 1
fi
median() { sort -n | sed -n "$(((ROUNDS + 1) / 2))p"; }
# run BIN FILE: appends "seconds KB" to $tmp/runs.BIN's name
run() {
	/usr/bin/time -f '%e %M' -o "$tmp/t" "$2" explain --devices 4096 "$3" >/dev/null
	cat "$tmp/t" >>"$tmp/runs.$1"
}
if [ -z "${BEFORE:-}" ]; then
	printf '%-6s %6s %10s %12s\n' mesh layers seconds max_RSS_MB
else
	printf '%-6s %6s %10s %12s %10s %12s   %s\n' mesh layers before_s before_MB after_s after_MB 'after/before s min/median/max'
fi
for mesh in 3d 2d; do
	for l in $LAYERS; do
		"$tmp/gptgen" -layers "$l" -mesh "$mesh" >"$tmp/gpt.mesh"
		rm -f "$tmp"/runs.*
		for r in $(seq "$ROUNDS"); do
			if [ -z "${BEFORE:-}" ]; then
				run after "$MESHRUN" "$tmp/gpt.mesh"
			elif [ $((r % 2)) -eq 1 ]; then
				run before "$BEFORE" "$tmp/gpt.mesh"
				run after "$MESHRUN" "$tmp/gpt.mesh"
			else
				run after "$MESHRUN" "$tmp/gpt.mesh"
				run before "$BEFORE" "$tmp/gpt.mesh"
			fi
		done
		secs=$(cut -d' ' -f1 "$tmp/runs.after" | median)
		kb=$(cut -d' ' -f2 "$tmp/runs.after" | median)
		if [ -z "${BEFORE:-}" ]; then
			printf '%-6s %6d %10s %12d\n' "$mesh" "$l" "$secs" $((kb / 1024))
			continue
		fi
		bsecs=$(cut -d' ' -f1 "$tmp/runs.before" | median)
		bkb=$(cut -d' ' -f2 "$tmp/runs.before" | median)
		ratios=$(paste -d' ' "$tmp/runs.before" "$tmp/runs.after" | awk '{printf "%.3f\n", $3 / $1}' | sort -n)
		lo=$(echo "$ratios" | head -1)
		hi=$(echo "$ratios" | tail -1)
		med=$(echo "$ratios" | median)
		printf '%-6s %6d %10s %12d %10s %12d   %s / %s / %s\n' "$mesh" "$l" "$bsecs" $((bkb / 1024)) "$secs" $((kb / 1024)) "$lo" "$med" "$hi"
	done
done
