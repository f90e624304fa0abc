# Sourced by bench/abstep.sh and bench/abmesh.sh: the alternating rounds
# of a before/after comparison of two test binaries.
#   ab_rounds ROUNDS OLD NEW FN
# calls FN WHICH ROUND BIN for old and new in each round, the order
# flipping every round (old first in odd rounds), so that neither binary
# always runs on the machine as the other left it.
ab_rounds() {
    local rounds=$1 old=$2 new=$3 fn=$4 i w
    for i in $(seq "$rounds"); do
        local order=(old new)
        if (( i % 2 == 0 )); then order=(new old); fi
        for w in "${order[@]}"; do
            if [[ $w == new ]]; then "$fn" new "$i" "$new"; else "$fn" old "$i" "$old"; fi
        done
    done
}
