"""The roots of a reachability scan, and the loaded objects they come from.

Roots are each thread's general registers and its stack from its stack pointer (less the red
zone) up to the end of that mapping, each thread's static TLS around its thread pointer, and the
writable segments (.data, .bss, .got, TLS images) of every loaded object, except:

* libdmem's own data: its list heads point at every block's header (never into a block, so
  keeping them would be harmless; leaving them out is cheaper);
* the allocator's own state, which is not the program's memory: glibc's `main_arena` (its `top`
  and its bins point at chunk headers, and a chunk header shares its first word with the end of
  the block before it), found by its signature; or, for jemalloc, tcmalloc and mimalloc, all of
  the allocator library's writable data.
"""

import collections
import os
import struct

from .elf import ET_DYN, ET_EXEC, PF_W, PF_X, PT_LOAD, PT_TLS, Elf
from .errors import DmemError, ReadError

# Beyond the objects' own TLS images, glibc reserves a little static TLS for libraries loaded
# later and puts its thread descriptor (struct pthread) above the thread pointer; these bound the
# window scanned around each thread's fs_base.
TLS_SURPLUS = 4096
TCB_SIZE = 4096

# The x86-64 ABI lets a function use 128 bytes below its stack pointer without moving it.
RED_ZONE = 128

# The allocators libdmem may forward to, by the start of their library's file name.  A loaded
# one is the backend; else glibc is.
ALLOCATOR_LIBS = ("libjemalloc", "libtcmalloc", "libmimalloc")
GLIBC = "libc.so"

# glibc's struct malloc_state around its `bins` array: mutex, flags, have_fastchunks,
# fastbinsY[10], top and last_remainder come before it (112 bytes); binmap, next, next_free,
# attached_threads, system_mem and max_system_mem after it (at most 64 bytes, with padding).
ARENA_BEFORE_BINS = 96 + 16
ARENA_AFTER_BINS = 16 + 64
# An empty bin is a pair of words (fd, bk) that both hold the pair's address less 16; a run of
# this many or more such pairs is taken for main_arena's bins, of which there are NBINS - 1 = 127
# (bins[NBINS * 2 - 2]).
ARENA_MIN_PAIRS = 32
NBINS = 127

# Register names worth scanning: the general-purpose ones (segment registers and flags cannot
# hold a pointer).
POINTER_REGS = ("rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rbp", "rsp", "r8", "r9", "r10", "r11",
                "r12", "r13", "r14", "r15", "rip", "orig_rax", "fs_base", "gs_base")

Root = collections.namedtuple("Root", "kind where start end value")


class LoadedObject:
    def __init__(self, path, elf, bias, mappings):
        self.path = path
        self.name = os.path.basename(path)
        self.elf = elf
        self.bias = bias
        self.mappings = mappings

    def contains(self, addr):
        return any(s <= addr < e for s, e, _ in self.mappings)

    def writable(self):
        """[bias + p_vaddr, + p_memsz) of each writable PT_LOAD, as dl_iterate_phdr shows it."""
        return [(self.bias + p.vaddr, self.bias + p.vaddr + p.memsz) for p in self.elf.phdrs
                if p.type == PT_LOAD and p.flags & PF_W and p.memsz]

    def tls_size(self):
        return sum(p.memsz + 64 for p in self.elf.phdrs if p.type == PT_TLS)


def loaded_objects(mappings, open_elf=Elf.open, space=None):
    """The ELF objects among the mapped files, with their load bias.  Files that are not ELF
    (locale archives, fonts) or cannot be opened are left out."""
    by_path = collections.OrderedDict()
    for m in mappings:
        if m.path:
            by_path.setdefault(m.path, []).append((m.start, m.end, m.offset))
    out = []
    for path, maps in by_path.items():
        try:
            elf = open_elf(path)
        except (DmemError, OSError):
            continue
        if elf is None or elf.type not in (ET_EXEC, ET_DYN):
            continue
        bias = elf.bias(maps, space.prot if space is not None else None)
        if bias is None:
            continue
        out.append(LoadedObject(path, elf, bias, maps))
    return out


def unmatched_objects(mappings, objects, space, exclude=None):
    """Paths of mapped files with executable code (so, programs or libraries) that are not
    among `objects`: their file could not be opened or no longer matches the mapping, and their
    data is not scanned.  The one holding `exclude` (libdmem) does not matter and is left out."""
    known = {o.path for o in objects}
    out = []
    for m in mappings:
        if m.path and m.path not in known and m.path not in out and space.prot(m.start) & PF_X:
            if exclude is not None and any(x.path == m.path and x.start <= exclude < x.end
                                           for x in mappings):
                continue
            out.append(m.path)
    return out


def _word(space, addr):
    try:
        return struct.unpack("<Q", bytes(space.buffer(addr, addr + 8)))[0]
    except ReadError:
        return None


def _linked_bin(space, q):
    """Whether the pair of words at q is a bin of glibc's that holds chunks: its first chunk's
    bk and its last chunk's fd both lead back to the bin (whose chunk-shaped address is q - 16,
    so that fd and bk fall on the pair)."""
    fd, bk = _word(space, q), _word(space, q + 8)
    if fd is None or bk is None:
        return False
    return _word(space, fd + 24) == q - 16 and _word(space, bk + 16) == q - 16


