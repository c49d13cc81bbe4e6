"""The live reader's bench: the two speed targets of `dmem top`.

1. Reading and grouping 1,000,000 live blocks: `bench_hold` allocates them (4 threads, 16 to
   256 bytes, 64 call sites) and waits; `dmem top PID --count 1 --json` reads it, and its
   `read_ms` (walking every list and grouping the blocks by stack, not symbolising) is taken,
   with the CPU time of the whole dmem process. Target: at most 1 s.
2. The cost to the process being read: `top_storm` (threads allocating and freeing at random,
   blocks freed by other threads) runs for a fixed time, alone and while `dmem top --interval 1`
   reads it, and reports the operations it did. Runs alternate, so drift of the machine moves
   both alike. Target: at most 5% fewer operations with the reader.

Medians over the rounds are printed; nothing here is asserted.
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import time


def start_hold(args, blocks):
    env = dict(os.environ, LD_PRELOAD=args.lib)
    p = subprocess.Popen([os.path.join(args.fixtures, "bench_hold"), str(blocks), "4"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True)
    line = p.stdout.readline()
    assert line.strip() == "ready", line
    return p


def read_once(args, pid):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.monotonic()
    out = subprocess.run([args.dmem, "top", str(pid), "--count", "1", "--json", "--limit", "5"],
                         capture_output=True, text=True, check=True)
    wall = time.monotonic() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    sample = json.loads(out.stdout.splitlines()[0])
    return sample, wall, cpu


def storm(args, with_reader):
    env = dict(os.environ, LD_PRELOAD=args.lib)
    p = subprocess.Popen([os.path.join(args.fixtures, "top_storm"), str(args.storm_seconds),
                          str(args.storm_threads)], stdout=subprocess.PIPE, env=env, text=True)
    assert p.stdout.readline().strip() == "ready"
    reader = None
    if with_reader:
        reader = subprocess.Popen([args.dmem, "top", str(p.pid), "--interval", "1", "--json"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rest = p.stdout.read()
    p.wait()
    reader_cpu = 0.0
    if reader:
        reader.terminate()
        _, _, usage = os.wait4(reader.pid, 0)
        reader_cpu = usage.ru_utime + usage.ru_stime
    ops = int(rest.split()[1])
    return ops, reader_cpu


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dmem", required=True)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--fixtures", required=True)
    ap.add_argument("--blocks", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--storm-seconds", type=float, default=10)
    ap.add_argument("--storm-threads", type=int, default=2)
    ap.add_argument("--only", choices=["read", "storm"])
    args = ap.parse_args()

    if args.only in (None, "read"):
        hold = start_hold(args, args.blocks)
        try:
            reads = [read_once(args, hold.pid) for _ in range(args.rounds + 1)][1:]
        finally:
            hold.stdin.close()
            hold.wait()
        s = reads[0][0]
        print(f"read: {s['live_blocks']:,} live blocks on {len(s['stacks'])}+ stacks, "
              f"{s['inconsistent_lists']} lists inconsistent")
        print("read: walk and grouping (read_ms), median of %d: %.0f ms (runs: %s)" % (
            len(reads), statistics.median(r[0]["read_ms"] for r in reads),
            ", ".join("%.0f" % r[0]["read_ms"] for r in reads)))
        print("read: whole dmem top --count 1, wall %.2f s, CPU %.2f s (median)" % (
            statistics.median(r[1] for r in reads), statistics.median(r[2] for r in reads)))

    if args.only in (None, "storm"):
        alone, read, cpu = [], [], []
        for _ in range(args.rounds):
            alone.append(storm(args, False)[0])
            ops, c = storm(args, True)
            read.append(ops)
            cpu.append(c)
        a, r = statistics.median(alone), statistics.median(read)
        print(f"storm: {args.storm_threads} threads, {args.storm_seconds:g} s per run, {args.rounds} rounds")
        print(f"storm: operations alone {a:,.0f}, read every second {r:,.0f} (medians): "
              f"{100 * (a - r) / a:+.1f}% lost (runs alone: {alone}, read: {read})")
        ma, mr = statistics.mean(alone), statistics.mean(read)
        spread = 100 * statistics.stdev(alone) / ma if len(alone) > 1 else 0.0
        print(f"storm: means {ma:,.0f} and {mr:,.0f}: {100 * (ma - mr) / ma:+.1f}% lost; "
              f"the runs alone vary by {spread:.0f}% (standard deviation)")
        # On a machine whose cores the storm keeps busy, the reader can take no more from the
        # storm than the processor time it used itself: a bound that machine noise cannot blur.
        c = statistics.median(cpu)
        share = c / (args.storm_seconds * min(args.storm_threads, os.cpu_count() or 1))
        print(f"storm: the reader used {c:.3f} s of CPU per {args.storm_seconds:g} s run, "
              f"{100 * share:.2f}% of the storm's processor time")


if __name__ == "__main__":
    main()
