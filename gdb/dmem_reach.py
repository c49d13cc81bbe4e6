"""Leak finding over libdmem's live blocks: conservative reachability, C++ types from vtable
pointers, histograms of block contents, and the chain that keeps a block alive.

The rules are those of the exit-time report (src/reach.rs), so both give the same answer on the
same process:

* Any 8-byte-aligned word in a root or in a reached block that points anywhere inside a live
  block's [user, user + size) reaches that block (a zero-sized block owns its start address).
  Only whole words inside a block are its contents.
* Blocks never reached leak.  They are *direct* unless another leaked block points to them, then
  *indirect*.  Exactly as in reach.rs, every unreached block, in address order, that no earlier
  flood claimed leads a flood that marks what it reaches indirect (an earlier lead it runs into is
  demoted); so a leaked cycle keeps one direct block, its lowest.

Roots on a core are more than the exiting thread sees in-process: every thread's registers and
its stack from its stack pointer up to the end of that mapping, each thread's static TLS around
its thread pointer, and the writable segments (.data, .bss, .got, TLS images) of every loaded
object except libdmem, whose list heads point at every block.

This module never imports gdb.  It scans memory in bulk through a Space (a core file mapped
with mmap, or large reads of a live process), filters candidate words by the heap's address range
and maps them to blocks with a sorted-array search.  numpy does this in whole arrays when it can
be imported; a pure-Python path gives identical answers, more slowly.
"""

import bisect
import collections
import mmap
import os
import re
import struct
import subprocess
from array import array

try:  # numpy is optional, as in dmem_core
    import numpy as np
except ImportError:  # pragma: no cover - depends on the host
    np = None

import dmem_core as core

HAVE_NUMPY = np is not None

UNSEEN, REACHED, DIRECT, INDIRECT = 0, 1, 2, 3
CLASS_NAMES = {REACHED: "reachable", DIRECT: "direct", INDIRECT: "indirect"}

# A level of a traversal smaller than this is expanded in Python: numpy's per-call cost would
# dominate on long chains such as a linked list.
SMALL_LEVEL = 48

# Words scanned per numpy pass: big enough to amortise the calls, small enough that the
# temporaries stay in cache-friendly sizes.
SCAN_CHUNK = 1 << 20

# Beyond the objects' own TLS images, glibc reserves a little static TLS for libraries loaded
# later and puts its thread descriptor (struct pthread) above the thread pointer; these bound the
# window scanned around each thread's fs_base.
TLS_SURPLUS = 4096
TCB_SIZE = 4096

# `dmem why` prints this many blocks at each end of a longer chain.
WHY_ENDS = 4

WORD_TYPES = {"u8": (1, "<u1", "B"), "u16": (2, "<u2", "H"), "u32": (4, "<u4", "I"),
              "u64": (8, "<u8", "Q")}


# --------------------------------------------------------------------------------------------
# ELF files and core files


PT_LOAD, PT_NOTE, PT_TLS = 1, 4, 7
PF_X, PF_W, PF_R = 1, 2, 4
SHT_SYMTAB, SHT_DYNSYM = 2, 11
NT_PRSTATUS, NT_FILE = 1, 0x46494C45
ET_EXEC, ET_DYN, ET_CORE = 2, 3, 4

# user_regs_struct, the register set in each NT_PRSTATUS note (x86_64).
PRSTATUS_REGS = ("r15", "r14", "r13", "r12", "rbp", "rbx", "r11", "r10", "r9", "r8", "rax", "rcx",
                 "rdx", "rsi", "rdi", "orig_rax", "rip", "cs", "eflags", "rsp", "ss", "fs_base",
                 "gs_base", "ds", "es", "fs", "gs")
PRSTATUS_PID = 32
PRSTATUS_REG_OFF = 112

Phdr = collections.namedtuple("Phdr", "type flags offset vaddr filesz memsz")


class ElfError(core.DmemError):
    pass


class Elf:
    """Program headers, notes and symbols of a 64-bit little-endian ELF file, mapped read-only."""

    def __init__(self, path):
        self.path = path
        try:
            with open(path, "rb") as f:
                self.data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError) as e:
            raise ElfError("cannot map %s: %s" % (path, getattr(e, "strerror", None) or e)) \
                from None
        d = self.data
        if len(d) < 64 or d[:4] != b"\x7fELF" or d[4] != 2 or d[5] != 1:
            raise ElfError("%s is not a 64-bit little-endian ELF file" % path)
        self.type = struct.unpack_from("<H", d, 16)[0]
        phoff, shoff = struct.unpack_from("<QQ", d, 32)
        phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", d, 54)
        self.phdrs = []
        for i in range(phnum):
            p = phoff + i * phentsize
            if p + 56 > len(d):
                break
            t, fl, off, va, _pa, fs, ms = struct.unpack_from("<IIQQQQQ", d, p)
            self.phdrs.append(Phdr(t, fl, off, va, fs, ms))
        self.sections = []
        for i in range(shnum if shoff and shentsize >= 64 else 0):
            p = shoff + i * shentsize
            if p + 64 > len(d):
                break
            self.sections.append(struct.unpack_from("<IIQQQQIIQQ", d, p))

    def notes(self):
        """(type, name, descriptor bytes) of every note in the PT_NOTE segments."""
        d = self.data
        for ph in self.phdrs:
            if ph.type != PT_NOTE:
                continue
            p, end = ph.offset, min(ph.offset + ph.filesz, len(d))
            while p + 12 <= end:
                namesz, descsz, kind = struct.unpack_from("<III", d, p)
                name_at = p + 12
                desc_at = name_at + (namesz + 3) // 4 * 4
                if desc_at + descsz > end:
                    break
                name = bytes(d[name_at:name_at + namesz]).rstrip(b"\0").decode("latin-1")
                yield kind, name, d[desc_at:desc_at + descsz]
                p = desc_at + (descsz + 3) // 4 * 4

    def symbols(self, prefix):
        """(name, value, size) of the defined symbols whose name starts with `prefix` (bytes),
        from .symtab and .dynsym, each name once."""
        d = self.data
        out = {}
        for sh in self.sections:
            _name, kind, _fl, _addr, off, size, link, _info, _align, entsize = sh
            if kind not in (SHT_SYMTAB, SHT_DYNSYM) or entsize != 24 or link >= len(self.sections):
                continue
            stroff, strsize = self.sections[link][4], self.sections[link][5]
            strtab = d[stroff:stroff + strsize]
            for st_name, _info, _other, shndx, value, ssize in struct.iter_unpack(
                    "<IBBHQQ", d[off:off + size - size % 24]):
                if shndx == 0 or not strtab.startswith(prefix, st_name):
                    continue
                end = strtab.find(b"\0", st_name)
                name = strtab[st_name:end if end >= 0 else len(strtab)].decode("latin-1")
                out.setdefault(name, (value, ssize))
        return [(n, v, s) for n, (v, s) in out.items()]

    def bias(self, mappings, prot=None):
        """Load bias of this file if it is loaded as a program or library at `mappings`
        ([(start, end, file offset)] of this file), else None.  `prot(addr)`, when given, tells
        the ELF-style permission bits (PF_R/W/X) of the memory at addr.

        Every PT_LOAD with file contents, code among them, must be mapped from its page-rounded
        file offset at its page-rounded address plus the bias, and code must be executable
        there.  A file mapped some other way (a symbolizer maps whole libraries and separate
        debug files read-only) is not a loaded object and has no roots.
        """
        loads = [p for p in self.phdrs if p.type == PT_LOAD and p.filesz]
        if not any(p.flags & PF_X for p in loads) or self.type not in (ET_EXEC, ET_DYN):
            return None
        page = 4096
        first = min(loads, key=lambda p: p.vaddr)
        for start, _end, off in mappings:
            if off != first.offset & ~(page - 1):
                continue
            bias = 0 if self.type == ET_EXEC else start - (first.vaddr & ~(page - 1))
            if all(self._mapped(p, bias, mappings, page, prot) for p in loads):
                return bias
        return None

    @staticmethod
    def _mapped(p, bias, mappings, page, prot):
        at = bias + (p.vaddr & ~(page - 1))
        want = p.offset & ~(page - 1)
        if not any(s <= at < e and off + (at - s) == want for s, e, off in mappings):
            return False
        return prot is None or not p.flags & PF_X or bool(prot(at) & PF_X)


