"""gdb commands for leak finding: dmem leaks, dmem types, dmem words, dmem why.

Loaded by dmem.py, whose `dmem` prefix command, heap walk, symbolizer and option parsing these
commands reuse.  The work is done by dmem_reach.py (no gdb in it); this file only gathers what
gdb knows: the core file or the live process's mappings, the threads' registers, and names.
"""

import importlib
import os
import re
import sys

import gdb

import dmem_core as core
import dmem_reach as reach

_A = None  # the dmem.py module these commands extend
_cache = {"analysis": None, "leaks": None, "core": None}


# --------------------------------------------------------------------------------------------
# What gdb knows about the process


_CORE_FILE = re.compile(r"core dump file:\s*`(.*)', file type")


def _core_path():
    """The core file gdb is reading, from `info target`; None for a live process."""
    try:
        text = gdb.execute("info target", to_string=True)
    except gdb.error:
        return None
    m = getattr(_A, "_CORE_TARGET", _CORE_FILE).search(text)
    return m.group(1) if m else None


def _open_elf(path):
    """The object file at `path`, or the file gdb loaded for it (same name) when the core was
    made on another machine or the path is gone."""
    if os.path.isfile(path):
        return reach.Elf(path)
    base = os.path.basename(path)
    for obj in gdb.objfiles():
        fn = obj.filename or ""
        if os.path.basename(fn) == base and os.path.isfile(fn):
            return reach.Elf(fn)
    return None


def _gdb_threads(inferior):
    """Registers of every thread, read through gdb (for a live process)."""
    out = []
    try:
        keep_thread = gdb.selected_thread()
        keep_frame = gdb.selected_frame()
    except gdb.error:
        keep_thread = keep_frame = None
    try:
        for th in inferior.threads():
            th.switch()
            frame = gdb.newest_frame()
            regs = {}
            for name in reach.POINTER_REGS:
                try:
                    regs[name] = int(frame.read_register(name)) & ((1 << 64) - 1)
                except (gdb.error, ValueError):
                    pass
            out.append(reach.Thread(th.ptid[1] or th.ptid[0], regs))
    finally:
        if keep_thread is not None and keep_thread.is_valid():
            keep_thread.switch()
            try:
                keep_frame.select()
            except (gdb.error, RuntimeError):
                pass
    return out


_SYMBOL = re.compile(r"^(.*?) in section (\S+)(?: of (.*))?$")


def _symbol_at(addr):
    """`info symbol` for a data or code address: `name + off in section S of lib`."""
    try:
        text = gdb.execute("info symbol 0x%x" % addr, to_string=True).strip()
    except gdb.error:
        return None
    if not text or text.startswith("No symbol"):
        return None
    line = text.splitlines()[0]
    m = _SYMBOL.match(line)
    if m and m.group(3):
        return "%s in %s of %s" % (m.group(1), m.group(2), os.path.basename(m.group(3)))
    return line


def _demangle(names):
    out = {}
    rest = []
    for n in names:
        try:
            out[n] = gdb.execute("demangle -l c++ -- %s" % n, to_string=True).strip()
        except gdb.error:
            rest.append(n)
    out.update(reach.demangle_with_cxxfilt(rest))
    return out


def _target(inferior, layout_addr):
    """Memory, roots and objects of the selected inferior: from the core file itself when gdb
    has one open, else from the live process (its /proc maps and gdb's reads)."""
    path = _core_path()
    if path is not None:
        cf = _cache["core"]
        try:
            stamp = os.stat(path)
            stamp = (path, stamp.st_ino, stamp.st_size, stamp.st_mtime)
        except OSError as e:
            raise core.DmemError("cannot read the core file %s: %s" % (path, e.strerror)) \
                from None
        if cf is None or cf[0] != stamp:
            cf = (stamp, reach.CoreFile(path))
            _cache["core"] = cf
        corefile = cf[1]
        if getattr(_A, "_DIRECT_CORE", True):
            space = reach.CoreSpace(corefile)
        else:
            # DMEM_NO_COREFILE=1: the same answer with every byte read through gdb.
            direct = reach.CoreSpace(corefile)
            space = reach.ReaderSpace(_A._reader(inferior), direct.pieces, direct.mapped)
        mappings = corefile.mappings
        threads = corefile.threads
    else:
        try:
            with open("/proc/%d/maps" % inferior.pid) as f:
                mappings, pieces, mapped = reach.parse_maps(f.read())
        except OSError as e:
            raise core.DmemError("cannot read the mappings of process %d: %s"
                                 % (inferior.pid, e.strerror)) from None
        space = reach.ReaderSpace(_A._reader(inferior), pieces, mapped)
        threads = _gdb_threads(inferior)
    objects = reach.loaded_objects(mappings, open_elf=_open_elf, space=space)
    roots, skipped = reach.gather_roots(objects, threads, space, exclude=layout_addr)
    notes = ["%s does not match its mapping in the process (rebuilt or moved since?); its "
             "data was not scanned, so blocks only it holds show as leaks" % p
             for p in reach.unmatched_objects(mappings, objects, space, layout_addr)]
    return reach.Target(space, roots, objects, skipped, symbol_at=_symbol_at,
                        demangle=_demangle, notes=notes)


