"""gdb commands over libdmem's live-block lists, in a core file or a live process.

    (gdb) source gdb/dmem.py
    (gdb) dmem summary

This file is only the gdb side: it finds the `dmem_layout` descriptor through its ELF symbol
(in .dynsym, so a stripped libdmem.so works; no debug info of libdmem is used), reads memory in
large chunks and names code addresses.  Everything else lives in dmem_core.py next to it, which
never imports gdb.
"""

import importlib
import os
import re
import sys

import gdb

_here = os.path.dirname(os.path.abspath(os.path.expanduser(__file__)))
if _here not in sys.path:
    sys.path.insert(0, _here)

# Sourcing the script again picks up an edited dmem_core too.
if "dmem_core" in sys.modules:
    importlib.reload(sys.modules["dmem_core"])
import dmem_core as core  # noqa: E402

# Switches for comparing implementations: DMEM_NO_NUMPY=1 forces the pure-Python decoder, and
# DMEM_NO_COREFILE=1 makes every read of a core go through gdb.
_BACKEND = "pure" if os.environ.get("DMEM_NO_NUMPY") else None
_DIRECT_CORE = not os.environ.get("DMEM_NO_COREFILE")


# --------------------------------------------------------------------------------------------
# Memory and symbols through gdb


def _reader(inferior, corefile=None):
    """read(addr, n) for dmem_core: from the core file when it holds the bytes, else gdb."""
    def read(addr, n):
        if corefile is not None:
            data = corefile.read(addr, n)
            if data is not None:
                return data
        try:
            # The memoryview over gdb's buffer, not a copy of it.
            return memoryview(inferior.read_memory(addr, n))
        except (gdb.MemoryError, gdb.error, OverflowError, ValueError):
            raise core.ReadError(addr, n) from None
    return read


_CORE_TARGET = re.compile(r"core dump file:\s*`(.*)', file type")


def _open_core_file(inferior, layout_addr):
    """The core file gdb is reading, opened for direct reads, or None (a live process, or any
    doubt).  Reading a core through gdb costs more than the rest of a walk of its lists."""
    if not _DIRECT_CORE:
        return None
    try:
        m = _CORE_TARGET.search(gdb.execute("info target", to_string=True))
        if m is None:
            return None
        corefile = core.CoreFile.open(m.group(1))
        # The same bytes as gdb reads, or we do not use it.
        n = 8 * len(core.LAYOUT_FIELDS)
        mine = corefile.read(layout_addr, n)
        if mine is None or bytes(mine) != bytes(inferior.read_memory(layout_addr, n)):
            return None
        return corefile
    except (gdb.error, OSError, ValueError):
        return None


# `info symbol` answers "NAME + OFF in section SEC of FILE" ("NAME in section ..." at offset 0,
# and without "of FILE" when the program is the only object file).
_INFO_SYMBOL = re.compile(
    r"^(?P<name>.*?)(?: \+ (?P<off>\d+))? in section \S+(?: of (?P<file>.*))?$")


def resolve(pc):
    """Names a return address: function and offset, file and line, and the object it is in.

    A return address points just past the call, which may be the first byte of the next line or
    even of the next function, so the line and function are looked up at pc - 1, as gdb's own
    backtrace does; the offset printed is that of the address itself.
    """
    look = pc - 1 if pc else pc
    name = off = fname = line = obj = None
    try:
        text = gdb.execute("info symbol 0x%x" % look, to_string=True).strip()
    except gdb.error:
        text = ""
    m = _INFO_SYMBOL.match(text.splitlines()[0]) if text else None
    if m and not text.startswith("No symbol"):
        name = m.group("name")
        off = int(m.group("off") or 0) + (pc - look)
        obj = m.group("file")
        if obj is None:
            prog = gdb.current_progspace()
            obj = prog.filename if prog is not None else None
    else:
        try:
            block = gdb.block_for_pc(look)
        except RuntimeError:
            block = None
        while block is not None and block.function is None:
            block = block.superblock
        if block is not None:
            name = block.function.print_name
            off = pc - block.start
    try:
        sal = gdb.find_pc_line(look)
        if sal.symtab is not None and sal.line:
            fname = sal.symtab.filename
            line = sal.line
            obj = obj or sal.symtab.objfile.filename
    except RuntimeError:
        pass
    obj = gdb.solib_name(look) or obj
    lib = os.path.basename(obj) if obj else None
    if name is None and fname is None and lib is None:
        return None
    return core.Sym(name, off, fname, line, lib)


# --------------------------------------------------------------------------------------------
# The heap of the selected inferior, kept while it cannot have changed


class _State:
    analysis = None
    key = None


def _invalidate(*_):
    _State.analysis = None
    _State.key = None


for _ev in ("stop", "cont", "exited", "new_objfile", "clear_objfiles", "inferior_call",
            "memory_changed"):
    _registry = getattr(gdb.events, _ev, None)
    if _registry is not None:
        _registry.connect(_invalidate)


_NO_LIBDMEM = ("no dmem_layout symbol: libdmem.so is not loaded in this process (or gdb has not "
               "loaded its symbols)")


