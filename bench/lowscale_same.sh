#!/usr/bin/env bash
# Checks that this checkout prints and encodes byte for byte what another
# revision (BEFORE_REV, default main) does: `meshrun explain` (text,
# --json, --dump-after all), `meshrun trace --json --clock model` and the
# gob encoding of the lowered plan (bench/lowscalegob) of every .mesh file
# under examples/ and lang/testdata/ (error files: the errors), and
# explain, --json and the plan of the generated GPT (bench/gptsrc) of
# LAYERS layers on both of bench/lowscale.sh's meshes at 4096 devices.
# Both sides are built here; stdout, stderr and the exit code must match.
# It prints one line per difference and a count, and fails on any.
#
#   bench/lowscale_same.sh
#   BEFORE_REV=d54b39e LAYERS="4 96" bench/lowscale_same.sh
set -euo pipefail
cd "$(dirname "$0")/.."
REV=${BEFORE_REV:-main}
LAYERS=${LAYERS:-"4 96"}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/src" "$tmp/before" "$tmp/after" "$tmp/gpt"
git archive "$REV" | tar -x -C "$tmp/src"
# the gob tool only uses lower's and plan's public API: the same source on both sides
rm -rf "$tmp/src/bench/lowscalegob"
cp -r bench/lowscalegob "$tmp/src/bench/"
(cd "$tmp/src" && go build -o "$tmp/before/meshrun" ./cmd/meshrun && go build -o "$tmp/before/gob" ./bench/lowscalegob)
go build -o "$tmp/after/meshrun" ./cmd/meshrun
go build -o "$tmp/after/gob" ./bench/lowscalegob
go build -o "$tmp/gptgen" ./bench/gptgen
for l in $LAYERS; do
	"$tmp/gptgen" -layers "$l" -mesh 3d >"$tmp/gpt/gpt${l}_3d.mesh"
	"$tmp/gptgen" -layers "$l" -mesh 2d >"$tmp/gpt/gpt${l}_2d.mesh"
done
diffs=0 runs=0 ok=0
# same ARGS...: runs both sides' meshrun (or gob, when ARGS[0] is "gob") and compares
same() {
	local side out
	for side in before after; do
		out=$tmp/$side/out
		if [ "$1" = gob ]; then
			"$tmp/$side/gob" "${@:2}" >"$out.1" 2>"$out.2" && echo 0 >"$out.rc" || echo $? >"$out.rc"
		else
			"$tmp/$side/meshrun" "$@" >"$out.1" 2>"$out.2" && echo 0 >"$out.rc" || echo $? >"$out.rc"
		fi
	done
	runs=$((runs + 1))
	if [ "$(cat "$tmp/after/out.rc")" = 0 ] && [ -s "$tmp/after/out.1" ]; then
		ok=$((ok + 1))
	fi
	local k
	for k in 1 2 rc; do
		if ! cmp -s "$tmp/before/out.$k" "$tmp/after/out.$k"; then
			echo "DIFFERS ($k): $*"
			diffs=$((diffs + 1))
			return
		fi
	done
}
while IFS= read -r f; do
	same explain "$f"
	same explain --json "$f"
	same explain --dump-after all "$f"
	same trace --json --clock model "$f"
	same gob -devices 64 "$f"
done < <(find examples lang/testdata -name '*.mesh' | sort)
for f in "$tmp"/gpt/*.mesh; do
	same explain --devices 4096 "$f"
	same explain --json --devices 4096 "$f"
	same gob -devices 4096 "$f"
done
echo "$runs runs ($ok exit 0 with output), $diffs differ (before: $REV, after: this checkout)"
[ "$diffs" -eq 0 ]
