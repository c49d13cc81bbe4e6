#!/usr/bin/env python3
"""`dmem leaks` of a core against `cat` of the same core, in one run.

Runs, in each of ROUNDS rounds, `cat CORE >/dev/null` and then `DMEM leaks PROG CORE` for each
DMEM given (two builds side by side), and prints for each the median and minimum of the wall time,
the median of the CPU time (user and system, the threads summed) and the median wall time as a
multiple of `cat`'s. Rounds are interleaved so that the machine's load moves every command alike;
the core should be in the page cache (read it once first). Answers are not compared here: check
them with `cmp` on each build's output.

    bench/cat_ratio.py PROG CORE ROUNDS DMEM [DMEM...]
"""

import resource
import statistics
import subprocess
import sys
import time


def timed(cmd):
    """Wall and CPU seconds of one run of cmd, its output thrown away."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return wall, cpu


def main():
    if len(sys.argv) < 5:
        sys.exit(__doc__.strip().splitlines()[-1].strip())
    prog, core, rounds, builds = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
    commands = {"cat": ["cat", core]}
    commands.update({b: [b, "leaks", prog, core] for b in builds})
    walls = {name: [] for name in commands}
    cpus = {name: [] for name in commands}
    for _ in range(rounds):
        for name, cmd in commands.items():
            wall, cpu = timed(cmd)
            walls[name].append(wall)
            cpus[name].append(cpu)
    cat = statistics.median(walls["cat"])
    for name in commands:
        wall = statistics.median(walls[name])
        print(
            f"{name:30s} wall median {wall * 1e3:7.1f} ms, min {min(walls[name]) * 1e3:7.1f} ms, "
            f"cpu median {statistics.median(cpus[name]) * 1e3:7.1f} ms, {wall / cat:.2f} x cat"
        )


if __name__ == "__main__":
    main()