Thread = collections.namedtuple("Thread", "tid regs")
Mapping = collections.namedtuple("Mapping", "start end offset path")


class CoreFile(Elf):
    """A core file: its memory segments, the files mapped (NT_FILE) and the threads' registers."""

    def __init__(self, path):
        super().__init__(path)
        if self.type != ET_CORE:
            raise ElfError("%s is not a core file" % path)
        self.loads = sorted((p for p in self.phdrs if p.type == PT_LOAD), key=lambda p: p.vaddr)
        self.mappings = []
        self.threads = []
        for kind, name, desc in self.notes():
            if name != "CORE":
                continue
            if kind == NT_PRSTATUS and len(desc) >= PRSTATUS_REG_OFF + 8 * len(PRSTATUS_REGS):
                tid = struct.unpack_from("<I", desc, PRSTATUS_PID)[0]
                vals = struct.unpack_from("<%dQ" % len(PRSTATUS_REGS), desc, PRSTATUS_REG_OFF)
                self.threads.append(Thread(tid, dict(zip(PRSTATUS_REGS, vals))))
            elif kind == NT_FILE and len(desc) >= 16:
                count, page = struct.unpack_from("<QQ", desc, 0)
                names = bytes(desc[16 + 24 * count:]).split(b"\0")
                for i in range(count):
                    s, e, off = struct.unpack_from("<QQQ", desc, 16 + 24 * i)
                    path_i = names[i].decode("utf-8", "replace") if i < len(names) else ""
                    self.mappings.append(Mapping(s, e, off * page, path_i))


# --------------------------------------------------------------------------------------------
# Bulk memory