def _libdmem_ranges():
    """Address ranges of the files mapped into the process whose name mentions dmem."""
    try:
        text = gdb.execute("info proc mappings", to_string=True)
    except gdb.error:
        return []
    ranges = []
    for line in text.splitlines():
        f = line.split()
        if len(f) >= 5 and f[0].startswith("0x") and "dmem" in os.path.basename(f[-1]):
            try:
                ranges.append((int(f[0], 16), int(f[1], 16)))
            except ValueError:
                pass
    return ranges


def _layout_address(mem):
    """The descriptor's address: by its symbol, or else by its magic in libdmem's mapping.

    Returns (address, note) where note, if any, says why the symbol was not used."""
    try:
        addr = int(gdb.parse_and_eval("(unsigned long)&dmem_layout"))
    except gdb.error:
        addr = None
    problem = _NO_LIBDMEM
    if addr is not None:
        try:
            core.read_layout(mem, addr)
            return addr, None
        except core.LayoutError as e:
            problem = str(e)
    found = core.find_layouts(mem, _libdmem_ranges())
    if not found:
        raise gdb.GdbError("dmem: " + problem)
    why = ("gdb has no symbols for libdmem.so" if addr is None
           else "the libdmem.so gdb loaded is not the one the process ran")
    return found[0], "dmem: note: %s; using the descriptor found at 0x%x in its mapping\n" % (
        why, found[0])


def analysis():
    """The Analysis of the selected inferior, walked once per stop."""
    inferior = gdb.selected_inferior()
    if not inferior.threads():
        raise gdb.GdbError("dmem: no process or core file to look at")
    if _State.analysis is not None and _State.key == (inferior.num, inferior.pid):
        return _State.analysis
    addr, note = _layout_address(core.Memory(_reader(inferior)))
    if note:
        gdb.write(note, gdb.STDERR)
    corefile = _open_core_file(inferior, addr)
    mem = core.Memory(_reader(inferior, corefile))
    try:
        heap = core.Heap(mem, addr, backend=_BACKEND)
    except core.DmemError as e:
        raise gdb.GdbError("dmem: %s" % e) from None
    source = ("read from the core file directly (%d segments), else through gdb"
              % len(corefile.segments) if corefile is not None else "read through gdb")
    _State.analysis = core.Analysis(heap, core.Symbols(resolve), source)
    _State.key = (inferior.num, inferior.pid)
    return _State.analysis


def _write(text):
    if text:
        gdb.write(text)
        gdb.flush()


def _run(fn):
    """Runs a command body, turning expected failures into one-line gdb errors."""
    try:
        return fn()
    except core.DmemError as e:
        raise gdb.GdbError("dmem: %s" % e) from None
    except gdb.MemoryError as e:
        raise gdb.GdbError("dmem: cannot read memory: %s" % e) from None


LISTING = ("--json",) + core.FILTERS


# --------------------------------------------------------------------------------------------
# Commands


class DmemCommand(gdb.Command):
    """Heap analysis of a process or core running with libdmem.so preloaded.

libdmem keeps every live block on lists in the process's memory, with the
allocating thread and stack; these commands walk those lists.

The listing commands (stacks, summary, walk, folded) take filters:
  --min-size N    only blocks of at least N bytes
  --thread TID    only blocks allocated by the thread with kernel id TID
  --match REGEX   only blocks with a frame whose symbolized text matches REGEX
  --limit N       show at most N entries (summary: stacks, default 20; 0 = all)
and --json prints a JSON document instead of text.

The names of the original libdmem script are kept as aliases:
show_alloc_stacks (= dmem stacks), walk_alloc_bufs (= dmem walk) and
walk_alloc_entries (= dmem walk --headers)."""

    def __init__(self):
        super().__init__("dmem", gdb.COMMAND_DATA, gdb.COMPLETE_NONE, True)

    def invoke(self, arg, from_tty):
        if arg.strip():
            raise gdb.GdbError("dmem: unknown subcommand %r; see 'help dmem'" % arg.split()[0])
        gdb.execute("help dmem", from_tty)


class _Sub(gdb.Command):
    name = None
    allowed = LISTING
    positional = 0
    usage = ""

    def __init__(self, name=None):
        super().__init__(name or "dmem " + self.name, gdb.COMMAND_DATA, gdb.COMPLETE_NONE)

    def parse(self, arg):
        return core.parse_args(arg, self.allowed, self.positional, self.usage)

    def invoke(self, arg, from_tty):
        _run(lambda: self.run(arg))


class StacksCommand(_Sub):
    """Every live block with its size, allocating thread and stack.

Usage: dmem stacks [--json] [--min-size N] [--thread TID] [--match REGEX] [--limit N]

Blocks are listed by address.  Frames read `function+0xoff (file:line) in lib`
as far as gdb knows them, else the raw address."""

    name = "stacks"
    usage = "dmem stacks [--json] [--min-size N] [--thread TID] [--match REGEX] [--limit N]"

    def run(self, arg):
        o = self.parse(arg)
        _write(analysis().stacks(o))


