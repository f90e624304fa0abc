#!/usr/bin/env python3
"""Where a mesh step's CPU goes beyond the one-device step's, by category.

Two CPU profiles of BenchmarkGPTStep (or any benchmark that trains through
rt.Train), taken one after the other at GOMAXPROCS=1 so that a profile's
samples are the step's work and no rank waits on a core:

  GOMAXPROCS=1 ./X.test -test.run '^$' -test.bench GPTStep/single \
      -test.benchtime 1000x -test.cpuprofile single.prof
  GOMAXPROCS=1 ./X.test -test.run '^$' -test.bench GPTStep/mesh \
      -test.benchtime 1000x -test.cpuprofile mesh.prof
  python3 bench/meshprof.py X.test single.prof mesh.prof 1000

Each sample's stack (from `go tool pprof -traces`) is put in the first
category whose test it passes, in the order of CATEGORIES below (a
collective's reductions count as the collective's, not as kernel math);
the table gives microseconds per step on each side and the difference.
The tests match function names of package rt, so a renamed function
moves its samples to "rank loop, other": read the table next to the
profile itself.
"""
import collections
import re
import subprocess
import sys


def stacks(binary, prof):
    """Yields (seconds, frames leaf first) for every stack in prof."""
    out = subprocess.run(['go', 'tool', 'pprof', '-traces', binary, prof],
                         capture_output=True, text=True, check=True).stdout
    for block in out.split('-----------+-------------------------------------------------------'):
        lines = [l.strip() for l in block.strip().split('\n') if l.strip()]
        if not lines:
            continue
        m = re.match(r'([\d.]+)(ms|s)\s+(.*)', lines[0])
        if not m:
            continue
        secs = float(m.group(1)) * (1 if m.group(2) == 's' else 1e-3)
        yield secs, [m.group(3)] + lines[1:]


def has(*names):
    return lambda s, leaf: any(n in s for n in names)


DISPATCH = ('mapaccess', 'matchH2', 'aeshash', 'rt.(*CPU).Launch', 'rt.(*CPU).Compute',
            'rt.(*CPU).compute', 'LaunchResults', 'slices.Equal', 'rt.numel')
CATEGORIES = [
    ('GC background', lambda s, leaf: 'gcBgMarkWorker' in s or 'bgsweep' in s or 'bgscavenge' in s),
    ('outside the rank loop (trainer, scheduler)', lambda s, leaf: 'execution).step' not in s),
    ('allocation and GC assists', has('runtime.mallocgc', 'gcAssist', 'wbBufFlush')),
    ('collectives', has('collectiveStep')),
    ('freeing (release, arena put, holders)', has('rt.(*CPU).Free', 'holds.', 'dropOne', 'InProc).Release')),
    ('taking outputs from the arena', lambda s, leaf: 'rt.clearData' not in s and any(
        n in s for n in ('rt.(*hostPool).take', 'hostPool).reuse', 'hostPool).zeroed', 'uninitialised', 'rt.header'))),
    ('GEMM (BLAS)', has('cgocall', '_Cfunc', 'OpenBLAS')),
    ('kernel dispatch (Launch, op table, shape checks)', lambda s, leaf: (
        'rt.(*CPU).Launch' in s or 'LaunchResults' in s) and any(n in leaf for n in DISPATCH)),
    ('kernel math and copies', has('rt.(*CPU).Launch', 'LaunchResults')),
    ('sources (feeds)', has('execution).source')),
    ('timeline (clock, events)', has('execution).record', 'execution).now', 'nanotime', 'layRing')),
    ('holding results, shape checks', has('execution).hold', 'checkShapes')),
    ('rank loop, other', lambda s, leaf: True),
]


def categorise(frames):
    s = ' '.join(frames)
    for name, test in CATEGORIES:
        if test(s, frames[0]):
            return name


def main():
    binary, single, mesh, steps = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    sides = []
    for prof in (single, mesh):
        c = collections.Counter()
        for secs, frames in stacks(binary, prof):
            c[categorise(frames)] += secs
        sides.append(c)
    us = lambda c, k: c.get(k, 0) / steps * 1e6
    print('%-52s %10s %10s %10s' % ('category', 'single µs', 'mesh µs', 'extra µs'))
    for name, _ in sorted(CATEGORIES, key=lambda c: -us(sides[1], c[0])):
        a, b = us(sides[0], name), us(sides[1], name)
        print('%-52s %10.0f %10.0f %+10.0f' % (name, a, b, b - a))
    a, b = sum(sides[0].values()) / steps * 1e6, sum(sides[1].values()) / steps * 1e6
    print('%-52s %10.0f %10.0f %+10.0f' % ('total', a, b, b - a))


if __name__ == '__main__':
    main()
