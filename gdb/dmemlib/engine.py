"""The gdb commands' answers come from the `dmem` binary: this module finds it, turns a gdb
command's words and what gdb has open into its command line, runs it and returns what it printed,
or its error as one line.

One engine answers both the launcher and gdb, so a core reads the same either way; the adapter
(dmem.py) only says what gdb knows: the core file and the program, or the process it holds
stopped and its threads' registers.
"""

import json
import os
import shutil
import subprocess
import tempfile

from .errors import DmemError, UsageError

# The version of `dmem commands --json` this module reads.
CATALOG_FORMAT = 1


def candidates(script_dir, environ=None, which=shutil.which):
    """Where the dmem binary may be, in order: $DMEM_BIN; beside an installed script
    (PREFIX/share/dmem/dmem.py and PREFIX/bin/dmem); the source tree's release and debug
    builds (gdb/dmem.py and target/); the PATH."""
    environ = os.environ if environ is None else environ
    out = []
    if environ.get("DMEM_BIN"):
        return [environ["DMEM_BIN"]]
    out.append(os.path.join(script_dir, "..", "..", "bin", "dmem"))
    for profile in ("release", "debug"):
        out.append(os.path.join(script_dir, "..", "target", profile, "dmem"))
    found = which("dmem")
    if found:
        out.append(found)
    return [os.path.normpath(p) for p in out]


def find_binary(script_dir, environ=None, which=shutil.which, is_exe=None):
    """The dmem binary to run, or a DmemError saying where it was looked for."""
    is_exe = is_exe or (lambda p: os.path.isfile(p) and os.access(p, os.X_OK))
    tried = candidates(script_dir, environ, which)
    for p in tried:
        if is_exe(p):
            return p
    if environ is not None and environ.get("DMEM_BIN") or os.environ.get("DMEM_BIN"):
        raise DmemError("DMEM_BIN is %s, which is not an executable dmem" % tried[0])
    raise DmemError("cannot find the dmem binary (looked in %s): build it with 'cargo build "
                    "--release', install it with 'dmem install', or set DMEM_BIN"
                    % ", ".join(tried))


def catalog(binary, runner=subprocess.run):
    """What the binary answers: its analysis commands with their help, the aliases the original
    libdmem script had, the options that take a value and the registers it reads of each
    thread (`dmem commands --json`).  The gdb commands are registered from it, so they and the
    launcher cannot drift apart."""
    out, _ = run([binary, "commands", "--json"], runner)
    try:
        doc = json.loads(out)
    except ValueError:
        raise DmemError("%s commands --json printed no JSON" % binary) from None
    if not isinstance(doc, dict) or doc.get("format") != CATALOG_FORMAT:
        raise DmemError("%s lists its commands in another format (%r, this script reads %d): "
                        "use the dmem.py that came with it"
                        % (binary, doc.get("format") if isinstance(doc, dict) else None,
                           CATALOG_FORMAT))
    return doc


def split_address(words, usage):
    """(options, address expression) of `whatis` and `why`: options come first; the rest is
    one gdb expression, spaces and all, as gdb's own `print` takes it.  An expression wrapped
    whole in one pair of quotes is unwrapped."""
    opts = []
    rest = list(words)
    while rest and rest[0].startswith("--"):
        if rest[0] != "--json":
            raise UsageError("unknown option %s (usage: %s)" % (rest[0], usage))
        opts.append(rest.pop(0))
    text = " ".join(rest).strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"" and text[0] not in text[1:-1]:
        text = text[1:-1].strip()
    if not text:
        raise UsageError("an address is needed (usage: %s)" % usage)
    return opts, text


def folded_words(words, usage, value_options):
    """The words of `folded [options] FILE` with FILE given as `--output FILE`, as the engine
    takes it; the value of an option in value_options is not a file."""
    out, files = [], []
    it = iter(words)
    for w in it:
        if w in value_options:
            out.append(w)
            value = next(it, None)
            if value is not None:
                out.append(value)
        elif w.startswith("--"):
            out.append(w)
        else:
            files.append(w)
    if len(files) != 1:
        raise UsageError("one file name is needed (usage: %s)" % usage)
    return out + ["--output", os.path.expanduser(files[0])]


def image_args(core=None, program=None, pid=None, registers_file=None, sysroot=None):
    """The engine's words for what gdb has open: PROG CORE, or PID with --registers. A core's
    files are looked up under gdb's sysroot first, when it names a directory of this machine
    (not gdb's default, the target's own files)."""
    if core:
        local = sysroot and not sysroot.startswith(("target:", "remote:"))
        return (["--sysroot", sysroot] if local else []) + ([program] if program else []) + [core]
    if pid:
        return ["--registers", registers_file, str(pid)]
    raise DmemError("no process or core file: open a core (gdb PROG CORE) or attach to a process "
                    "that runs with libdmem.so preloaded")


def registers_json(threads):
    """The --registers file's text: [{"tid": N, "regs": {name: value}}], from (tid, {name:
    value}) pairs; registers gdb could not read are left out."""
    return json.dumps([{"tid": tid, "regs": {k: v for k, v in regs.items() if v is not None}}
                       for tid, regs in threads])


def command_line(binary, command, words, image, address=None):
    """The engine's argv for a gdb command with its words, on the image's words; an address
    (of `whatis` and `why`) comes last, after the image, with the options before it."""
    if address is not None:
        return [binary, command] + list(words) + list(image) + [address]
    return [binary, command] + list(image) + list(words)


def run(argv, runner=subprocess.run):
    """Runs the engine; returns what it printed, or raises its error as one line."""
    try:
        done = runner(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False)
    except OSError as e:
        raise DmemError("cannot run %s: %s" % (argv[0], e.strerror)) from None
    out = done.stdout.decode("utf-8", "replace")
    err = done.stderr.decode("utf-8", "replace")
    # Status 1 with an answer printed is an answer that found problems (`dmem verify`): shown
    # as any answer is. An error prints nothing on stdout.
    if done.returncode != 0 and not (done.returncode == 1 and out.strip()):
        lines = [line for line in err.splitlines() if line.strip()]
        msg = lines[-1] if lines else "%s exited with status %d" % (argv[0], done.returncode)
        # "dmem leaks: no libdmem..." -> "no libdmem...": the adapter adds its own "dmem: ".
        head, sep, tail = msg.partition(": ")
        if sep and head.startswith("dmem"):
            msg = tail
        raise DmemError(msg)
    return out, err


def with_registers_file(threads, action):
    """Writes the threads' registers to a temporary file, calls action(path), removes it."""
    fd, path = tempfile.mkstemp(prefix="dmem-registers-", suffix=".json")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(registers_json(threads))
        return action(path)
    finally:
        os.unlink(path)
