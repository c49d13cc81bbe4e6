"""Instructions per allocation and per free, counted by callgrind, for each workload and tool.

Instruction counts do not move with the machine's load the way wall time does, so they tell a
change of work done from noise on a shared machine; they do not see cache misses, mispredicted
branches or lock waits, which the wall-time bench (bench/run.sh) does. Each workload runs once
under `valgrind --tool=callgrind` per tool, scaled down so that a run takes seconds, and the
callgrind output is read here:

- the run's total instructions, and its ratio to the bare run and to the header floor;
- allocations and frees: the calls into the entry points of the malloc family (malloc, calloc,
  realloc, the aligned ones, operator new and delete) of the object that serves them (libc bare,
  else the preloaded tool), and the instructions those calls took, callees included, per call;
- for the dmem tools, the ten functions of libdmem with the most instructions of their own (what
  callgrind_annotate lists, summed over the files inlined into each function), per allocation.

Every run checks the default tool's allocation plus free against a budget per workload
(`BUDGET`, or `--budget`) and exits with 1 when one is over.

Other builds go in the same table with `--also NAME=LIB` (run with the default row's options),
or this build with other options with `--also NAME=LIB@OPTS`; each such row's difference from
the default row is printed per allocation and free and as a share of the whole run:

    bench/instructions.sh --only python --also before=/path/to/old/libdmem.so
    bench/instructions.sh --also counts=target/release/libdmem.so@count-allocs
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

from harness import HERE, LSAN_CANDIDATES, find_python, workload_options

# A run under callgrind takes seconds to a minute or two; one that takes longer is stuck.
RUN_SECONDS = 600

# Instructions per allocation plus free of the default tool, at most: the counts measured when
# the budget was set (bench/README.md, "In instructions"; Debian 12's python3.11, glibc 2.36)
# and about 30 more, so that a change adding a few loads to the hot path shows as OVER.
BUDGET = {"storm": 850, "python": 855, "cxxmap": 800}

# The entry points, as callgrind names them (demangled).
ALLOCATING = re.compile(
    r"^(malloc|calloc|realloc|reallocarray|memalign|posix_memalign|aligned_alloc|valloc|pvalloc"
    r"|operator new(\[\])?\(.*\))$")
FREEING = re.compile(r"^(free|cfree|operator delete(\[\])?\(.*\))$")
class Profile:
    """What one callgrind output file says: the total, each function's own instructions, and
    the calls into each function with their inclusive instructions."""

    def __init__(self, path):
        self.total = 0
        self.own = {}      # (object, function) -> instructions of its own
        self.calls = {}    # (caller key, callee key) -> [calls, inclusive instructions]
        self.read(path)

    def read(self, path):
        names = {"ob": {}, "fl": {}, "fn": {}}
        obj = fn = None
        cobj = cfn = None
        pending = 0  # calls of the arc whose cost line comes next

        def name(kind, text):
            # Compressed names: "(id) name" defines an id, "(id)" refers to it.
            m = re.match(r"\((\d+)\)(?: (.*))?$", text)
            if not m:
                return text
            if m.group(2) is not None:
                names[kind][m.group(1)] = m.group(2)
            return names[kind][m.group(1)]

        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                c = line[:1]
                if c.isdigit() or c in "+-*":
                    if pending:
                        cost = int(line.split()[1])
                        arc = self.calls.setdefault(((obj, fn), (cobj or obj, cfn)), [0, 0])
                        arc[0] += pending
                        arc[1] += cost
                        pending = 0
                        cobj = None
                    else:
                        parts = line.split()
                        if len(parts) > 1:
                            key = (obj, fn)
                            self.own[key] = self.own.get(key, 0) + int(parts[1])
                    continue
                key, _, value = line.rstrip("\n").partition("=")
                if key == "ob":
                    obj = name("ob", value)
                elif key == "fn":
                    fn = name("fn", value)
                elif key == "cob":
                    cobj = name("ob", value)
                elif key == "cfn":
                    cfn = name("fn", value)
                elif key == "calls":
                    pending = int(value.split()[0])
                elif key in ("fl", "fi", "fe", "cfi", "cfl", "jfi"):
                    name("fl", value)
                elif key == "jfn":
                    name("fn", value)
                elif line.startswith("summary:"):
                    self.total = int(line.split()[1])
        if not self.total:
            self.total = sum(self.own.values())

    def entry_calls(self, pattern, server):
        """(calls, inclusive instructions) of the calls into the entry points `pattern` matches
        of the object `server` names (libc bare, else the preloaded tool), leaving out calls
        from one entry point into another there (realloc(NULL) calling malloc): each allocation
        and free of the program counts once, at the entry point that serves it."""
        calls = cost = 0
        for ((cobj, cfn), (obj, fn)), (n, ir) in self.calls.items():
            if not fn or not pattern.match(fn) or os.path.basename(obj or "") != server:
                continue
            if cobj == obj and cfn and (ALLOCATING.match(cfn) or FREEING.match(cfn)):
                continue
            calls += n
            cost += ir
        return calls, cost

    def costliest(self, object_part, count):
        mine = [(ir, fn) for (obj, fn), ir in self.own.items() if obj and object_part in obj]
        return sorted(mine, reverse=True)[:count]


def tools(args):
    """(name, environment) of every tool to run, bare first, and the names of the rows that
    preload a libdmem (whose costliest functions are listed)."""
    lib = os.path.abspath(args.lib)

    def dmem_opts(opts):
        return ",".join(o for o in (opts, args.opts) if o)

    out = [("bare", {})]
    if args.floor:
        out.append(("header-floor", {"LD_PRELOAD": os.path.abspath(args.floor)}))
    out.append(("dmem-nostacks", {"LD_PRELOAD": lib, "DMEM_OPTS": dmem_opts("no-log-allocs")}))
    out.append(("dmem", {"LD_PRELOAD": lib, "DMEM_OPTS": dmem_opts("unwinder=fast")}))
    out.append(("dmem-history", {"LD_PRELOAD": lib, "DMEM_OPTS": dmem_opts("unwinder=fast,history=4096")}))
    lsan = next((p for p in LSAN_CANDIDATES if os.path.exists(p)), None)
    if lsan:
        # No leak check at exit: it stops the world by ptrace from a cloned task, which waits
        # forever under valgrind; what is measured is the allocations' stacks, taken either way.
        out.append(("lsan", {"LD_PRELOAD": lsan, "LSAN_OPTIONS": "detect_leaks=0"}))
    if args.tools:
        wanted = set(args.tools.split(",")) | {"bare", "header-floor"}
        out = [t for t in out if t[0] in wanted]
    dmem_rows = [t[0] for t in out if t[0].startswith("dmem")]
    for name, other, opts in args.also:
        out.append((name, {"LD_PRELOAD": os.path.abspath(other),
                           "DMEM_OPTS": dmem_opts(opts if opts is not None else "unwinder=fast")}))
        dmem_rows.append(name)
    return out, dmem_rows


def run(argv, env, out_file):
    """Runs argv under callgrind. The tool's LD_PRELOAD reaches the program through valgrind,
    which adds its own preload to it."""
    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out_file] + argv
    try:
        proc = subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, check=False, timeout=RUN_SECONDS)
    except subprocess.TimeoutExpired as e:
        raise RuntimeError(f"{' '.join(cmd)} ran past {RUN_SECONDS} s") from e
    if proc.returncode != 0:
        tail = proc.stderr.decode(errors="replace")[-2000:]
        raise RuntimeError(f"{' '.join(cmd)} exited with {proc.returncode}:\n{tail}")
    return Profile(out_file)


def measure(wname, argv, extra_env, tool_list, dmem_rows, scratch, args):
    base = dict(os.environ)
    for var in ("LD_PRELOAD", "DMEM_OPTS", "LSAN_OPTIONS", "ASAN_OPTIONS"):
        base.pop(var, None)
    base.update(extra_env)
    profiles = {}
    for tname, env in tool_list:
        try:
            profiles[tname] = run(argv, dict(base, **env), os.path.join(scratch, f"{wname}.{tname}"))
        except RuntimeError as e:
            print(f"{wname:<8}  {tname:<15} failed: {e}", file=sys.stderr)
    if "bare" not in profiles:
        return True
    bare = profiles["bare"].total
    floor = profiles["header-floor"].total if "header-floor" in profiles else None
    rows = {}
    for tname, p in profiles.items():
        server = served_by(dict(tool_list)[tname])
        allocs, alloc_ir = p.entry_calls(ALLOCATING, server)
        frees, free_ir = p.entry_calls(FREEING, server)
        per_alloc = alloc_ir / allocs if allocs else 0
        per_free = free_ir / frees if frees else 0
        rows[tname] = (per_alloc, per_free, allocs)
        over = f"{p.total / floor:>6.3f}" if floor else f"{'':>6}"
        print(f"{wname:<8}  {tname:<15} {p.total / 1e6:>10.1f}  {p.total / bare:>6.3f}  {over}  "
              f"{allocs:>9}  {frees:>9}  {per_alloc:>8.1f}  {per_free:>8.1f}  {per_alloc + per_free:>8.1f}",
              flush=True)
    ok = True
    # Each other build beside this one's default row: what it adds per allocation and free.
    for name in (n for n, _, _ in args.also if n in rows and "dmem" in rows):
        d, o = rows["dmem"], rows[name]
        more = o[0] + o[1] - d[0] - d[1]
        share = 100.0 * (profiles[name].total - profiles["dmem"].total) / profiles["dmem"].total
        print(f"{wname:<8}  {name} - dmem: {more:+.1f} instructions per allocation and free, "
              f"{share:+.2f}% of dmem's whole run")
    if "dmem" in rows and "dmem-history" in rows:
        d, h = rows["dmem"], rows["dmem-history"]
        if d[0] + d[1]:
            print(f"{wname:<8}  history / default, per allocation and free: "
                  f"{(h[0] + h[1]) / (d[0] + d[1]):.3f}")
    if "dmem" in rows:
        pair = rows["dmem"][0] + rows["dmem"][1]
        budget = args.budget.get(wname)
        if budget is not None:
            verdict = "within" if pair <= budget else "OVER"
            ok = pair <= budget
            print(f"{wname:<8}  budget: {pair:.1f} instructions per allocation and free, "
                  f"{verdict} the budget of {budget}")
    if args.top:
        show_costliest(wname, profiles, rows, [t for t in dmem_rows if t in profiles],
                       {t: served_by(env) for t, env in tool_list}, args.top)
    return ok


def served_by(env):
    """The file name of the object that serves a tool's allocations: its preload, else libc."""
    return os.path.basename(os.path.realpath(env.get("LD_PRELOAD", "/lib/x86_64-linux-gnu/libc.so.6")))


