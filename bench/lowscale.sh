#!/usr/bin/env bash
# Times `meshrun explain --devices 4096` on the generated GPT (bench/gptsrc)
# of L = 12, 24, 48, 96 layers on [dp=64, pipeline pp=8, tp=8] and
# [dp=512, tp=8]: wall seconds and max RSS (GNU time's %e %M), the median
# over ROUNDS runs (issue 10, goal 4: < 2 s and < 1 GB at 96 layers), and
# the CPU seconds (user + system, %U + %S), which a loaded machine
# disturbs less than the wall time. With BEFORE, each round runs that
# binary and this one in turn (which goes first alternates) and the last
# columns give after/before wall seconds and CPU seconds per round as
# min/median/max.
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
# run BIN FILE: appends "seconds KB user system" to $tmp/runs.BIN's name
run() {
	/usr/bin/time -f '%e %M %U %S' -o "$tmp/t" "$2" explain --devices 4096 "$3" >/dev/null
	cat "$tmp/t" >>"$tmp/runs.$1"
}
if [ -z "${BEFORE:-}" ]; then
	printf '%-6s %6s %10s %12s %10s\n' mesh layers seconds max_RSS_MB cpu_s
else
	printf '%-6s %6s %10s %12s %10s %12s   %-28s %10s %10s   %s\n' mesh layers before_s before_MB after_s after_MB 'after/before s min/median/max' \
		before_cpu after_cpu 'after/before cpu min/median/max'
fi
cpu() { awk '{printf "%.2f\n", $3 + $4}' "$1" | median; }
# ratios COL: after/before of that column (1 wall, 3 CPU) per round, as min / median / max
ratios() {
	local r
	r=$(paste -d' ' "$tmp/runs.before" "$tmp/runs.after" | awk -v c="$1" '{b = c == 1 ? $1 : $3 + $4; a = c == 1 ? $5 : $7 + $8; printf "%.3f\n", a / b}' | sort -n)
	echo "$(echo "$r" | head -1) / $(echo "$r" | median) / $(echo "$r" | tail -1)"
}
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
			printf '%-6s %6d %10s %12d %10s\n' "$mesh" "$l" "$secs" $((kb / 1024)) "$(cpu "$tmp/runs.after")"
			continue
		fi
		bsecs=$(cut -d' ' -f1 "$tmp/runs.before" | median)
		bkb=$(cut -d' ' -f2 "$tmp/runs.before" | median)
		printf '%-6s %6d %10s %12d %10s %12d   %-28s %10s %10s   %s\n' "$mesh" "$l" "$bsecs" $((bkb / 1024)) "$secs" $((kb / 1024)) "$(ratios 1)" \
			"$(cpu "$tmp/runs.before")" "$(cpu "$tmp/runs.after")" "$(ratios 3)"
	done
done
