#!/usr/bin/env bash
# Times `meshrun plan --devices 4096` on two 96-layer GPTs (issue 12: "a
# 96-layer GPT on 4096 devices plans in under a minute"), links
# 8:1:300,*:10:25 (8 devices per node), top 3, no time limit: wall and
# CPU seconds, max RSS, and the search's own counts (candidates, folded
# lowerings, candidates priced exactly), ROUNDS runs each, with the load
# average at the start of each run (the machine is shared).
#
#   narrow: bench/gptgen -layers 96 -mesh 3d (width 256, 8 micro-batches
#           only: its reshapes name the micro-batch; 3724 candidates)
#   wide:   planner's test GPT (width 2048, 16 heads, 1024 tokens, batch
#           1536 with -1 reshapes: every micro-batch count; 28096)
#
#   bench/plan96.sh
#   ROUNDS=3 MODELS=narrow bench/plan96.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-1}
MODELS=${MODELS:-"narrow wide"}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/meshrun" ./cmd/meshrun
go run ./bench/gptgen -layers 96 -mesh 3d >"$tmp/narrow.mesh"
PLANNER_GPT_OUT="$tmp/wide.mesh" PLANNER_GPT_LAYERS=96 PLANNER_GPT_BATCH=1536 \
	go test ./planner -run TestWriteGPTForManualRuns -count=1 >/dev/null
printf '%-7s %5s %8s %8s %8s  %s\n' model load wall_s cpu_s rss_MB 'search'
for round in $(seq "$ROUNDS"); do
	for m in $MODELS; do
		load=$(cut -d' ' -f1 /proc/loadavg)
		/usr/bin/time -f '%e %U %S %M' -o "$tmp/t" "$tmp/meshrun" plan "$tmp/$m.mesh" --devices 4096 \
			--links '8:1:300,*:10:25' --top 3 >"$tmp/out" 2>&1 || true
		read -r wall user sys kb <"$tmp/t"
		cpu=$(awk -v u="$user" -v s="$sys" 'BEGIN { print u + s }')
		what=$(grep -E '^(folded|searched)' "$tmp/out" | sed -E 's/ \(.*//' | tr '\n' ' ')
		best=$(awk '$1 == "1" {print $2, $3, $4, $5, $6, $7, $8, $9}' "$tmp/out" | head -1)
		printf '%-7s %5s %8s %8s %8d  %s| best: %s\n' "$m" "$load" "$wall" "$cpu" $((kb / 1024)) "$what" "$best"
	done
done