class Space:
    """The target's memory for bulk scans: sorted readable pieces [start, end) and whole-range
    reads.  Ranges are read once and scanned as arrays, never word by word.

    `mapped` are the ranges the process had mapped, readable or not.  In a core, memory that was
    mapped but not dumped (never written, or file contents the kernel leaves out) holds no heap
    pointers, so a scan skips it; only a range that was not mapped at all is reported.
    """

    def __init__(self, pieces, mapped=None):
        self.pieces = sorted((s, e) for s, e in pieces if e > s)
        self._starts = [p[0] for p in self.pieces]
        # (start, end, PF_R/W/X bits) of every mapping; without them, the readable pieces.
        self.mapped = sorted(mapped) if mapped is not None else \
            [(s, e, PF_R) for s, e in self.pieces]
        self._mstarts = [m[0] for m in self.mapped]

    def prot(self, addr):
        """Permission bits (PF_R/W/X) of the mapping holding addr, 0 if none."""
        k = bisect.bisect_right(self._mstarts, addr) - 1
        if k >= 0 and addr < self.mapped[k][1]:
            return self.mapped[k][2]
        return 0

    def parts(self, start, end):
        """([(s, e)] readable parts of [start, end), bytes of it that were not mapped)."""
        out = []
        k = max(bisect.bisect_right(self._starts, start) - 1, 0)
        while k < len(self.pieces) and self.pieces[k][0] < end:
            s, e = max(start, self.pieces[k][0]), min(end, self.pieces[k][1])
            if s < e:
                out.append((s, e))
            k += 1
        covered = 0
        for s, e, _ in self.mapped:
            if e > start and s < end:
                covered += min(end, e) - max(start, s)
        return out, max(0, (end - start) - covered)

    def piece_of(self, addr):
        """The readable piece holding `addr`, or None."""
        k = bisect.bisect_right(self._starts, addr) - 1
        if k >= 0 and addr < self.pieces[k][1]:
            return self.pieces[k]
        return None

    def extent(self, addr):
        """End of the run of contiguous readable pieces starting at the one holding `addr`."""
        k = bisect.bisect_right(self._starts, addr) - 1
        if k < 0 or addr >= self.pieces[k][1]:
            return None
        end = self.pieces[k][1]
        while k + 1 < len(self.pieces) and self.pieces[k + 1][0] == end:
            k += 1
            end = self.pieces[k][1]
        return end

    def readable(self, start, end):
        e = self.extent(start)
        return e is not None and end <= e

    def buffer(self, start, end):
        """A bytes-like object holding exactly [start, end); ReadError if not all readable."""
        raise NotImplementedError

    def words(self, start, end, use_numpy):
        """The aligned 8-byte words of [start, end) (both multiples of 8): a numpy uint64 array,
        or a memoryview of unsigned 64-bit integers."""
        buf = self.buffer(start, end)
        if use_numpy:
            return np.frombuffer(buf, dtype="<u8", count=(end - start) // 8)
        return memoryview(buf).cast("B").cast("Q")


class CoreSpace(Space):
    """Memory of a core file, read straight from the file's mapping (no copies)."""

    def __init__(self, corefile):
        self.core = corefile
        segs = [(p.vaddr, p.vaddr + p.filesz, p.offset) for p in corefile.loads if p.filesz]
        self._file_off = {s: off for s, _e, off in segs}
        super().__init__([(s, e) for s, e, _ in segs],
                         [(p.vaddr, p.vaddr + p.memsz, p.flags) for p in corefile.loads])
        self._view = memoryview(corefile.data)

    def buffer(self, start, end):
        parts = []
        a = start
        while a < end:
            p = self.piece_of(a)
            if p is None:
                raise core.ReadError(a, end - a)
            b = min(end, p[1])
            off = self._file_off[p[0]] + a - p[0]
            parts.append(self._view[off:off + b - a])
            a = b
        if len(parts) == 1:
            return parts[0]
        return b"".join(parts)


class ReaderSpace(Space):
    """Memory read through a read(addr, n) function (gdb on a live process), in large pieces."""

    CHUNK = 64 << 20

    def __init__(self, read, pieces, mapped=None):
        super().__init__(pieces, mapped)
        self._read = read

    def buffer(self, start, end):
        if not self.readable(start, end):
            raise core.ReadError(start, end - start)
        parts = []
        a = start
        while a < end:
            n = min(self.CHUNK, end - a)
            data = self._read(a, n)
            if len(data) != n:
                raise core.ReadError(a, n)
            parts.append(data)
            a += n
        return parts[0] if len(parts) == 1 else b"".join(bytes(p) for p in parts)


def parse_maps(text):
    """From /proc/PID/maps text: the file mappings, the readable ranges and all the ranges:
    ([Mapping], [(start, end)], [(start, end)])."""
    maps, pieces, mapped = [], [], []
    for line in text.splitlines():
        f = line.split(None, 5)
        if len(f) < 5 or "-" not in f[0]:
            continue
        s, e = (int(x, 16) for x in f[0].split("-"))
        perms, off = f[1], int(f[2], 16)
        path = f[5].strip() if len(f) > 5 else ""
        if path.startswith("/"):
            maps.append(Mapping(s, e, off, path))
        bits = sum(bit for ch, bit in zip(perms[:3], (PF_R, PF_W, PF_X)) if ch != "-")
        mapped.append((s, e, bits))
        if perms.startswith("r") and path != "[vvar]":
            pieces.append((s, e))
    return maps, pieces, mapped


# --------------------------------------------------------------------------------------------
# The loaded objects and the roots


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


def loaded_objects(mappings, open_elf=Elf, space=None):
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
        except (core.DmemError, OSError):
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


Root = collections.namedtuple("Root", "kind where start end value")

# Register names worth scanning: the general-purpose ones (segment registers and flags cannot
# hold a pointer).
POINTER_REGS = ("rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rbp", "rsp", "r8", "r9", "r10", "r11",
                "r12", "r13", "r14", "r15", "rip", "orig_rax", "fs_base", "gs_base")


def gather_roots(objects, threads, space, exclude=None):
    """The roots, in scan order, and the objects left out (libdmem, found by the address
    `exclude`, its layout descriptor)."""
    roots = []
    skipped = []
    tls = 0
    for obj in objects:
        tls += obj.tls_size()
        if exclude is not None and obj.contains(exclude):
            skipped.append(obj)
            continue
        for s, e in obj.writable():
            roots.append(Root("data", "writable data of %s" % obj.name, s, e, None))
    for t in threads:
        sp = t.regs.get("rsp")
        piece = space.piece_of(sp) if sp else None
        if piece is not None:
            roots.append(Root("stack", "stack of thread %d" % t.tid, sp, piece[1], None))
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
    return roots, skipped


# --------------------------------------------------------------------------------------------
# The block graph


class PartlyUnread(core.ReadError):
    """Part of a range was not mapped at all; carries what the rest of it gave."""

    def __init__(self, addrs, tgts):
        Exception.__init__(self, "part of the range is not mapped")
        self.addrs = addrs
        self.tgts = tgts


def _aligned(start, end):
    return (start + 7) & ~7, end & ~7


class Graph:
    """Live blocks sorted by address and the pointers between them (CSR arrays).

    `starts` and `sizes` are the blocks' user addresses and sizes in address order.  Edges run
    from block to block; `indptr[i]:indptr[i + 1]` are block i's targets in `dst`, in the order
    of the words that point to them.
    """

    def __init__(self, starts, sizes, space, use_numpy):
        self.np = use_numpy
        self.space = space
        self.n = len(starts)
        self.unread = []  # blocks whose contents are not all in memory (treated as empty)
        if use_numpy:
            self.starts = np.asarray(starts, dtype=np.uint64)
            self.sizes = np.asarray(sizes, dtype=np.uint64)
            self.ends = np.maximum(self.starts + self.sizes, self.starts + np.uint64(1))
            self.wends = (self.starts + self.sizes) & ~np.uint64(7)
            self.lo = int(self.starts[0]) if self.n else 0
            self.hi = int(self.ends.max()) if self.n else 0
        else:
            self.starts = [int(s) for s in starts]
            self.sizes = [int(s) for s in sizes]
            self.ends = [max(s + z, s + 1) for s, z in zip(self.starts, self.sizes)]
            self.wends = [(s + z) & ~7 for s, z in zip(self.starts, self.sizes)]
            self.lo = self.starts[0] if self.n else 0
            self.hi = max(self.ends) if self.n else 0
        self._runs = None
        self._words = {}
        self.indptr = self.dst = None

    def edges(self):
        """Scans every block once for pointers to blocks (done on first use)."""
        if self.indptr is None:
            self._build()
        return self.indptr, self.dst

    # ---- finding targets

    def find(self, addr):
        """Index of the block holding `addr` (interior pointers count), or -1."""
        if not self.n or not self.lo <= addr < self.hi:
            return -1
        if self.np:
            k = int(np.searchsorted(self.starts, np.uint64(addr), side="right")) - 1
        else:
            k = bisect.bisect_right(self.starts, addr) - 1
        return k if k >= 0 and addr < int(self.ends[k]) else -1

    def _targets_np(self, vals):
        """(positions in vals, block index) of the values that point into a block."""
        span = np.uint64(self.hi - self.lo)
        pos = np.flatnonzero((vals - np.uint64(self.lo)) < span)
        if not len(pos):
            return pos, pos
        v = vals[pos]
        k = np.searchsorted(self.starts, v, side="right").astype(np.int64) - 1
        ok = v < self.ends[np.maximum(k, 0)]
        ok &= k >= 0
        return pos[ok], k[ok]

    def refs(self, start, end):
        """Words in [start, end) that point into blocks: (word addresses, block indices), as
        numpy arrays or lists.  Parts of the range not in memory are skipped; ReadError if some
        of it was not even mapped."""
        a, b = _aligned(start, end)
        parts, missing = self.space.parts(a, b)
        addrs, tgts = [], []
        for s, e in parts:
            s, e = _aligned(s, e)
            if e > s and self.n:
                x, y = self._refs(s, e)
                addrs.append(x)
                tgts.append(y)
        if self.np:
            addrs = np.concatenate(addrs) if addrs else np.zeros(0, np.uint64)
            tgts = np.concatenate(tgts) if tgts else np.zeros(0, np.int64)
        else:
            addrs = [x for part in addrs for x in part]
            tgts = [x for part in tgts for x in part]
        if missing:
            raise PartlyUnread(addrs, tgts)
        return addrs, tgts

    def _refs(self, a, b):
        w = self.space.words(a, b, self.np)
        if self.np:
            addrs, tgts = [], []
            for c in range(0, len(w), SCAN_CHUNK):
                pos, k = self._targets_np(w[c:c + SCAN_CHUNK])
                addrs.append(np.uint64(a + 8 * c) + pos.astype(np.uint64) * np.uint64(8))
                tgts.append(k)
            return np.concatenate(addrs), np.concatenate(tgts)
        addrs, tgts = [], []
        lo, hi, starts, ends = self.lo, self.hi, self.starts, self.ends
        for i, v in enumerate(w):
            if lo <= v < hi:
                k = bisect.bisect_right(starts, v) - 1
                if v < ends[k]:
                    addrs.append(a + 8 * i)
                    tgts.append(k)
        return addrs, tgts

    # ---- the edges between blocks

    def runs(self):
        """[(first block, last block + 1, base address, end)]: blocks grouped by the readable
        memory holding them, each group read and scanned as one range."""
        if self._runs is not None:
            return self._runs
        runs = []
        starts, wends = self.starts, self.wends
        i = 0
        while i < self.n:
            s = int(starts[i])
            ext = self.space.extent(s)
            j = i
            if ext is not None:
                if self.np:
                    j = int(np.searchsorted(starts, np.uint64(ext), side="left"))
                else:
                    j = bisect.bisect_left(starts, ext)
                # The last block may run past the readable memory (a corrupt size, or a core
                # cut short); it is then left out, and on its own it counts as unread.
                while j > i and int(wends[j - 1]) > ext:
                    j -= 1
            if j == i:
                self.unread.append(i)
                i += 1
                continue
            base = s & ~7
            end = int(wends[i:j].max()) if self.np else max(wends[i:j])
            runs.append((i, j, base, min(max(end, base), ext)))
            i = j
        self._runs = runs
        return runs

    def run_words(self, r):
        """The words of run r (kept: a live process's memory is copied only once)."""
        w = self._words.get(r)
        if w is None:
            i, j, base, end = self.runs()[r]
            w = self.space.words(base, end, self.np)
            if not isinstance(self.space, CoreSpace):
                self._words[r] = w
        return w

    def _build(self):
        if self.np:
            self._build_np()
        else:
            self._build_pure()

    def _build_np(self):
        srcs, dsts = [], []
        starts, wends = self.starts, self.wends
        for r, (i, j, base, end) in enumerate(self.runs()):
            w = self.run_words(r)
            for c in range(0, len(w), SCAN_CHUNK):
                pos, k = self._targets_np(w[c:c + SCAN_CHUNK])
                if not len(pos):
                    continue
                addr = np.uint64(base + 8 * c) + pos.astype(np.uint64) * np.uint64(8)
                s = np.searchsorted(starts[i:j], addr, side="right").astype(np.int64) - 1 + i
                ok = (s >= i) & (addr < wends[np.maximum(s, i)])
                srcs.append(s[ok])
                dsts.append(k[ok])
        src = np.concatenate(srcs) if srcs else np.zeros(0, np.int64)
        # Runs are scanned in address order, so the sources come out sorted.
        self.dst = np.concatenate(dsts).astype(np.int64) if dsts else np.zeros(0, np.int64)
        self.indptr = np.zeros(self.n + 1, dtype=np.int64)
        if self.n:
            np.cumsum(np.bincount(src, minlength=self.n), out=self.indptr[1:])

    def _build_pure(self):
        dst = array("q")
        indptr = array("q", [0])
        lo, hi, starts, ends, wends = self.lo, self.hi, self.starts, self.ends, self.wends
        runs = self.runs()
        r = 0
        for b in range(self.n):
            while r < len(runs) and runs[r][1] <= b:
                r += 1
            if r < len(runs) and runs[r][0] <= b:
                base = runs[r][2]
                w = self.run_words(r)
                s = (starts[b] - base) // 8
                for v in w[s:max(s, (wends[b] - base) // 8)]:
                    if lo <= v < hi:
                        k = bisect.bisect_right(starts, v) - 1
                        if v < ends[k]:
                            dst.append(k)
            indptr.append(len(dst))
        self.dst = dst
        self.indptr = indptr

    # ---- contents, for types and histograms

    def _by_run(self, idx):
        """Yields (run number, base, the blocks of `idx` in that run)."""
        if self.np:
            idx = np.sort(np.asarray(idx, dtype=np.int64))
            for r, (i, j, base, _end) in enumerate(self.runs()):
                a, b = np.searchsorted(idx, [i, j])
                if b > a:
                    yield r, base, idx[a:b]
        else:
            idx = sorted(int(i) for i in idx)
            for r, (i, j, base, _end) in enumerate(self.runs()):
                a, b = bisect.bisect_left(idx, i), bisect.bisect_left(idx, j)
                if b > a:
                    yield r, base, idx[a:b]

    def fields(self, idx, offset, width):
        """(blocks, values): the `width`-byte little-endian field at `offset` of each block in
        `idx` big enough to hold it (blocks whose memory is unreadable are left out)."""
        if self.np:
            idx = np.asarray(idx, dtype=np.int64)
            idx = idx[self.sizes[idx] >= np.uint64(offset + width)]
            out_b, out_v = [np.zeros(0, np.int64)], [np.zeros(0, np.uint64)]
            for r, base, sel in self._by_run(idx):
                raw = self.run_words(r).view(np.uint8)
                at = (self.starts[sel] - np.uint64(base) + np.uint64(offset)).astype(np.int64)
                v = np.zeros(len(sel), dtype=np.uint64)
                for k in range(width):
                    v |= raw[at + k].astype(np.uint64) << np.uint64(8 * k)
                out_b.append(sel)
                out_v.append(v)
            return np.concatenate(out_b), np.concatenate(out_v)
        code = "<" + {1: "B", 2: "H", 4: "I", 8: "Q"}[width]
        out_b, out_v = [], []
        for r, base, sel in self._by_run(idx):
            raw = self.run_words(r).cast("B")
            for b in sel:
                if self.sizes[b] >= offset + width:
                    out_b.append(b)
                    out_v.append(struct.unpack_from(code, raw, self.starts[b] - base + offset)[0])
        return out_b, out_v

    def word_histogram(self, idx, limit):
        """Histogram of every aligned word of the blocks in `idx`: see histogram()."""
        if self.np:
            parts = []
            for r, base, sel in self._by_run(idx):
                w = self.run_words(r)
                a = ((self.starts[sel] - np.uint64(base)) >> np.uint64(3)).astype(np.int64)
                b = ((self.wends[sel] - np.uint64(base)) >> np.uint64(3)).astype(np.int64)
                lens = np.maximum(b - a, 0)
                # Blocks in batches of about SCAN_CHUNK words, gathered with one index array.
                cum = np.cumsum(lens)
                k0 = 0
                while k0 < len(sel):
                    done = int(cum[k0 - 1]) if k0 else 0
                    k1 = max(int(np.searchsorted(cum, done + SCAN_CHUNK, side="right")), k0 + 1)
                    la = lens[k0:k1]
                    tot = int(la.sum())
                    if tot:
                        off = np.repeat(a[k0:k1] - (np.cumsum(la) - la), la) \
                            + np.arange(tot, dtype=np.int64)
                        parts.append(w[off])
                    k0 = k1
            return histogram(np.concatenate(parts) if parts else np.zeros(0, np.uint64), limit)
        words = []
        for r, base, sel in self._by_run(idx):
            w = self.run_words(r)
            for b in sel:
                s = (self.starts[b] - base) // 8
                words.extend(w[s:max(s, (self.wends[b] - base) // 8)])
        return histogram(words, limit)


def histogram(values, limit):
    """(top values, their counts, number of values, number of distinct values): the `limit`
    most frequent values (all for 0), most frequent first, ties by value."""
    if np is not None and isinstance(values, np.ndarray):
        v = np.sort(values)
        n = len(v)
        if not n:
            return [], [], 0, 0
        first = np.flatnonzero(np.concatenate(([True], v[1:] != v[:-1])))
        counts = np.diff(np.append(first, n))
        vals = v[first]
        if limit and limit < len(vals):
            # The limit-th highest count; everything above it, then its ties by value.
            cut = np.partition(counts, len(counts) - limit)[len(counts) - limit]
            above = np.flatnonzero(counts > cut)
            ties = np.flatnonzero(counts == cut)[:limit - len(above)]
            pick = np.concatenate((above, ties))
        else:
            pick = np.arange(len(vals))
        order = pick[np.lexsort((vals[pick], -counts[pick]))]
        return vals[order].tolist(), counts[order].tolist(), n, len(vals)
    c = collections.Counter(values)
    items = sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))
    if limit:
        items = items[:limit]
    return [k for k, _ in items], [v for _, v in items], sum(c.values()), len(c)


# --------------------------------------------------------------------------------------------
# Reachability


class Reach:
    """Classifies every block of a Graph from its roots.

    `state[k]` is REACHED, DIRECT or INDIRECT.  For a reached block `parent[k]` is the block that
    first pointed to it in a breadth-first mark (so chains are shortest), or -2 - r for the r-th
    entry of `root_refs`: (root index, address of the word, None for a register).

    Leaked blocks are split without replaying reach.rs's floods one by one.  There, a leaked
    block ends up in the flood of the lowest-addressed leaked block that can reach it (its
    *owner*; a block no lower one reaches owns itself and leads a flood), and a lead stays
    direct exactly when every leaked block pointing to it is in its own flood.  So owners are
    computed as the minimum over each block's leaked ancestors, by relaxing edges: whole-array
    rounds while much changes, then a worklist.
    """

    # Whole-array rounds of owner relaxation before the rest is left to a worklist: enough for
    # wide shallow structures; a long chain gains one block per round and is cheaper by worklist.
    ROUNDS = 6

    def __init__(self, graph, roots):
        graph.edges()
        self.g = graph
        self.roots = roots
        n = graph.n
        self.state = bytearray(n)
        self.parent = array("q", [-1]) * n
        self.root_refs = []
        self.unread_roots = []
        self._rev = None
        if graph.np:
            self._st = np.frombuffer(self.state, dtype=np.uint8) if n else np.zeros(0, np.uint8)
            self._par = np.frombuffer(self.parent, dtype=np.int64) if n else np.zeros(0, np.int64)
        self._mark()
        self._classify_leaks()

    # ---- the mark from the roots: breadth first, one level at a time, in numpy for wide levels
    # and in Python for narrow ones (numpy's per-call cost would dominate on a linked list)

    @staticmethod
    def _expand_np(ip, dst, level):
        a = ip[level]
        cnt = ip[level + 1] - a
        tot = int(cnt.sum())
        if not tot:
            return None, None
        rep = np.repeat(level, cnt)
        off = np.repeat(a - (np.cumsum(cnt) - cnt), cnt) + np.arange(tot, dtype=np.int64)
        return rep, dst[off]

    @staticmethod
    def _first(d, mask):
        """Positions of the first occurrence of each distinct value of d[mask], in order."""
        pos = np.flatnonzero(mask)
        if not len(pos):
            return pos
        _, first = np.unique(d[pos], return_index=True)
        first.sort()
        return pos[first]

    def _bfs(self, level):
        state, parent = self.state, self.parent
        use_np = self.g.np
        ip, dst = self.g.indptr, self.g.dst
        ipv = memoryview(ip).cast("B").cast("q") if use_np else ip
        dsv = memoryview(dst).cast("B").cast("q") if use_np and len(dst) else dst
        while len(level):
            if use_np and len(level) >= SMALL_LEVEL:
                level = np.asarray(level, dtype=np.int64)
                rep, d = self._expand_np(ip, dst, level)
                if rep is None:
                    break
                take = self._first(d, self._st[d] == UNSEEN)
                level = d[take]
                self._st[level] = REACHED
                self._par[level] = rep[take]
                continue
            nxt = []
            for u in (level if isinstance(level, list) else level.tolist()):
                for e in range(ipv[u], ipv[u + 1]):
                    v = dsv[e]
                    if state[v] == UNSEEN:
                        state[v] = REACHED
                        parent[v] = u
                        nxt.append(v)
            level = nxt

    def _mark(self):
        g = self.g
        level = []
        for r, root in enumerate(self.roots):
            if root.kind == "register":
                k = g.find(root.value)
                addrs, tgts = ([None], [k]) if k >= 0 else ([], [])
            else:
                try:
                    addrs, tgts = g.refs(root.start, root.end)
                except PartlyUnread as e:
                    self.unread_roots.append(root)
                    addrs, tgts = e.addrs, e.tgts
            if g.np and not isinstance(tgts, list):
                if not len(tgts):
                    continue
                first = self._first(tgts, self._st[tgts] == UNSEEN).tolist()
                addrs = [int(addrs[p]) for p in first]
                tgts = [int(tgts[p]) for p in first]
            for a, k in zip(addrs, tgts):
                if self.state[k] == UNSEEN:
                    self.state[k] = REACHED
                    self.parent[k] = -2 - len(self.root_refs)
                    self.root_refs.append((r, a))
                    level.append(k)
        self._bfs(level)

    # ---- direct and indirect

    def _classify_leaks(self):
        g = self.g
        n = g.n
        if g.np:
            leaked = self._st == UNSEEN
            ip = g.indptr
            src = np.repeat(np.arange(n, dtype=np.int64), ip[1:] - ip[:-1])
            keep = leaked[src] & leaked[g.dst] if len(g.dst) else np.zeros(0, bool)
            src, dst = src[keep], g.dst[keep]
            owner = np.arange(n, dtype=np.int64)
            changed = np.flatnonzero(leaked)
            for _ in range(self.ROUNDS):
                cand = owner[src]
                better = cand < owner[dst]
                if not better.any():
                    changed = changed[:0]
                    break
                d, c = dst[better], cand[better]
                order = np.lexsort((c, d))
                d, c = d[order], c[order]
                head = np.ones(len(d), dtype=bool)
                head[1:] = d[1:] != d[:-1]
                changed = d[head]
                owner[changed] = c[head]
            if len(changed):
                # A worklist finishes what the rounds left: every edge out of a block whose
                # owner just dropped may carry the drop further.
                sub_ip = np.zeros(n + 1, dtype=np.int64)
                np.cumsum(np.bincount(src, minlength=n), out=sub_ip[1:])
                own = array("q", owner.tobytes())
                self._relax(own, memoryview(sub_ip).cast("B").cast("q"),
                            memoryview(np.ascontiguousarray(dst)).cast("B").cast("q")
                            if len(dst) else [], sorted(changed.tolist()))
                owner = np.frombuffer(own, dtype=np.int64)
            lead = leaked & (owner == np.arange(n, dtype=np.int64))
            # A lead that a block of another flood points to is demoted.
            hit = dst[owner[src] != dst]
            lead[hit] = False
            self._st[leaked] = INDIRECT
            self._st[lead] = DIRECT
            return
        st, ip, dsts = self.state, g.indptr, g.dst
        leaked = [k for k in range(n) if st[k] == UNSEEN]
        sub = {}
        for u in leaked:
            sub[u] = [dsts[e] for e in range(ip[u], ip[u + 1]) if st[dsts[e]] == UNSEEN]
        owner = array("q", range(n))
        sub_ip = array("q", [0])
        sub_dst = array("q")
        for u in range(n):
            sub_dst.extend(sub.get(u, ()))
            sub_ip.append(len(sub_dst))
        self._relax(owner, sub_ip, sub_dst, leaked)
        lead = {u for u in leaked if owner[u] == u}
        for u in leaked:
            for v in sub[u]:
                if owner[u] != v:
                    lead.discard(v)
        for u in leaked:
            st[u] = DIRECT if u in lead else INDIRECT

    @staticmethod
    def _relax(owner, ip, dst, seeds):
        """Lowers owner[v] to owner[u] along every edge u -> v until nothing changes, starting
        from the blocks in `seeds` (in address order, so that a chain built in address order is
        settled in one pass)."""
        queue = collections.deque(seeds)
        queued = set(seeds)
        pop, push, add, drop = queue.popleft, queue.append, queued.add, queued.discard
        while queue:
            u = pop()
            drop(u)
            o = owner[u]
            for e in range(ip[u], ip[u + 1]):
                v = dst[e]
                if o < owner[v]:
                    owner[v] = o
                    if v not in queued:
                        add(v)
                        push(v)

    # ---- answers

    def counts(self):
        c = collections.Counter(self.state)
        return c[REACHED], c[DIRECT], c[INDIRECT]

    def chain(self, k):
        """The blocks from the root, or from a direct leak, down to block k; and the root
        reference (root index, word address) for a reached block, else None."""
        if self.state[k] == REACHED:
            out = [k]
            seen = {k}
            p = self.parent[k]
            while p >= 0 and p not in seen:
                out.append(p)
                seen.add(p)
                p = self.parent[p]
            out.reverse()
            return out, (self.root_refs[-2 - p] if p <= -2 else None)
        return self._leak_chain(k), None

    def _reverse(self):
        """Edges by target: (indptr, sources), sources in increasing order."""
        if self._rev is None:
            g = self.g
            n = g.n
            if g.np:
                ip = g.indptr
                src = np.repeat(np.arange(n, dtype=np.int64), ip[1:] - ip[:-1])
                order = np.lexsort((src, g.dst))
                rip = np.zeros(n + 1, dtype=np.int64)
                np.cumsum(np.bincount(g.dst, minlength=n), out=rip[1:])
                self._rev = (rip.tolist(), src[order].tolist())
            else:
                ins = [[] for _ in range(n)]
                for u in range(n):
                    for e in range(g.indptr[u], g.indptr[u + 1]):
                        ins[g.dst[e]].append(u)
                rip = [0]
                rsrc = []
                for v in range(n):
                    rsrc.extend(sorted(ins[v]))
                    rip.append(len(rsrc))
                self._rev = (rip, rsrc)
        return self._rev

    def _leak_chain(self, k):
        """A shortest chain of leaked blocks from a direct leak to leaked block k (searching
        backwards from k; every indirect leak hangs off some direct one)."""
        if self.state[k] == DIRECT:
            return [k]
        rip, rsrc = self._reverse()
        state = self.state
        came = {k: None}
        level = [k]
        while level:
            nxt = []
            for v in level:
                for e in range(rip[v], rip[v + 1]):
                    u = rsrc[e]
                    if u in came or state[u] < DIRECT:
                        continue
                    came[u] = v
                    if state[u] == DIRECT:
                        out = [u]
                        while came[out[-1]] is not None:
                            out.append(came[out[-1]])
                        return out
                    nxt.append(u)
            level = nxt
        return [k]


# --------------------------------------------------------------------------------------------
# Names of C++ types


def demangle_with_cxxfilt(names):
    """{mangled: demangled} through c++filt when it is installed; names it cannot read stay."""
    names = list(names)
    if not names:
        return {}
    try:
        out = subprocess.run(["c++filt"], input="\n".join(names) + "\n", capture_output=True,
                             text=True, timeout=30, check=False).stdout.splitlines()
    except (OSError, subprocess.SubprocessError):
        out = []
    if len(out) != len(names):
        return {n: n for n in names}
    return dict(zip(names, out))


def type_name(mangled, demangled):
    """The type a vtable symbol belongs to: "A" for "vtable for A" (_ZTV1A)."""
    if demangled and demangled.startswith("vtable for "):
        return demangled[len("vtable for "):]
    return mangled


class Vtables:
    """Every `vtable for X` symbol (_ZTV...) of the loaded objects, by address."""

    def __init__(self, objects, demangle=None):
        rows = []
        for obj in objects:
            try:
                syms = obj.elf.symbols(b"_ZTV")
            except (struct.error, ValueError, IndexError):
                continue
            for name, value, size in syms:
                start = obj.bias + value
                # A vtable symbol without a size still covers its first entries.
                rows.append((start, start + (size or 24), name, obj.name))
        rows.sort()
        self.starts = [r[0] for r in rows]
        self.ends = [r[1] for r in rows]
        self.symbols = [r[2] for r in rows]
        self.objects = [r[3] for r in rows]
        self._demangle = demangle or demangle_with_cxxfilt
        self._names = {}

    def __len__(self):
        return len(self.starts)

    def lookup(self, values, use_numpy):
        """Vtable number of each value (-1 where it is not inside a vtable)."""
        if use_numpy:
            v = np.asarray(values, dtype=np.uint64)
            if not len(self.starts):
                return np.full(len(v), -1, dtype=np.int64)
            st = np.asarray(self.starts, dtype=np.uint64)
            en = np.asarray(self.ends, dtype=np.uint64)
            k = np.searchsorted(st, v, side="right").astype(np.int64) - 1
            ok = (k >= 0) & (v < en[np.maximum(k, 0)])
            return np.where(ok, k, -1)
        out = []
        for v in values:
            k = bisect.bisect_right(self.starts, v) - 1
            out.append(k if k >= 0 and v < self.ends[k] else -1)
        return out

    def type_of_symbol(self, symbol):
        """The type name of a mangled vtable symbol given by the user (_ZTV1A), if known."""
        for k, m in enumerate(self.symbols):
            if m == symbol:
                return self.names([k])[k]
        return None

    def names(self, ks):
        """{vtable number: type name}, demangling only what is asked for."""
        want = sorted({self.symbols[k] for k in ks} - set(self._names))
        if want:
            got = self._demangle(want) or {}
            for m in want:
                self._names[m] = type_name(m, got.get(m))
        return {k: self._names[self.symbols[k]] for k in ks}


# --------------------------------------------------------------------------------------------
# The commands' answers


class Target:
    """What a scan needs besides the lists: bulk memory, the roots, the loaded objects (for
    vtables), libdmem's own objects (left out of the roots), and two optional name services:
    symbol_at(addr) -> text for a data or code address, demangle([names]) -> {name: text}."""

    def __init__(self, space, roots, objects=(), skipped=(), symbol_at=None, demangle=None,
                 notes=()):
        self.space = space
        self.roots = roots
        self.objects = list(objects)
        self.skipped = list(skipped)
        self.symbol_at = symbol_at
        self.demangle = demangle
        self.notes = list(notes)


def _hex(v):
    return "0x%x" % int(v)


class LeakOptions(core.Options):
    def __init__(self):
        super().__init__()
        self.leaks = False
        self.vtable = None
        self.offset = None
        self.type = None


LEAK_FLAGS = ("--json", "--leaks")


def parse_leak_args(argstr, allowed=(), positional=0, usage=""):
    """dmem_core's parse_args, plus this module's options: --leaks, --vtable X, --offset N and
    --type u8|u16|u32|u64."""
    words = core.split_words(argstr or "", usage)
    o = LeakOptions()
    rest = []
    it = iter(words)
    for w in it:
        name, eq, val = w.partition("=")
        if name not in ("--leaks", "--vtable", "--offset", "--type") or name not in allowed:
            rest.append(w)
            continue
        if name == "--leaks":
            if eq:
                raise core.UsageError("--leaks takes no value")
            o.leaks = True
            continue
        if not eq:
            val = next(it, None)
            if val is None:
                raise core.UsageError("%s needs a value (usage: %s)" % (name, usage))
        if name == "--vtable":
            o.vtable = val
        elif name == "--offset":
            o.offset = core._number(name, val)
        else:
            if val not in WORD_TYPES:
                raise core.UsageError("--type is one of u8, u16, u32, u64, not %r" % val)
            o.type = val
    base = core.parse_args(" ".join(_quote(w) for w in rest),
                           tuple(a for a in allowed if a not in ("--leaks", "--vtable", "--offset",
                                                                  "--type")),
                           positional, usage)
    for k, v in vars(base).items():
        setattr(o, k, v)
    return o


def _quote(w):
    if not w or any(c.isspace() or c in "'\"" for c in w):
        q = "'" if "'" not in w else '"'
        return q + w + q
    return w


class Leaks:
    """`dmem leaks`, `types`, `words` and `why` over one dmem_core.Analysis and one Target.

    Blocks are handled here in address order (position k); `order[k]` is the same block's index
    in dmem_core's Blocks, whose selections, groups and filters are reused for the output.
    """

    def __init__(self, analysis, target):
        self.an = analysis
        self.heap = analysis.heap
        self.t = target
        self.np = self.heap.backend == "numpy"
        self.b = self.heap.blocks()
        idx = self.heap.index()
        hs = self.heap.layout.header_size
        if self.np:
            starts = np.asarray(idx.hdr, dtype=np.uint64) + np.uint64(hs)
            sizes = np.asarray(idx.size, dtype=np.uint64)
            self.order = np.asarray(idx.order, dtype=np.int64)
            self.rank = np.empty(len(self.order), dtype=np.int64)
            self.rank[self.order] = np.arange(len(self.order), dtype=np.int64)
        else:
            starts = [int(h) + hs for h in idx.hdr]
            sizes = [int(z) for z in idx.size]
            self.order = [int(i) for i in idx.order]
            self.rank = [0] * len(self.order)
            for k, i in enumerate(self.order):
                self.rank[i] = k
        self.graph = Graph(starts, sizes, target.space, self.np)
        self._reach = None
        self._vtables = None
        self._types = None

    # ---- shared pieces

    def reach(self):
        if self._reach is None:
            self._reach = Reach(self.graph, self.t.roots)
        return self._reach

    def vtables(self):
        if self._vtables is None:
            self._vtables = Vtables(self.t.objects, self.t.demangle)
        return self._vtables

    def positions(self, leaks):
        """Positions (address order) of every live block, or of the leaked ones."""
        n = self.graph.n
        if not leaks:
            return np.arange(n, dtype=np.int64) if self.np else list(range(n))
        st = self.reach().state
        if self.np:
            return np.flatnonzero(np.frombuffer(st, dtype=np.uint8) >= DIRECT) if n \
                else np.zeros(0, np.int64)
        return [k for k in range(n) if st[k] >= DIRECT]

    def to_blocks(self, pos):
        if self.np:
            return self.order[np.asarray(pos, dtype=np.int64)]
        return [self.order[k] for k in pos]

    def to_positions(self, sel):
        if self.np:
            return self.rank[np.asarray(sel, dtype=np.int64)]
        return [self.rank[i] for i in sel]

    def select(self, pos, o):
        """dmem_core selection, stack groups and group ids of the blocks at `pos` after the
        filters --min-size, --thread and --match."""
        b = self.b
        sel = b.select(min_size=o.min_size, tid=o.thread, sel=self.to_blocks(pos))
        groups, gids = b.groups(sel)
        if o.match is not None:
            keep = [g for g, grp in enumerate(groups) if self.an.stack_matches(grp.frames, o.match)]
            sel = b.restrict(sel, gids, keep)
            groups, gids = b.groups(sel)
        return sel, groups, gids

    def warnings(self, scanned=True):
        out = self.an.warnings()
        out.extend("warning: %s" % n for n in self.t.notes)
        if scanned:
            r = self.reach()
            if r.unread_roots:
                out.append("warning: %s could not be read and %s not scanned: %s" % (
                    core.plural(len(r.unread_roots), "root range"),
                    "was" if len(r.unread_roots) == 1 else "were",
                    ", ".join(x.where for x in r.unread_roots[:4])))
        if self.graph.unread:
            out.append("warning: %s not in memory; their contents were not scanned" %
                       core.plural(len(self.graph.unread), "block"))
        return out

    def block_line(self, k):
        """`0x... (N bytes, thread T)` for the block at position k."""
        bl = self.b.block(int(self.order[k]))
        return "%s (%d bytes, thread %d)" % (_hex(bl.user), bl.size, bl.tid)

    # ---- dmem leaks

    def leaks(self, o):
        r = self.reach()
        pos = self.positions(True)
        sel, groups, gids = self.select(pos, o)
        ng = len(groups)
        if self.np:
            is_direct = self._classes(sel) == DIRECT
            direct = np.bincount(np.asarray(gids, dtype=np.int64)[is_direct],
                                 minlength=ng).tolist() if ng else []
        else:
            direct = [0] * ng
            for g, c in zip(gids, self._classes(sel)):
                direct[g] += c == DIRECT
        limit = 20 if o.limit is None else o.limit
        shown = range(ng) if limit == 0 else range(min(ng, limit))
        total_blocks = sum(g.count for g in groups)
        total_bytes = sum(g.bytes for g in groups)
        total_direct = sum(direct)
        nreach = r.counts()[0]
        reach_bytes = self._bytes_of(REACHED)
        if o.json:
            return self.an.dump({
                "format": core.JSON_FORMAT, "command": "leaks",
                "total": {"blocks": total_blocks, "direct": total_direct,
                          "indirect": total_blocks - total_direct, "bytes": total_bytes,
                          "stacks": ng},
                "reachable": {"blocks": nreach, "bytes": reach_bytes},
                "stacks": [{"rank": g + 1, "blocks": groups[g].count, "direct": direct[g],
                            "indirect": groups[g].count - direct[g], "bytes": groups[g].bytes,
                            "example": _hex(groups[g].example),
                            "stack": [self.an.sym.as_json(pc) for pc in groups[g].frames]}
                           for g in shown],
                "roots": self._roots_json(),
                "problems": self.an._problems_json()})
        out = self.warnings()
        for g in shown:
            grp = groups[g]
            out.append("leak %d: %d bytes in %s (%d direct, %d indirect), e.g. %s, allocated at:"
                       % (g + 1, grp.bytes, core.plural(grp.count, "block"), direct[g],
                          grp.count - direct[g], _hex(grp.example)))
            out.extend(self.an.frames_text(grp.frames))
        if ng > len(shown):
            rest = groups[len(shown):]
            out.append("... %d more %s (%d bytes in %s) not shown; --limit 0 shows all" % (
                len(rest), "stack" if len(rest) == 1 else "stacks", sum(x.bytes for x in rest),
                core.plural(sum(x.count for x in rest), "block")))
        out.append("total: %d bytes leaked in %s (%d direct, %d indirect) from %s; %s (%d bytes) "
                   "still reachable" % (total_bytes, core.plural(total_blocks, "block"),
                                        total_direct, total_blocks - total_direct,
                                        core.plural(ng, "stack"),
                                        core.plural(nreach, "block"), reach_bytes))
        return "\n".join(out) + "\n"

    def _classes(self, sel):
        """Class of each block of a dmem_core selection."""
        pos = self.to_positions(sel)
        if self.np:
            st = np.frombuffer(self.reach().state, dtype=np.uint8) if self.graph.n \
                else np.zeros(0, np.uint8)
            return st[pos]
        st = self.reach().state
        return [st[k] for k in pos]

    def _bytes_of(self, cls):
        st = self.reach().state
        sizes = self.graph.sizes
        if self.np:
            if not self.graph.n:
                return 0
            return int(sizes[np.frombuffer(st, dtype=np.uint8) == cls].sum(dtype=np.uint64))
        return sum(z for z, c in zip(sizes, st) if c == cls)

    def _roots_json(self):
        r = self.reach()
        ranges = [x for x in self.t.roots if x.kind != "register"]
        return {"ranges": len(ranges), "bytes": sum(x.end - x.start for x in ranges),
                "registers": len(self.t.roots) - len(ranges),
                "unreadable": [x.where for x in r.unread_roots],
                "excluded": [x.name for x in self.t.skipped]}

    # ---- dmem types

    def block_types(self):
        """(positions, vtable numbers) of the blocks whose first word points into a vtable."""
        if self._types is None:
            vt = self.vtables()
            pos, first = self.graph.fields(self.positions(False), 0, 8)
            ks = vt.lookup(first, self.np)
            if self.np:
                ok = ks >= 0
                self._types = (pos[ok], ks[ok])
            else:
                self._types = ([p for p, k in zip(pos, ks) if k >= 0], [k for k in ks if k >= 0])
        return self._types

    def typed(self, leaks):
        """{type name: positions} over the live (or leaked) blocks that have a vtable pointer."""
        pos, ks = self.block_types()
        if leaks:
            st = self.reach().state
            if self.np:
                stv = np.frombuffer(st, dtype=np.uint8)
                keep = stv[pos] >= DIRECT
                pos, ks = pos[keep], ks[keep]
            else:
                pairs = [(p, k) for p, k in zip(pos, ks) if st[p] >= DIRECT]
                pos, ks = [p for p, _ in pairs], [k for _, k in pairs]
        kl = ks.tolist() if self.np else ks
        names = self.vtables().names(set(kl))
        by = collections.OrderedDict()
        if self.np:
            for k in sorted(set(kl)):
                by.setdefault(names[k], []).append(pos[ks == k])
            return {n: np.sort(np.concatenate(v)) for n, v in by.items()}
        for p, k in zip(pos, kl):
            by.setdefault(names[k], []).append(p)
        return dict(by)

    def types(self, o):
        typed = self.typed(o.leaks)
        rows = []
        for name, pos in typed.items():
            sel, groups, _ = self.select(pos, o)
            count, nbytes = self.b.totals(sel)
            if count:
                rows.append((name, count, nbytes, groups))
        rows.sort(key=lambda r: (-r[1], -r[2], r[0]))
        limit = 20 if o.limit is None else o.limit
        shown = rows if limit == 0 else rows[:limit]
        pool = self.positions(o.leaks)
        pool_n = len(pool)
        what = "leaked" if o.leaks else "live"
        if o.json:
            return self.an.dump({
                "format": core.JSON_FORMAT, "command": "types", "blocks": what,
                "total": {"types": len(rows), "blocks": sum(r[1] for r in rows),
                          "bytes": sum(r[2] for r in rows), "of_blocks": pool_n},
                "types": [{"type": n, "blocks": c, "bytes": z,
                           "stacks": [{"blocks": g.count, "bytes": g.bytes,
                                       "example": _hex(g.example),
                                       "stack": [self.an.sym.as_json(pc) for pc in g.frames]}
                                      for g in groups[:3]]}
                          for n, c, z, groups in shown],
                "problems": self.an._problems_json()})
        out = self.warnings(scanned=o.leaks)
        if not rows:
            out.append("no %s block starts with a pointer into a vtable (of %s)" % (
                what, core.plural(len(self.vtables()), "vtable symbol")))
            return "\n".join(out) + "\n"
        out.append("%12s %14s  %s" % ("blocks", "bytes", "type"))
        out.extend("%12d %14d  %s" % (c, z, n) for n, c, z, _ in shown)
        if len(rows) > len(shown):
            out.append("... %d more types not shown; --limit 0 shows all"
                       % (len(rows) - len(shown)))
        for n, c, z, groups in shown:
            g = groups[0]
            out.append("%s: %s, most from (%s, %d bytes, e.g. %s):" % (
                n, core.plural(c, "block"), core.plural(g.count, "block"), g.bytes,
                _hex(g.example)))
            out.extend(self.an.frames_text(g.frames))
            if len(groups) > 1:
                out.append("    ... and %s more" % core.plural(len(groups) - 1, "stack"))
        out.append("total: %d of %d %s blocks (%d bytes) are of %s" % (
            sum(r[1] for r in rows), pool_n, what, sum(r[2] for r in rows),
            core.plural(len(rows), "C++ type")))
        return "\n".join(out) + "\n"

    # ---- dmem words

    def words(self, o):
        if o.type is not None and o.offset is None:
            raise core.UsageError("--type goes with --offset")
        what = "leaked" if o.leaks else "live"
        if o.vtable is not None:
            typed = self.typed(o.leaks)
            pos = typed.get(o.vtable)
            if pos is None:
                pos = typed.get(self.vtables().type_of_symbol(o.vtable))
            if pos is None:
                seen = sorted(typed)[:8]
                raise core.UsageError("no %s block has the vtable of %r; types seen: %s" % (
                    what, o.vtable, ", ".join(seen) if seen else "none"))
            about = "%s blocks of type %s" % (what, o.vtable)
        else:
            pos = self.positions(o.leaks)
            about = "%s blocks" % what
        sel, _, _ = self.select(pos, o)
        pos = self.to_positions(sel)
        nblocks = len(pos)
        limit = 20 if o.limit is None else o.limit
        if o.offset is not None:
            width, _, _ = WORD_TYPES[o.type or "u64"]
            have, vals = self.graph.fields(pos, o.offset, width)
            values, counts, total, distinct = histogram(vals, limit)
            title = "the %s at offset %d of %s (%d of %d big enough)" % (
                o.type or "u64", o.offset, about, len(have), nblocks)
        else:
            width = 8
            values, counts, total, distinct = self.graph.word_histogram(pos, limit)
            title = "the 8-byte words of %s (%s)" % (about, core.plural(nblocks, "block"))
        shown = list(zip(values, counts))
        names = {}
        if width == 8 and self.t.symbol_at is not None:
            for v, _ in shown:
                if v:
                    try:
                        s = self.t.symbol_at(v)
                    except Exception:  # a failing lookup only costs the name
                        s = None
                    if s:
                        names[v] = s
        if o.json:
            return self.an.dump({
                "format": core.JSON_FORMAT, "command": "words", "blocks": nblocks,
                "vtable": o.vtable, "offset": o.offset, "type": o.type or "u64",
                "leaks": bool(o.leaks), "words": total, "distinct": distinct,
                "values": [{"value": _hex(v), "count": c, "symbol": names.get(v)}
                           for v, c in shown]})
        out = self.warnings(scanned=o.leaks)
        out.append("histogram of %s: %d values, %d distinct" % (title, total, distinct))
        out.append("%12s  %s" % ("count", "value"))
        digits = 2 * width
        for v, c in shown:
            line = "%12d  0x%0*x" % (c, digits, v)
            if v in names:
                line += "  " + names[v]
            elif v < 1 << 20:
                line += "  (%d)" % v
            out.append(line)
        if distinct > len(shown):
            out.append("... %d more distinct values; --limit 0 shows all" % (distinct - len(shown)))
        return "\n".join(out) + "\n"

    # ---- dmem why

    def why(self, addr, o):
        found = self.heap.index().find(addr)
        if found is None:
            if o.json:
                return self.an.dump({"format": core.JSON_FORMAT, "command": "why",
                                     "addr": _hex(addr), "block": None})
            return "%s: not inside any live block\n" % _hex(addr)
        i, _where = found
        k = int(self.rank[i])
        r = self.reach()
        cls = r.state[k]
        chain, ref = r.chain(k)
        hops = [self._link(a, b) for a, b in zip(chain, chain[1:])]
        if o.json:
            root = None
            if ref is not None:
                root_i, word = ref
                rt = self.t.roots[root_i]
                root = {"kind": rt.kind, "where": rt.where,
                        "addr": _hex(word) if word is not None else None,
                        "value": _hex(rt.value) if rt.value is not None else None}
            return self.an.dump({
                "format": core.JSON_FORMAT, "command": "why", "addr": _hex(addr),
                "class": CLASS_NAMES[cls], "root": root,
                "chain": [dict(self.an.block_json(self.b.block(int(self.order[p]))),
                               via_offset=None if n == 0 else hops[n - 1])
                          for n, p in enumerate(chain)]})
        out = self.warnings()
        target = self.b.block(i)
        if cls == REACHED:
            root_i, word = ref
            rt = self.t.roots[root_i]
            out.append("%s is in use: reachable from a root through %s:" % (
                _hex(target.user), core.plural(len(chain), "block")))
            if rt.kind == "register":
                out.append("  root: %s = %s" % (rt.where, _hex(rt.value)))
            else:
                name = self._symbol(word)
                out.append("  root: the word at %s%s, in the %s" % (
                    _hex(word), " (%s)" % name if name else "", rt.where))
        else:
            head = chain[0]
            if cls == DIRECT:
                out.append("%s is unreachable: a direct leak (no root and no other leaked block "
                           "points to it)" % _hex(target.user))
            else:
                out.append("%s is unreachable: an indirect leak, held only by leaked blocks; "
                           "a chain from the direct leak %s:" % (
                               _hex(target.user), _hex(self.b.block(int(self.order[head])).user)))
        if cls == REACHED or cls == INDIRECT:
            # A long chain (a linked list) shows its ends; --json gives all of it.
            keep = WHY_ENDS if len(chain) > 2 * WHY_ENDS + 1 else len(chain)
            last = None
            for n, p in enumerate(chain):
                if keep <= n < len(chain) - keep:
                    if n == keep:
                        out.append("  ... %d more blocks on the way ..." % (len(chain) - 2 * keep))
                    continue
                via = "" if n == 0 else " at offset %s of the block above" % hops[n - 1]
                frames = self.b.block(int(self.order[p])).frames
                if frames == last:
                    out.append("  -> %s%s, allocated at the same stack" % (self.block_line(p), via))
                    continue
                out.append("  -> %s%s, allocated at:" % (self.block_line(p), via))
                out.extend(self.an.frames_text(frames, indent="       "))
                last = frames
        else:
            out.append("  %s, allocated at:" % self.block_line(k))
            out.extend(self.an.frames_text(target.frames, indent="       "))
        return "\n".join(out) + "\n"

    def _link(self, a, b):
        """Offset in block a of its first word pointing into block b."""
        g = self.graph
        s = int(g.starts[a])
        try:
            addrs, tgts = g.refs(s, int(g.wends[a]))
        except PartlyUnread as e:
            addrs, tgts = e.addrs, e.tgts
        for ad, t in zip(addrs, tgts):
            if int(t) == b:
                return int(ad) - s
        return None

    def _symbol(self, addr):
        if self.t.symbol_at is None:
            return None
        try:
            return self.t.symbol_at(addr)
        except Exception:  # a failing lookup only costs the name
            return None