def main_arena(space, start, end):
    """[start, end) of glibc's main_arena in the writable range [start, end) of libc, found by
    its signature, or None.

    The longest run of empty bins (a pair of words at Q both holding Q - 16; at least
    ARENA_MIN_PAIRS of them) marks the bins array.  Bins that hold chunks break the run, so it
    is extended both ways over bins whose chunks link back to them; a whole array of NBINS
    pairs then places the struct exactly.  Only what the core holds of the range is searched;
    main_arena is written data, so a core always holds it.
    """
    best = (0, 0)  # (pairs, address of the first)
    for s, e in space.parts((start + 7) & ~7, end & ~7)[0]:
        try:
            words = memoryview(space.buffer(s, e)).cast("B").cast("Q")
        except ReadError:
            continue
        # run[k]: empty bins in a row ending with the pair at word k (stride 2 words).
        run = [0] * (len(words) + 2)
        for k in range(len(words) - 1):
            q = s + 8 * k - 16
            if words[k] == q and words[k + 1] == q:
                n = run[k] = run[k - 2] + 1 if k >= 2 else 1
                if n > best[0]:
                    best = (n, s + 8 * (k - 2 * (n - 1)))
    pairs, first = best
    if pairs < ARENA_MIN_PAIRS:
        return None
    last = first + 16 * (pairs - 1)
    while last - first < 16 * (NBINS - 1) and _linked_bin(space, first - 16):
        first -= 16
    while last - first < 16 * (NBINS - 1) and _linked_bin(space, last + 16):
        last += 16
    return first - ARENA_BEFORE_BINS, last + 16 + ARENA_AFTER_BINS


Excluded = collections.namedtuple("Excluded", "start end what")


def allocator_state(objects, space):
    """The ranges of the allocator's own state to leave out of the roots, and notes about it:
    ([Excluded], [note])."""
    out, notes = [], []
    backend = [o for o in objects if o.name.startswith(ALLOCATOR_LIBS)]
    for obj in backend:
        for s, e in obj.writable():
            out.append(Excluded(s, e, "writable data of %s (the allocator's own state)"
                                % obj.name))
    for obj in objects:
        if not obj.name.startswith(GLIBC):
            continue
        found = None
        for s, e in obj.writable():
            found = main_arena(space, s, e)
            if found:
                break
        if found:
            out.append(Excluded(found[0], found[1], "main_arena of %s (the allocator's own "
                                "state)" % obj.name))
        elif not backend:
            notes.append("glibc's main_arena was not found in the data of %s, so it was scanned "
                         "as a root: a block only the allocator's bookkeeping points to counts "
                         "as in use" % obj.name)
    return out, notes


def _without(start, end, holes):
    """The parts of [start, end) outside every hole (start, end, ...)."""
    parts = [(start, end)]
    for h in holes:
        nxt = []
        for s, e in parts:
            if h[1] <= s or h[0] >= e:
                nxt.append((s, e))
                continue
            if s < h[0]:
                nxt.append((s, h[0]))
            if h[1] < e:
                nxt.append((h[1], e))
        parts = nxt
    return parts


Roots = collections.namedtuple("Roots", "roots excluded notes")


def gather_roots(objects, threads, space, exclude=None):
    """The roots in scan order, what was left out of them ([Excluded]: libdmem, found by the
    address `exclude` of its layout descriptor, and the allocator's state) and notes."""
    roots = []
    excluded, notes = allocator_state(objects, space)
    tls = 0
    for obj in objects:
        tls += obj.tls_size()
        if exclude is not None and obj.contains(exclude):
            excluded.extend(Excluded(s, e, "writable data of %s (its own lists)" % obj.name)
                            for s, e in obj.writable())
            continue
        for s, e in obj.writable():
            for a, b in _without(s, e, excluded):
                roots.append(Root("data", "writable data of %s" % obj.name, a, b, None))
    for t in threads:
        sp = t.regs.get("rsp")
        piece = space.piece_of(sp) if sp else None
        if piece is not None:
            roots.append(Root("stack", "stack of thread %d" % t.tid,
                              max(piece[0], sp - RED_ZONE), piece[1], None))
        fs = t.regs.get("fs_base")
        piece = space.piece_of(fs) if fs else None
        if piece is not None:
            lo = max(piece[0], fs - tls - TLS_SURPLUS)
            hi = min(piece[1], fs + TCB_SIZE)
            roots.append(Root("tls", "TLS of thread %d" % t.tid, lo, hi, None))
        for name in POINTER_REGS:
            v = t.regs.get(name)
            if v:
                roots.append(Root("register", "register %s of thread %d" % (name, t.tid),
                                  None, None, v))
    return Roots(roots, excluded, notes)


class Target:
    """What a scan needs besides the lists: bulk memory, the roots, the loaded objects (for
    vtables), what was left out of the roots ([Excluded]), notes and warnings about them, and
    two optional name services: symbol_at(addr) -> text for a data or code address,
    demangle([names]) -> {name: text}."""

    def __init__(self, space, roots, objects=(), excluded=(), symbol_at=None, demangle=None,
                 notes=(), warnings=()):
        self.space = space
        self.roots = roots
        self.objects = list(objects)
        self.excluded = list(excluded)
        self.symbol_at = symbol_at
        self.demangle = demangle
        self.notes = list(notes)
        self.warnings = list(warnings)
