"""Runs a command and writes the peak of its anonymous resident memory, in kB, to a file.

    python3 bench/peak_anon.py OUT COMMAND...

GNU time's peak RSS counts every resident page, and a command that maps a core file has most of
that file's pages resident (shared, file-backed) while it reads them: for the core benches that
says more about the core than about the command. What the command itself allocates is its
anonymous memory, RssAnon in /proc/PID/status, of which the kernel keeps no peak; so this
samples it every 2 ms, summed over the command and every process under it (the tree is listed
again every 50 ms, so a process started late, such as the launcher gdb runs, is counted), and
keeps the largest sum. A peak shorter than the interval can be missed: the figure is a floor,
close for memory held while the work is done. Sampling costs processor time, so a bench runs
this apart from the run it times. The command's standard streams and exit status are its own.
"""

import os
import subprocess
import sys
import time

INTERVAL = 0.002
# Samples between listings of the tree (a scan of all of /proc).
TREE_EVERY = 25


def tree(pid):
    """The process and its descendants, from every process's parent in /proc/*/stat."""
    parent = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        # The command name is in parentheses and may hold spaces: the fields after it count.
        parent.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(parent.get(p, []))
    return out


def anon_kb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: peak_anon.py OUT COMMAND...")
    out, cmd = sys.argv[1], sys.argv[2:]
    child = subprocess.Popen(cmd)
    peak, samples, pids = 0, 0, [child.pid]
    while child.poll() is None:
        if samples % TREE_EVERY == 0:
            pids = tree(child.pid)
        samples += 1
        peak = max(peak, sum(anon_kb(p) for p in pids))
        time.sleep(INTERVAL)
    with open(out, "w") as f:
        f.write(f"{peak}\n")
    sys.exit(child.returncode if child.returncode >= 0 else 128 - child.returncode)


if __name__ == "__main__":
    main()
