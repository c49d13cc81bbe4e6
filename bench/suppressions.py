"""The cost of suppressions in the exit report: CPython run under leak-report without
suppressions and with files of 1,000 patterns (LeakSanitizer's, and valgrind's for definitely
lost blocks as valgrind generates them and for every class), interleaved, the
median wall time of each and its difference to the run without. With --base-lib, the same
library built without suppressions support (e.g. main's) runs too, to show that nothing is paid
when no suppression is given."""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

WORK = "import json, re, collections, decimal, email.parser; d = {str(i): [i] * 3 for i in range(20000)}; json.dumps(d)"


def run(lib, opts, python, report):
    env = dict(os.environ, LD_PRELOAD=lib, DMEM_OPTS=opts + ",report-file=" + report)
    t = time.monotonic()
    done = subprocess.run([python, "-c", WORK], env=env, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, check=False)
    took = time.monotonic() - t
    with open(report) as f:
        if "leak summary" not in f.read():
            sys.exit("no report from %s %s:\n%s" % (lib, opts, done.stderr.decode(errors="replace")))
    return took


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--base-lib")
    ap.add_argument("--python", default="/usr/bin/python3")
    ap.add_argument("--rounds", type=int, default=9)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="dmem-supp-bench-")
    lsan = os.path.join(tmp, "lsan.supp")
    with open(lsan, "w") as f:
        for i in range(1000):
            f.write("leak:vendor_module_%d_init\n" % i)
    vg = os.path.join(tmp, "vg.supp")
    with open(vg, "w") as f:
        for i in range(1000):
            f.write("{\n   v%d\n   Memcheck:Leak\n   match-leak-kinds: definite\n   fun:malloc\n"
                    "   ...\n   fun:vendor_function_%d\n}\n" % (i, i))
    # Without match-leak-kinds, a block applies to every class, still reachable too.
    vg_all = os.path.join(tmp, "vg_all.supp")
    with open(vg_all, "w") as f:
        for i in range(1000):
            f.write("{\n   v%d\n   Memcheck:Leak\n   fun:malloc\n   ...\n   fun:vendor_function_%d\n}\n"
                    % (i, i))
    one = os.path.join(tmp, "one.supp")
    with open(one, "w") as f:
        f.write("leak:vendor_module_0_init\n")
    report = "leak-report"
    listed = "leak-report,leak-show=all"
    rows = [("no suppressions", a.lib, report),
            ("1 leak: pattern", a.lib, report + ",suppressions=" + one),
            ("1,000 leak: patterns", a.lib, report + ",suppressions=" + lsan),
            ("1,000 valgrind blocks", a.lib, report + ",suppressions=" + vg),
            ("1,000 valgrind, all kinds", a.lib, report + ",suppressions=" + vg_all),
            ("leak-show=all, none", a.lib, listed),
            ("leak-show=all, 1,000 leak:", a.lib, listed + ",suppressions=" + lsan),
            ("leak-show=all, 1,000 valgrind", a.lib, listed + ",suppressions=" + vg)]
    if a.base_lib:
        rows.insert(0, ("base library, no suppressions", a.base_lib, report))
    times = {name: [] for name, _, _ in rows}
    bare = []
    for _ in range(a.rounds):
        t = time.monotonic()
        subprocess.run([a.python, "-c", WORK], check=True)
        bare.append(time.monotonic() - t)
        for name, lib, opts in rows:
            times[name].append(run(lib, opts, a.python, os.path.join(tmp, "report")))
    base = statistics.median(times["no suppressions"])
    base_all = statistics.median(times["leak-show=all, none"])
    print("CPython (%s), median of %d interleaved runs; bare run %.3f s" % (a.python, a.rounds,
                                                                        statistics.median(bare)))
    print("%-32s %9s %12s" % ("leak-report with", "wall", "vs none"))
    print("(leak-show=all rows against leak-show=all without suppressions)")
    for name, _, _ in rows:
        m = statistics.median(times[name])
        ref = base_all if name.startswith("leak-show=all") else base
        print("%-32s %8.3fs %+10.1f ms" % (name, m, 1000 * (m - ref)))


main()