def leaks_analysis():
    """The Leaks of the selected inferior, built once per stop like dmem.py's analysis."""
    an = _A.analysis()
    if _cache["analysis"] is an and _cache["leaks"] is not None:
        return _cache["leaks"]
    target = _target(gdb.selected_inferior(), an.heap.layout.addr)
    lk = reach.Leaks(an, target)
    _cache["analysis"] = an
    _cache["leaks"] = lk
    return lk


# --------------------------------------------------------------------------------------------
# Commands


def _commands(A):
    class _LeakSub(A._Sub):
        def parse(self, arg):
            return reach.parse_leak_args(arg, self.allowed, self.positional, self.usage)

    class LeaksCommand(_LeakSub):
        """Leaked blocks: live blocks that nothing reachable points to, grouped by stack.

Usage: dmem leaks [--json] [--min-size N] [--thread TID] [--match REGEX] [--limit N]

A conservative mark from the roots: every thread's registers and stack (from
its stack pointer up), each thread's static TLS, and the writable data of the
program and its libraries (libdmem's own lists excepted).  Any aligned word
pointing anywhere inside a live block keeps it; what is never reached leaked.
A leak is direct when no other leaked block points to it, indirect when only
leaked blocks do (as valgrind and LeakSanitizer count them).  Stacks are listed
most bytes first (top 20; --limit 0 for all), then a total line with the blocks
still reachable.  The exit report of DMEM_OPTS=leak-report uses the same rules."""

        name = "leaks"
        usage = "dmem leaks [--json] [--min-size N] [--thread TID] [--match REGEX] [--limit N]"

        def run(self, arg):
            A._write(leaks_analysis().leaks(self.parse(arg)))

    class TypesCommand(_LeakSub):
        """C++ types of the live (or leaked) blocks, from their vtable pointers.

Usage: dmem types [--leaks] [--json] [--min-size N] [--thread TID] [--match REGEX] [--limit N]

A block whose first word points into a `vtable for X` symbol (_ZTV...) of a
loaded object counts as an X.  Prints a table of types with block counts and
bytes, and the stack most of each type's blocks were allocated from.
--leaks looks at leaked blocks only (see 'dmem leaks')."""

        name = "types"
        allowed = A.LISTING + ("--leaks",)
        usage = "dmem types [--leaks] [--json] [--min-size N] [--thread TID] [--match REGEX] " \
                "[--limit N]"

        def run(self, arg):
            A._write(leaks_analysis().types(self.parse(arg)))

    class WordsCommand(_LeakSub):
        """Most frequent values in the contents of live (or leaked) blocks.

Usage: dmem words [--leaks] [--vtable TYPE] [--offset N [--type u8|u16|u32|u64]]
                  [--json] [--min-size N] [--thread TID] [--match REGEX] [--limit N]

Without --offset: a histogram of every aligned 8-byte word inside the blocks;
values that are addresses of symbols are named.  Leaked objects are often the
most frequent thing in a heap, and their vtable pointers and constant fields
stand out.  --offset N histograms one field instead: the u64 (or --type) at
offset N of each block, and --vtable TYPE restricts it to blocks of that C++
type (as 'dmem types' names it, or the mangled _ZTV symbol), e.g.
  dmem words --leaks --vtable Session --offset 8 --type u32
to see in which state leaked Session objects were left.  --limit N shows the
top N values (default 20; 0 for all)."""

        name = "words"
        allowed = A.LISTING + ("--leaks", "--vtable", "--offset", "--type")
        usage = "dmem words [--leaks] [--vtable TYPE] [--offset N] [--type u8|u16|u32|u64] " \
                "[--json] [filters]"

        def run(self, arg):
            A._write(leaks_analysis().words(self.parse(arg)))

    class WhyCommand(_LeakSub):
        """Why a block is still alive: one chain of references from a root to it.

Usage: dmem why [--json] ADDR

ADDR is any gdb expression and may point anywhere inside the block.  For a
block in use, prints the root (a global or TLS word, a stack slot, a register)
and each block on a shortest chain down to ADDR's block, with the offset of
the pointer and each block's allocating stack.  For a leaked block, says so:
a direct leak, or an indirect one with the chain from its direct leak."""

        name = "why"
        allowed = ("--json",)
        positional = 1
        usage = "dmem why [--json] ADDR"

        def run(self, arg):
            # Options first; everything after them is one gdb expression, spaces and all.
            o = reach.LeakOptions()
            text = (arg or "").strip()
            while text.startswith("--"):
                word, _, rest = text.partition(" ")
                if word != "--json":
                    raise core.UsageError("unknown option %s (usage: %s)" % (word, self.usage))
                o.json = True
                text = rest.strip()
            if not text:
                raise core.UsageError("an address is needed (usage: %s)" % self.usage)
            try:
                addr = int(gdb.parse_and_eval(text).cast(gdb.lookup_type("unsigned long")))
            except gdb.error as e:
                raise core.UsageError("cannot evaluate %r: %s" % (text, e)) from None
            A._write(leaks_analysis().why(addr, o))

    return (LeaksCommand, TypesCommand, WordsCommand, WhyCommand)


def register(adapter):
    """Adds the commands under dmem.py's `dmem` prefix (`adapter` is that module)."""
    global _A, core, reach
    if _A is not None:
        # dmem.py is being sourced again: pick up edits to these files too, as it does for
        # dmem_core, and register afresh from the reloaded module.
        return importlib.reload(sys.modules[__name__]).register(adapter)
    _A = adapter
    core = adapter.core
    if reach.core is not core:
        reach = importlib.reload(reach)
    for cls in _commands(adapter):
        cls()
