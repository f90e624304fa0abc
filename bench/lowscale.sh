#!/usr/bin/env bash
# Times `meshrun explain --devices 4096` on the generated GPT (bench/gptsrc)
# of L = 12, 24, 48, 96 layers on [dp=64, pipeline pp=8, tp=8] and
# [dp=512, tp=8]: wall seconds and max RSS (GNU time's %e %M), the median
# over ROUNDS runs (issue 10, goal 4: < 2 s and < 1 GB at 96 layers).
#
#   bench/lowscale.sh                 # the meshrun of this checkout
#   MESHRUN=/tmp/before/meshrun bench/lowscale.sh
#   ROUNDS=5 LAYERS="12 96" bench/lowscale.sh
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
printf '%-6s %6s %10s %12s\n' mesh layers seconds max_RSS_MB
for mesh in 3d 2d; do
	for l in $LAYERS; do
		"$tmp/gptgen" -layers "$l" -mesh "$mesh" >"$tmp/gpt.mesh"
		: >"$tmp/runs"
		for r in $(seq "$ROUNDS"); do
			/usr/bin/time -f '%e %M' -o "$tmp/t" "$MESHRUN" explain --devices 4096 "$tmp/gpt.mesh" >/dev/null
			cat "$tmp/t" >>"$tmp/runs"
		done
		secs=$(cut -d' ' -f1 "$tmp/runs" | sort -n | sed -n "$(((ROUNDS + 1) / 2))p")
		kb=$(cut -d' ' -f2 "$tmp/runs" | sort -n | sed -n "$(((ROUNDS + 1) / 2))p")
		printf '%-6s %6d %10s %12d\n' "$mesh" "$l" "$secs" $((kb / 1024))
	done
done
