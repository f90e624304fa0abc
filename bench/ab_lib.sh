# Sourced by bench/abstep.sh and bench/abmesh.sh: the alternating rounds
# of a before/after comparison of two test binaries.
#   ab_rounds ROUNDS OLD NEW FN
# calls FN WHICH ROUND BIN for old and new in each round, the order
# flipping every round (old first in odd rounds), so that neither binary
# always runs on the machine as the other left it.
#
# BUSY=1 keeps one core busy with a shell loop while the rounds run (the
# last core when the machine has several): a machine shared with another
# job, reproducibly, to compare how the binaries wait when the process
# does not have every core it thinks it has. The loop ends with the
# rounds, or with this script however it ends (it checks that the script
# is still there).
ab_rounds() {
    local rounds=$1 old=$2 new=$3 fn=$4 i w busy=
    if [[ ${BUSY:-0} == 1 ]]; then
        taskset -c "$(( $(nproc) - 1 ))" sh -c "while kill -0 $$ 2>/dev/null; do :; done" &
        busy=$!
    fi
    for i in $(seq "$rounds"); do
        local order=(old new)
        if (( i % 2 == 0 )); then order=(new old); fi
        for w in "${order[@]}"; do
            if [[ $w == new ]]; then "$fn" new "$i" "$new"; else "$fn" old "$i" "$old"; fi
        done
    done
    if [[ -n $busy ]]; then kill "$busy"; fi
}
