"""Runs the bench workloads bare and under each tool and prints median time ratios.

Workloads:
  storm    c-fixtures/bench_storm.c: two threads malloc, realloc and free from a dozen frames deep,
           and hand blocks to each other to free.
  python   bench/alloc_heavy.py under the system python3 with PYTHONMALLOC=malloc, so every
           object allocation reaches malloc (about 7 million of them).
  cxxmap   c-fixtures/bench_cxxmap.cpp: four threads build and drop std::map<std::string, ...>
           tables, with every allocation deep inside libstdc++, and hand some to each other.

Tools, each run only when installed:
  dmem             libdmem.so preloaded, recording stacks with the cached CFI unwinder (default)
  dmem-nostacks    the same with DMEM_OPTS=no-log-allocs: headers but no stacks and no lists, which
                   tells the unwinder's share of the cost from the rest
  dmem-history     the same with DMEM_OPTS=history=4096: the free history on, each free also
                   walking its stack and writing a 208-byte event
  dmem-backtrace   the same with DMEM_OPTS=unwinder=backtrace (_Unwind_Backtrace per allocation)
  header-floor     c-fixtures/libheader_floor.c: only the 112 bytes of room in front of every
                   block, nothing written or recorded; what the layout alone costs
  heaptrack        heaptrack's preload and its interpreter process, writing its data file
  lsan             LeakSanitizer's standalone runtime preloaded, default frame-pointer unwinding
  lsan-full        the same with fast_unwind_on_malloc=0, which gives complete stacks

The figure that matters is the median wall time over several runs divided by the bare median;
next to it, for the dmem rows, the same divided by the header floor's median (what recording
costs above the layout's own cost). The CPU time (user + system of the process tree) is printed
too: on a busy machine it moves less than wall time, and heaptrack's separate interpreter process
shows up in it. The last column is the median peak resident size, in MiB, of the process.
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
LSAN_CANDIDATES = [
    "/usr/lib/x86_64-linux-gnu/liblsan.so.0",
    "/usr/lib64/liblsan.so.0",
    "/usr/lib/liblsan.so.0",
]


def find_python():
    """The distribution's python3 (built as users get it), else whatever python3 really is."""
    if os.path.exists("/usr/bin/python3"):
        return "/usr/bin/python3"
    return os.path.realpath(shutil.which("python3") or sys.executable)


def workload_options(ap):
    """The options every bench of the three workloads takes: the library, the fixtures, --only."""
    ap.add_argument("--lib", required=True, help="libdmem.so to preload")
    ap.add_argument("--storm", required=True, help="the bench_storm fixture")
    ap.add_argument("--floor", help="the libheader_floor.so fixture (the header-floor row)")
    ap.add_argument("--cxxmap", help="the bench_cxxmap fixture (the cxxmap workload)")
    ap.add_argument("--only", choices=["storm", "python", "cxxmap"], help="run one workload")


GNU_TIME = "/usr/bin/time" if os.access("/usr/bin/time", os.X_OK) else None


def run_once(argv, env, cwd):
    """Wall and CPU seconds and peak resident MiB of one run of argv (and its children).

    The peak comes from GNU time when it is installed: a process keeps the peak of the process
    it was forked from across exec, so a child of this (large) interpreter would report at least
    the interpreter's own size. Without GNU time that floor is in the figure."""
    start = time.perf_counter()
    with tempfile.TemporaryFile() as err, tempfile.NamedTemporaryFile(mode="r") as peak:
        if GNU_TIME:
            argv = [GNU_TIME, "-f", "%M", "-o", peak.name] + argv
        proc = subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=err)
        # wait4 gives this child's own usage (with the descendants it waited for), where
        # RUSAGE_CHILDREN's would add up every run so far.
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        code = os.waitstatus_to_exitcode(status)
        if code != 0:
            err.seek(0)
            text = err.read().decode(errors="replace")[-2000:]
            raise RuntimeError(f"{' '.join(argv)} exited with {code}:\n{text}")
        lines = peak.read().split() if GNU_TIME else []
        kib = int(lines[-1]) if lines else usage.ru_maxrss
    cpu = usage.ru_utime + usage.ru_stime
    return wall, cpu, kib / 1024