def show_costliest(wname, profiles, rows, dmem_rows, objects, count):
    """The libdmem functions with the most instructions of their own, per allocation, for each
    row that preloads a libdmem, side by side: the `count` costliest of each, costliest first."""
    dmem_tools = [t for t in dmem_rows if rows[t][2]]
    if not dmem_tools:
        return
    per_alloc = {}
    for t in dmem_tools:
        for _, fn in profiles[t].costliest(objects[t], count):
            per_alloc.setdefault(fn, {})
    for fn, cells in per_alloc.items():
        for t in dmem_tools:
            own = sum(ir for (obj, f), ir in profiles[t].own.items()
                      if f == fn and obj and objects[t] in obj)
            cells[t] = own / rows[t][2]
    order = sorted(per_alloc, key=lambda fn: -max(per_alloc[fn].values()))
    order = [fn for fn in order if max(per_alloc[fn].values()) >= 0.05]
    print(f"{wname:<8}  the costliest functions of libdmem, instructions of their own per allocation:")
    print("          " + "".join(f"{t:>15}" for t in dmem_tools) + "  function")
    for fn in order:
        print("          " + "".join(f"{per_alloc[fn][t]:>15.1f}" for t in dmem_tools) + "  " + fn[:90])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    workload_options(ap)
    ap.add_argument("--tools", metavar="A,B,...",
                    help="run only these tools (bare and header-floor always run)")
    ap.add_argument("--also", action="append", default=[], metavar="NAME=LIB[@OPTS]",
                    help="add a row NAME for another build of libdmem.so (or this one), run like "
                         "dmem or with DMEM_OPTS=OPTS, and its difference from dmem (repeatable)")
    ap.add_argument("--opts", default="", metavar="OPTS",
                    help="DMEM_OPTS added to every row that preloads a libdmem")
    ap.add_argument("--top", type=int, default=10, help="costliest functions of libdmem to list (0: none)")
    ap.add_argument("--budget", metavar="W=N,...",
                    help="fail unless the default tool's allocation plus free takes at most N "
                         f"instructions on workload W (default: {BUDGET})")
    ap.add_argument("--keep", metavar="DIR", help="keep the callgrind files in DIR")
    args = ap.parse_args()
    if not shutil.which("valgrind"):
        sys.exit("instructions.py: valgrind is not installed (tests/setup.sh installs it)")
    also = []
    for spec in args.also:
        name, eq, rest = spec.partition("=")
        lib, at, opts = rest.partition("@")
        if not eq or not name or not os.path.isfile(lib):
            ap.error(f"--also {spec}: want NAME=LIB[@OPTS] with LIB an existing file")
        if name in ("bare", "header-floor", "dmem", "dmem-nostacks", "dmem-history", "lsan"):
            ap.error(f"--also {spec}: {name} names a row already")
        also.append((name, lib, opts if at else None))
    args.also = also
    if args.budget:
        try:
            given = {w: float(n) for w, _, n in (s.partition("=") for s in args.budget.split(","))}
        except ValueError:
            ap.error(f"--budget {args.budget}: want W=N,... with N a number")
        args.budget = dict(BUDGET, **given)
    else:
        args.budget = BUDGET

    python = find_python()
    # Scaled down from bench/run.sh's workloads so that each callgrind run takes seconds; the
    # hash seed is fixed so that two runs of CPython do the same work.
    workloads = [
        ("storm", [args.storm, "200000"], {}),
        ("python", [python, os.path.join(HERE, "alloc_heavy.py"), "1"],
         {"PYTHONMALLOC": "malloc", "PYTHONHASHSEED": "0"}),
    ]
    if args.cxxmap:
        workloads.append(("cxxmap", [args.cxxmap, "4000"], {}))
    if args.only:
        workloads = [w for w in workloads if w[0] == args.only]

    with tempfile.TemporaryDirectory(prefix="dmem-instructions.") as scratch:
        where = args.keep or scratch
        os.makedirs(where, exist_ok=True)
        tool_list, dmem_rows = tools(args)
        print(f"# instructions counted by callgrind; python: {python}")
        print(f"{'workload':<8}  {'tool':<15} {'total (M)':>10}  {'/bare':>6}  {'/floor':>6}  "
              f"{'allocs':>9}  {'frees':>9}  {'Ir/alloc':>8}  {'Ir/free':>8}  {'pair':>8}")
        ok = True
        for wname, argv, extra_env in workloads:
            ok &= measure(wname, argv, extra_env, tool_list, dmem_rows, where, args)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
