#!/usr/bin/env bash
# Before/after of the mesh benchmarks: two test binaries of ./bench (go
# test -c -o OLD.test ./bench on the old tree, and on the new one), run
# alternately — the order flips every round — and each benchmark line
# summarised as min / median / max over the runs:
#   TrainStep: each binary's mesh/single (a run's median over its rounds),
#     new/old of the median mesh step and of the median one-device step
#     of the two runs of a round, and
#     each binary's CPU-time mesh/single (a run's median; "-" from a
#     binary whose benchmark does not report it), and new/old of the
#     median CPU per step, mesh and one device ("-" unless both report it);
#   DPStepSplit: each binary's "comm alone/ideal" and mesh/1 device (a
#     run's medians; the benchmark's warm-up run of one round left out).
#   bench/abmesh.sh OLD.test NEW.test [ROUNDS=5] [BENCH=TrainStep] [BENCHTIME=3x]
# GOMAXPROCS and DP_MAX pass through; BUSY=1 keeps a core busy (ab_lib.sh).
set -euo pipefail
old=$(realpath "$1") new=$(realpath "$2")
rounds=${3:-5} bench=${4:-TrainStep} bt=${5:-3x}
cd "$(dirname "$0")"
rows=$(mktemp)
trap 'rm -f "$rows"' EXIT
source ./ab_lib.sh
# one WHICH ROUND BIN: a run's summary lines, labelled
one() {
    "$3" -test.run '^$' -test.bench "$bench" -test.benchtime "$bt" -test.v 2>&1 |
        grep -E 'median step mesh|comm alone/ideal' | grep -v '(1 rounds' | sed "s/^/$1 $2 /" >>"$rows" || true
}
ab_rounds "$rounds" "$old" "$new" one
/usr/bin/python3 - "$rows" <<'PY'
import collections, re, statistics as st, sys
train = collections.defaultdict(lambda: collections.defaultdict(dict))
dp = collections.defaultdict(lambda: collections.defaultdict(list))
def us(s):
    m = re.match(r'([\d.]+)(ns|µs|ms|s)$', s)
    return float(m.group(1)) * {'ns': 1e-3, 'µs': 1, 'ms': 1e3, 's': 1e6}[m.group(2)]
for line in open(sys.argv[1]):
    w, i = line.split()[:2]
    m = re.search(r': (\S+) on (\[.*?\]) .*median step mesh (\S+) / 1 device (\S+); mesh/single per round min [\d.]+ median ([\d.]+)', line)
    if m:
        c = re.search(r'CPU per step mesh/single per round min [\d.]+ median ([\d.]+)', line)
        a = re.search(r'median CPU per step mesh ([\d.]+[nµm]?s) / 1 device ([\d.]+[nµm]?s)', line)
        train[m.group(1) + ' ' + m.group(2)][w][i] = (us(m.group(3)), float(m.group(5)), float(c.group(1)) if c else None, us(m.group(4)),
            (us(a.group(1)), us(a.group(2))) if a else None)
        continue
    m = re.search(r'\[dp=(\d+)\].*mesh/1 device min [\d.]+ median ([\d.]+).*comm alone/ideal min [\d.]+ median ([\d.]+)', line)
    if m:
        dp[int(m.group(1))][w].append((float(m.group(2)), float(m.group(3))))
f = lambda x: '%.2f / %.2f / %.2f' % (min(x), st.median(x), max(x)) if x else '-'
for k, d in train.items():
    both = sorted(set(d['old']) & set(d['new']))
    r = [d['new'][i][0] / d['old'][i][0] for i in both]
    r1 = [d['new'][i][3] / d['old'][i][3] for i in both]
    cpu = lambda w: [d[w][i][2] for i in both if d[w][i][2] is not None]
    # absolute CPU per step, new/old (both binaries must report it)
    abs_ = [i for i in both if d['old'][i][4] and d['new'][i][4]]
    cm = [d['new'][i][4][0] / d['old'][i][4][0] for i in abs_]
    cs = [d['new'][i][4][1] / d['old'][i][4][1] for i in abs_]
    print(f"{k}: mesh/single old {f([d['old'][i][1] for i in both])}, new {f([d['new'][i][1] for i in both])}; "
          f"new/old mesh step {f(r)}, one-device step {f(r1)}; CPU mesh/single old {f(cpu('old'))}, new {f(cpu('new'))}; "
          f"new/old CPU per step mesh {f(cm)}, one device {f(cs)} ({len(both)} runs each)")
for n in sorted(dp):
    d = dp[n]
    print(f"[dp={n}]: comm alone/ideal old {f([x[1] for x in d['old']])}, new {f([x[1] for x in d['new']])}; "
          f"mesh/1 device old {f([x[0] for x in d['old']])}, new {f([x[0] for x in d['new']])} ({len(d['old'])} runs each)")
PY
