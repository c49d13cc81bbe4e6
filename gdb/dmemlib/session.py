"""The selected inferior as gdb shows it: the one module of the package, besides the dmem.py
adapter, that imports gdb.

It turns what gdb knows into the plain inputs of the other modules: a memory reader, a
symbolizer, the threads' registers, the mapped files, and the core file itself.  A core gdb has
open is mapped and parsed once per gdb session (it is re-read only if the file changes) and
serves both the list walk and the reachability scan; the walk of the lists is kept until the
inferior can have changed (a stop, a continue, new object files, a memory write).
"""

import os
import re

import gdb

from . import layout as layoutmod
from .cxxtypes import demangle_with_cxxfilt
from .elf import CoreFile, Elf, Thread
from .errors import DmemError, ReadError
from .heapcmds import Analysis
from .leakcmds import Leaks
from .memory import CoreSpace, Memory, ReaderSpace, layered, parse_maps
from .roots import POINTER_REGS, Target, gather_roots, loaded_objects, unmatched_objects
from .symbols import Sym, Symbols, data_symbol_text, parse_info_symbol

# DMEM_NO_COREFILE=1 makes every read of a core go through gdb, to compare with direct reads.
DIRECT_CORE = not os.environ.get("DMEM_NO_COREFILE")

NO_LIBDMEM = ("no dmem_layout symbol: libdmem.so is not loaded in this process (or gdb has not "
              "loaded its symbols)")

_CORE_TARGET = re.compile(r"core dump file:\s*`(.*)', file type")


# --------------------------------------------------------------------------------------------
# Memory, names and threads through gdb


def gdb_reader(inferior):
    """read(addr, n) through gdb: a memoryview over gdb's buffer, not a copy of it."""
    def read(addr, n):
        try:
            return memoryview(inferior.read_memory(addr, n))
        except (gdb.MemoryError, gdb.error, OverflowError, ValueError):
            raise ReadError(addr, n) from None
    return read


def _info_symbol(addr):
    try:
        return parse_info_symbol(gdb.execute("info symbol 0x%x" % addr, to_string=True))
    except gdb.error:
        return None


def resolve(pc):
    """Names a return address: function and offset, file and line, and the object it is in.

    A return address points just past the call, which may be the first byte of the next line or
    even of the next function, so the line and function are looked up at pc - 1, as gdb's own
    backtrace does; the offset printed is that of the address itself.
    """
    look = pc - 1 if pc else pc
    name = off = fname = line = obj = None
    info = _info_symbol(look)
    if info is not None:
        name = info.name
        off = info.offset + (pc - look)
        obj = info.file
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
    return Sym(name, off, fname, line, lib)


def symbol_at(addr):
    """A data or code address as `name + off in section S of lib`, or None."""
    info = _info_symbol(addr)
    return data_symbol_text(info) if info is not None else None


def demangle(names):
    out = {}
    rest = []
    for n in names:
        try:
            out[n] = gdb.execute("demangle -l c++ -- %s" % n, to_string=True).strip()
        except gdb.error:
            rest.append(n)
    out.update(demangle_with_cxxfilt(rest))
    return out


def gdb_threads(inferior):
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
            for name in POINTER_REGS:
                try:
                    regs[name] = int(frame.read_register(name)) & ((1 << 64) - 1)
                except (gdb.error, ValueError):
                    pass
            out.append(Thread(th.ptid[1] or th.ptid[0], regs))
    finally:
        if keep_thread is not None and keep_thread.is_valid():
            keep_thread.switch()
            try:
                keep_frame.select()
            except (gdb.error, RuntimeError):
                pass
    return out


def _open_elf(path):
    """The object file at `path`, or the file gdb loaded for it (same name) when the core was
    made on another machine or the path is gone."""
    if os.path.isfile(path):
        return Elf.open(path)
    base = os.path.basename(path)
    for obj in gdb.objfiles():
        fn = obj.filename or ""
        if os.path.basename(fn) == base and os.path.isfile(fn):
            return Elf.open(fn)
    return None


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
    problem = NO_LIBDMEM
    if addr is not None:
        try:
            layoutmod.read_layout(mem, addr)
            return addr, None
        except layoutmod.LayoutError as e:
            problem = str(e)
    found = layoutmod.find_layouts(mem, _libdmem_ranges())
    if not found:
        raise DmemError(problem)
    why = ("gdb has no symbols for libdmem.so" if addr is None
           else "the libdmem.so gdb loaded is not the one the process ran")
    return found[0], "dmem: note: %s; using the descriptor found at 0x%x in its mapping\n" % (
        why, found[0])


