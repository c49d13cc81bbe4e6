"""Instructions, not seconds: each workload bare and under each library inside valgrind's
callgrind, which counts every instruction the process executes. The counts do not move with
the machine's load, as wall times do on a shared machine, so a change of a few instructions per
allocation shows, and two builds of the library compare exactly.

    python3 bench/callgrind.py --lib LIBDMEM --cxxmap BENCH_CXXMAP [--only NAME]
                               [--also NAME=LIB[@OPTS] ...] [--opts OPTS]
                               [--python-rounds N] [--cxxmap-rounds N]

The workloads run single-threaded so that nothing depends on how threads interleave: `python`
is bench/alloc_heavy.py with PYTHONMALLOC=malloc, `cxxmap` is c-fixtures/bench_cxxmap.cpp with
one thread. For each it prints the instructions of the whole run, the ratio to the bare run, the
allocation calls the bare run made (malloc, calloc, realloc, free and the aligned forms,
counted by callgrind) and the instructions each call cost above bare; then, for each pair of
libraries, the difference per call. `--opts` is every library's DMEM_OPTS; `@OPTS` after one
given with `--also` is that one's (so `--also counts=target/release/libdmem.so@count-allocs`
sets the same build beside itself with an option on).
"""

import argparse
import os
import subprocess
import sys
import tempfile

# The python3 the overhead bench runs: the program itself, not a wrapper script (pyenv's shims)
# that would exec it outside callgrind's view.
from harness import find_python

# The allocation functions whose calls are counted, under the names glibc exports them by.
ALLOC_FUNCTIONS = {
    "malloc", "__libc_malloc", "calloc", "__libc_calloc", "realloc", "__libc_realloc",
    "free", "__libc_free", "cfree", "posix_memalign", "memalign", "__libc_memalign",
    "aligned_alloc", "valloc", "pvalloc", "reallocarray",
}


def callgrind(cmd, env, out):
    """Runs cmd under callgrind; returns (instructions, allocation calls)."""
    full = ["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out,
            "--compress-strings=no", "--compress-pos=no"] + cmd
    r = subprocess.run(full, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        sys.exit("callgrind.py: %s failed:\n%s" % (" ".join(cmd), r.stderr[-2000:]))
    total, calls, callee = None, 0, None
    with open(out) as f:
        for line in f:
            if line.startswith("summary:") or line.startswith("totals:"):
                total = int(line.split()[1])
            elif line.startswith("cfn="):
                callee = line[4:].strip()
            elif line.startswith("calls=") and callee in ALLOC_FUNCTIONS:
                calls += int(line[6:].split()[0])
    os.unlink(out)
    if total is None:
        sys.exit("callgrind.py: no total in callgrind's output for %s" % " ".join(cmd))
    return total, calls


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True, help="the libdmem.so of this build")
    ap.add_argument("--cxxmap", required=True, help="the bench_cxxmap fixture")
    ap.add_argument("--also", action="append", default=[], metavar="NAME=LIB[@OPTS]",
                    help="another build of the library (or this one with other options)")
    ap.add_argument("--only", choices=["python", "cxxmap"])
    ap.add_argument("--python-rounds", type=int, default=1)
    ap.add_argument("--cxxmap-rounds", type=int, default=2000)
    ap.add_argument("--opts", default="", help="DMEM_OPTS for every library")
    a = ap.parse_args()

    libs = [("dmem", a.lib, a.opts)]
    for x in a.also:
        name, rest = x.split("=", 1)
        lib, _, opts = rest.partition("@")
        libs.append((name, lib, opts or a.opts))
    here = os.path.dirname(os.path.abspath(__file__))
    workloads = {
        "python": ([find_python(), os.path.join(here, "alloc_heavy.py"), str(a.python_rounds)],
                   # A fixed hash seed: the same dicts and sets, so the same instructions, each run.
                   {"PYTHONMALLOC": "malloc", "PYTHONHASHSEED": "0"}),
        "cxxmap": ([a.cxxmap, str(a.cxxmap_rounds), "1"], {}),
    }
    tmp = tempfile.mkdtemp(prefix="dmem-callgrind-")
    for name, (cmd, extra) in workloads.items():
        if a.only and a.only != name:
            continue
        base = dict(os.environ, **extra)
        for var in ("LD_PRELOAD", "DMEM_OPTS"):
            base.pop(var, None)
        bare, calls = callgrind(cmd, base, os.path.join(tmp, "bare.out"))
        print("%s: %s allocation calls; instructions of the whole run:" % (name, format(calls, ",")))
        print("  %-16s %16s %8s %16s" % ("library", "instructions", "x bare", "per call above"))
        print("  %-16s %16s %8s %16s" % ("bare", format(bare, ","), "1.000", ""))
        counts = {}
        for lib_name, lib, opts in libs:
            env = dict(base, LD_PRELOAD=os.path.abspath(lib), DMEM_OPTS=opts)
            total, _ = callgrind(cmd, env, os.path.join(tmp, lib_name + ".out"))
            counts[lib_name] = total
            print("  %-16s %16s %8.3f %16.1f" % (lib_name, format(total, ","), total / bare,
                                                 (total - bare) / max(calls, 1)))
        names = [n for n, _, _ in libs]
        for i, x in enumerate(names):
            for y in names[i + 1:]:
                d = counts[y] - counts[x]
                print("  %s - %s: %+d instructions, %+.2f per call, %+.3f%% of %s" % (
                    y, x, d, d / max(calls, 1), 100.0 * d / counts[x], x))
    os.rmdir(tmp)


if __name__ == "__main__":
    main()