class SummaryCommand(_Sub):
    """Live blocks grouped by allocation stack, most bytes first.

Usage: dmem summary [--json] [--min-size N] [--thread TID] [--match REGEX] [--limit N]

Shows the top 20 stacks (--limit N, 0 for all), each with its block count and
bytes, and a total line over every block that passed the filters."""

    name = "summary"
    usage = "dmem summary [--json] [--min-size N] [--thread TID] [--match REGEX] [--limit N]"

    def run(self, arg):
        _write(analysis().summary(self.parse(arg)))


class WalkCommand(_Sub):
    """Addresses of the live blocks, one per line (user addresses, as malloc returned them).

Usage: dmem walk [--headers] [--json] [--min-size N] [--thread TID] [--match REGEX] [--limit N]

--headers prints the address of each block's libdmem header instead."""

    name = "walk"
    allowed = LISTING + ("--headers",)
    usage = "dmem walk [--headers] [--json] [filters]"

    def run(self, arg):
        _write(analysis().walk(self.parse(arg)))


class WhatisCommand(_Sub):
    """The live block that holds an address, with its allocating thread and stack.

Usage: dmem whatis [--json] ADDR

ADDR is any gdb expression.  Interior pointers count: the answer gives the
block's start, size and ADDR's offset in it.  An address in a block's libdmem
header or in libdmem's bootstrap arena is reported as such."""

    name = "whatis"
    allowed = ("--json",)
    positional = 1
    usage = "dmem whatis [--json] ADDR"

    def run(self, arg):
        o = self.parse(arg)
        if not o.args:
            raise core.UsageError("an address is needed (usage: %s)" % self.usage)
        try:
            addr = int(gdb.parse_and_eval(o.args[0]).cast(gdb.lookup_type("unsigned long")))
        except gdb.error as e:
            raise core.UsageError("cannot evaluate %r: %s" % (o.args[0], e)) from None
        _write(analysis().whatis(addr, o))


class VerifyCommand(_Sub):
    """Checks the lists: links, magic values, sizes and the counters.

Usage: dmem verify [--json]

Walks every list checking that each header's prev matches, that its magic says
live, that it is on the list its header names, that its block is readable, and
that the lists' block and byte counters agree with what was walked.  Each
problem is reported with its address; a broken list (a cycle, a pointer into
unmapped memory) ends that list's walk, never the command."""

    name = "verify"
    allowed = ("--json",)
    usage = "dmem verify [--json]"

    def run(self, arg):
        _write(analysis().verify(self.parse(arg)))


class StatsCommand(_Sub):
    """libdmem's counters and the live blocks per allocating thread.

Usage: dmem stats [--json]

Live blocks and bytes, allocations and frees as the lists count them, whether
recording was on, and a table of live blocks and bytes by thread id."""

    name = "stats"
    allowed = ("--json",)
    usage = "dmem stats [--json]"

    def run(self, arg):
        _write(analysis().stats(self.parse(arg)))


class FoldedCommand(_Sub):
    """Writes the live bytes as folded stacks for flame graphs.

Usage: dmem folded FILE [--min-size N] [--thread TID] [--match REGEX]

Each line of FILE is `outer;...;inner BYTES` (function names, raw addresses
where unknown), the input of inferno-flamegraph and FlameGraph's flamegraph.pl."""

    name = "folded"
    allowed = core.FILTERS
    positional = 1
    usage = "dmem folded FILE [--min-size N] [--thread TID] [--match REGEX]"

    def run(self, arg):
        o = self.parse(arg)
        if not o.args:
            raise core.UsageError("a file name is needed (usage: %s)" % self.usage)
        path = os.path.expanduser(o.args[0])
        text, nstacks, nbytes = analysis().folded(o)
        try:
            with open(path, "w") as f:
                f.write(text)
        except OSError as e:
            raise core.DmemError("cannot write %s: %s" % (path, e.strerror)) from None
        _write("dmem: wrote %s (%d bytes) to %s\n" % (core.plural(nstacks, "stack"), nbytes, path))


def _alias(name, target, extra=""):
    # gdb takes a command's help from its class docstring, so each alias gets its own class.
    doc = "Same as 'dmem %s%s' (a name kept from the original libdmem script)." % (
        target.name, " " + extra if extra else "")
    cls = type(name, (_Sub,), {
        "__doc__": doc, "allowed": target.allowed, "usage": target.usage,
        "positional": target.positional,
        "run": lambda self, arg: target.run(self, (extra + " " + arg).strip()),
    })
    cls(name)


DmemCommand()
for _cls in (StacksCommand, SummaryCommand, WalkCommand, WhatisCommand, VerifyCommand,
             StatsCommand, FoldedCommand):
    _cls()
_alias("show_alloc_stacks", StacksCommand)
_alias("walk_alloc_bufs", WalkCommand)
_alias("walk_alloc_entries", WalkCommand, "--headers")
if os.path.exists(os.path.join(_here, "dmem_leakcmds.py")):  # dmem leaks, types, words, why
    __import__("dmem_leakcmds").register(sys.modules[__name__])