def tools(args, scratch):
    """(name, runs, how to wrap a command) for every tool that is installed."""
    base = dict(os.environ)
    for var in ("LD_PRELOAD", "DMEM_OPTS", "LSAN_OPTIONS", "ASAN_OPTIONS"):
        base.pop(var, None)

    def plain(argv, env):
        return argv, env

    def preload(lib, **extra):
        def wrap(argv, env):
            env = dict(env, LD_PRELOAD=lib, **extra)
            return argv, env
        return wrap

    # A relative path would be looked for from each workload's own directory.
    lib = os.path.abspath(args.lib)
    out = [("bare", args.runs, plain)]
    out.append(("dmem", args.runs, preload(lib, DMEM_OPTS="unwinder=fast")))
    out.append(("dmem-nostacks", args.runs, preload(lib, DMEM_OPTS="no-log-allocs")))
    out.append(("dmem-history", args.runs, preload(lib, DMEM_OPTS="unwinder=fast,history=4096")))
    if args.floor:
        out.append(("header-floor", args.runs, preload(args.floor)))
    if not args.quick:
        out.append(("dmem-backtrace", 1, preload(lib, DMEM_OPTS="unwinder=backtrace")))
    heaptrack = shutil.which("heaptrack")
    if heaptrack:
        def wrap_heaptrack(argv, env):
            return [heaptrack, "-o", os.path.join(scratch, "heaptrack.%p")] + argv, env
        out.append(("heaptrack", args.others, wrap_heaptrack))
    lsan = next((p for p in LSAN_CANDIDATES if os.path.exists(p)), None)
    if lsan:
        # Leaks are reported (to a file nobody reads) but do not change the exit status.
        report = os.path.join(scratch, "lsan")
        common = f"exitcode=0:log_path={report}"
        out.append(("lsan", args.others, preload(lsan, LSAN_OPTIONS=common)))
        if not args.quick:
            out.append(("lsan-full", 1, preload(lsan, LSAN_OPTIONS=common + ":fast_unwind_on_malloc=0")))
    for spec in args.also:
        name, _, lib = spec.partition("=")
        out.append((name, args.runs, preload(os.path.abspath(lib), DMEM_OPTS="unwinder=fast")))
    if args.tools:
        wanted = set(args.tools.split(",")) | {"bare"} | {s.partition("=")[0] for s in args.also}
        out = [t for t in out if t[0] in wanted]
    return base, out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    workload_options(ap)
    ap.add_argument("--runs", type=int, default=7, help="runs of bare and dmem (default 7)")
    ap.add_argument("--others", type=int, default=3, help="runs of heaptrack and lsan (default 3)")
    ap.add_argument("--quick", action="store_true",
                    help="leave out the slow single runs (dmem-backtrace, lsan-full)")
    ap.add_argument("--tools", metavar="A,B,...",
                    help="run only these tools (bare always runs), e.g. dmem,header-floor")
    ap.add_argument("--also", action="append", default=[], metavar="NAME=LIB",
                    help="add a row NAME for another build of libdmem.so, run like dmem; to compare "
                         "two builds in one interleaved run (repeatable)")
    args = ap.parse_args()
    for spec in args.also:
        name, eq, lib = spec.partition("=")
        if not eq or not name.startswith("dmem") or not os.path.isfile(lib):
            ap.error(f"--also {spec}: want NAME=LIB with NAME starting with dmem and LIB an existing file")

    python = find_python()
    workloads = [
        ("storm", [args.storm], {}),
        ("python", [python, os.path.join(HERE, "alloc_heavy.py")], {"PYTHONMALLOC": "malloc"}),
    ]
    if args.cxxmap:
        workloads.append(("cxxmap", [args.cxxmap], {}))
    if args.only:
        workloads = [w for w in workloads if w[0] == args.only]

    with tempfile.TemporaryDirectory(prefix="dmem-bench.") as scratch:
        base, tool_list = tools(args, scratch)
        print(f"# {os.uname().machine}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; "
              f"python: {python}")
        print(f"{'workload':<8}  {'tool':<15} {'runs':>4}  {'wall (median)':>13}  {'ratio':>6}  "
              f"{'/floor':>6}  {'cpu (median)':>12}  {'ratio':>6}  {'peak MiB':>8}")
        for wname, argv, extra_env in workloads:
            measure(wname, argv, extra_env, base, tool_list, scratch)


def measure(wname, argv, extra_env, base, tool_list, scratch):
    """Runs one workload under every tool and prints a line per tool. The runs are interleaved,
    one of each tool per round, so that a machine that speeds up or slows down during the bench
    moves every tool's figures alike instead of favouring whichever ran in the fast minutes."""
    commands = {}
    for tname, runs, wrap in tool_list:
        cmd, env = wrap(list(argv), dict(base, **extra_env))
        commands[tname] = (runs, cmd, env)
    times = {tname: ([], [], []) for tname in commands}
    failed = set()
    for rnd in range(max(runs for runs, _, _ in commands.values())):
        for tname, (runs, cmd, env) in commands.items():
            if rnd >= runs or tname in failed:
                continue
            try:
                w, c, rss = run_once(cmd, env, scratch)
            except RuntimeError as e:
                print(f"{wname:<8}  {tname:<15} failed: {e}", file=sys.stderr)
                failed.add(tname)
                continue
            times[tname][0].append(w)
            times[tname][1].append(c)
            times[tname][2].append(rss)
    if not times["bare"][0]:
        return  # without the bare run there is nothing to compare against; the error is printed
    bare = None
    floor = times.get("header-floor", ([],))[0]
    floor = statistics.median(floor) if floor and "header-floor" not in failed else None
    for tname, (walls, cpus, rsss) in times.items():
        if tname in failed or not walls:
            continue
        wall, cpu = statistics.median(walls), statistics.median(cpus)
        if bare is None:
            bare = (wall, cpu)
        over = f"{wall / floor:>5.2f}x" if floor and tname.startswith("dmem") else f"{'':>6}"
        print(f"{wname:<8}  {tname:<15} {len(walls):>4}  {wall:>11.2f} s  {wall / bare[0]:>5.2f}x  "
              f"{over}  {cpu:>10.2f} s  {cpu / bare[1]:>5.2f}x  {statistics.median(rsss):>8.1f}",
              flush=True)

if __name__ == "__main__":
    main()