# --------------------------------------------------------------------------------------------
# What is kept between commands


class _State:
    key = None
    analysis = None
    leaks = None
    core = None  # (path, inode, size, mtime), CoreFile


def invalidate(*_):
    """Drops the walk and the scan (not the core file, which cannot change under gdb)."""
    _State.key = None
    _State.analysis = None
    _State.leaks = None


for _ev in ("stop", "cont", "exited", "new_objfile", "clear_objfiles", "inferior_call",
            "memory_changed"):
    _registry = getattr(gdb.events, _ev, None)
    if _registry is not None:
        _registry.connect(invalidate)


def core_file():
    """The core file gdb is reading, mapped and parsed once; None for a live process."""
    try:
        m = _CORE_TARGET.search(gdb.execute("info target", to_string=True))
    except gdb.error:
        return None
    if m is None:
        return None
    path = m.group(1)
    try:
        st = os.stat(path)
    except OSError as e:
        raise DmemError("cannot read the core file %s: %s" % (path, e.strerror)) from None
    stamp = (path, st.st_ino, st.st_size, st.st_mtime)
    if _State.core is None or _State.core[0] != stamp:
        _State.core = (stamp, CoreFile.open(path))
    return _State.core[1]


def _direct_core(inferior, corefile, layout_addr):
    """`corefile` if it gives the same descriptor bytes as gdb (else doubt it: None)."""
    if corefile is None or not DIRECT_CORE:
        return None
    n = 8 * len(layoutmod.LAYOUT_FIELDS)
    mine = corefile.read(layout_addr, n)
    try:
        theirs = bytes(inferior.read_memory(layout_addr, n))
    except (gdb.MemoryError, gdb.error):
        return None
    return corefile if mine is not None and bytes(mine) == theirs else None


def analysis():
    """The Analysis of the selected inferior, walked once per stop."""
    inferior = gdb.selected_inferior()
    if not inferior.threads():
        raise DmemError("no process or core file to look at")
    if _State.analysis is not None and _State.key == (inferior.num, inferior.pid):
        return _State.analysis
    via_gdb = gdb_reader(inferior)
    addr, note = _layout_address(Memory(via_gdb))
    if note:
        gdb.write(note, gdb.STDERR)
    try:
        corefile = core_file()
    except DmemError:
        corefile = None
    direct = _direct_core(inferior, corefile, addr)
    mem = Memory(layered(direct.read, via_gdb) if direct is not None else via_gdb)
    heap = layoutmod.Heap(mem, addr)
    source = ("read from the core file directly (%d segments), else through gdb"
              % len(direct.segments) if direct is not None else "read through gdb")
    _State.analysis = Analysis(heap, Symbols(resolve), source)
    _State.leaks = None
    _State.key = (inferior.num, inferior.pid)
    return _State.analysis


def _target(inferior, layout_addr):
    """Memory, roots and objects of the selected inferior: from the core file itself when gdb
    has one open, else from the live process (its /proc maps and gdb's reads)."""
    corefile = core_file()
    if corefile is not None:
        space = CoreSpace(corefile)
        if not DIRECT_CORE:
            # The same answer with every byte read through gdb.
            space = ReaderSpace(gdb_reader(inferior), space.pieces, space.mapped)
        mappings = corefile.mappings
        threads = corefile.threads
    else:
        try:
            with open("/proc/%d/maps" % inferior.pid) as f:
                mappings, pieces, mapped = parse_maps(f.read())
        except OSError as e:
            raise DmemError("cannot read the mappings of process %d: %s"
                            % (inferior.pid, e.strerror)) from None
        space = ReaderSpace(gdb_reader(inferior), pieces, mapped)
        threads = gdb_threads(inferior)
    objects = loaded_objects(mappings, open_elf=_open_elf, space=space)
    found = gather_roots(objects, threads, space, exclude=layout_addr)
    warnings = ["%s does not match its mapping in the process (rebuilt or moved since?); its "
                "data was not scanned, so blocks only it holds may show as lost" % p
                for p in unmatched_objects(mappings, objects, space, layout_addr)]
    return Target(space, found.roots, objects, found.excluded, symbol_at=symbol_at,
                  demangle=demangle, notes=found.notes, warnings=warnings)


def leaks():
    """The Leaks of the selected inferior, built once per stop like the analysis."""
    an = analysis()
    if _State.leaks is None:
        _State.leaks = Leaks(an, _target(gdb.selected_inferior(), an.heap.layout.addr))
    return _State.leaks
