"""Reading libdmem's live-block lists out of raw process memory.

This module knows the binary contract of libdmem (the layout descriptor and the block header) and
everything that can be worked out from it: walking the lists, grouping blocks by allocation stack,
filters, finding the block that holds an address, checking the lists for corruption, and the text,
JSON and folded-stack output of the gdb commands.  It never imports gdb: it is handed a function
that reads memory and a function that names code addresses, so it can be tested on synthetic
memory with plain Python and reused by other front ends.

Everything read from the target is distrusted.  A core may come from a process that crashed half
way through a list update, or whose heap was overwritten by the very bug being chased, so every
walk is bounded by the lists' own counters, every read may fail, and a problem is reported rather
than raised.

numpy, when it can be imported, decodes headers and groups blocks in bulk; without it the same
answers come from struct.iter_unpack and dicts, a little more slowly.
"""

import bisect
import collections
import json
import re
import struct
from array import array

try:  # numpy is optional: Debian's gdb can import python3-numpy, a bare python3 may not.
    import numpy as np
except ImportError:  # pragma: no cover - depends on the host
    np = None

HAVE_NUMPY = np is not None

LAYOUT_MAGIC = 0x5459414C4D454D44  # the bytes "DMEMLAYT" as a little-endian word
# Versions this script reads: 2 appended the size word's field positions and the lists' sequence
# counters to version 1.
LAYOUT_VERSIONS = (1, 2)
LAYOUT_VERSION = max(LAYOUT_VERSIONS)
LAYOUT_FIELDS_V1 = (
    "magic", "version", "header_size", "nframes",
    "off_next", "off_prev", "off_frames", "off_size", "size_bits", "off_tid", "off_magic",
    "magic_live", "magic_freed",
    "lists", "nlists", "list_stride", "list_off_head",
    "list_off_live_blocks", "list_off_live_bytes", "list_off_allocs", "list_off_frees",
    "arena_start", "arena_end", "flags",
)
LAYOUT_FIELDS_V2 = LAYOUT_FIELDS_V1 + (
    "size_list_shift", "size_list_bits", "size_align_shift", "size_align_bits", "list_off_changes",
)
LAYOUT_FIELDS = LAYOUT_FIELDS_V2
FLAG_RECORDING = 1

# Upper bounds that no sane descriptor exceeds; they keep a corrupt one from making us allocate or
# loop without end.
MAX_HEADER = 4096
MAX_LISTS = 1 << 16
MAX_BLOCKS = 1 << 32

JSON_FORMAT = 1


class DmemError(Exception):
    """A problem to show the user as one line (the gdb side turns it into gdb.GdbError)."""


class LayoutError(DmemError):
    """No usable layout descriptor."""


class UsageError(DmemError):
    """Bad command arguments."""


class ReadError(Exception):
    """Memory at [addr, addr + length) cannot be read (unmapped, or not in the core)."""

    def __init__(self, addr, length):
        super().__init__("cannot read %d bytes at 0x%x" % (length, addr))
        self.addr = addr
        self.length = length


def hexa(addr):
    return "0x%x" % addr


def plural(n, word):
    return "%d %s%s" % (n, word, "" if n == 1 else "s")


# --------------------------------------------------------------------------------------------
# Memory


class Memory:
    """Chunked, cached access to target memory through a read(addr, n) -> bytes function.

    Every request to gdb has a fixed cost of microseconds, more than copying a few kilobytes,
    so headers are never read one by one: the aligned chunk around an address is read once and
    kept (least recently used chunks are dropped beyond `budget` bytes).  The lists are walked
    newest block first and a thread's blocks tend to lie together, so chunks are mostly used in
    one stretch and a modest budget suffices.  A chunk that is not
    wholly readable, as at the end of a mapping, is narrowed down by halves to the readable part
    around the address, and unreadable pages are remembered so a corrupt pointer costs little.
    """

    PAGE = 1 << 12

    def __init__(self, read, chunk=1 << 20, budget=256 << 20):
        assert chunk >= self.PAGE and chunk & (chunk - 1) == 0
        self._read = read
        self.chunk = chunk
        self.budget = budget
        self._chunks = collections.OrderedDict()  # aligned base -> bytes of a whole chunk
        self._parts = {}  # page base -> (base, bytes) of a readable piece of a partial chunk
        self._partial = set()  # chunk bases known not to be wholly readable
        self._bad = set()  # page bases known to be unreadable
        self._held = 0
        self.reads = 0  # calls made to the reader, for tests and curiosity

    def _raw(self, addr, n):
        """Exactly n bytes at addr from the reader (bytes or a memoryview), or ReadError."""
        if addr < 0 or n < 0 or addr + n > 1 << 64:
            raise ReadError(addr, n)
        self.reads += 1
        data = self._read(addr, n)
        if len(data) != n:
            raise ReadError(addr, n)
        # A reader may hand back a memoryview over its own buffer (gdb does): keep it, copying a
        # megabyte per chunk would cost more than reading it.
        return data if isinstance(data, (bytes, memoryview)) else bytes(data)

    def span(self, addr, n):
        """Returns (buf, base) with buf covering [addr, addr + n) from base on."""
        chunk = self.chunk
        base = addr & ~(chunk - 1)
        if addr + n > base + chunk:
            # Straddles two chunks: rare enough to read exactly.
            return self._raw(addr, n), addr
        buf = self._chunks.get(base)
        if buf is not None:
            self._chunks.move_to_end(base)
            return buf, base
        page = addr & ~(self.PAGE - 1)
        part = self._parts.get(page)
        if part is not None and addr + n <= part[0] + len(part[1]):
            return part[1], part[0]
        if base not in self._partial:
            try:
                buf = self._raw(base, chunk)
            except ReadError:
                self._partial.add(base)
            else:
                self._chunks[base] = buf
                self._held += chunk
                while self._held > self.budget and len(self._chunks) > 1:
                    self._chunks.popitem(last=False)
                    self._held -= chunk
                return buf, base
        return self._narrow(addr, n)

    def _narrow(self, addr, n):
        if (addr & ~(self.PAGE - 1)) in self._bad:
            raise ReadError(addr, n)
        size = self.chunk >> 1
        while size >= self.PAGE:
            base = addr & ~(size - 1)
            if addr + n <= base + size:
                try:
                    buf = self._raw(base, size)
                except ReadError:
                    size >>= 1
                    continue
                if len(self._parts) > 4096:
                    self._parts.clear()
                for p in range(base, base + size, self.PAGE):
                    self._parts[p] = (base, buf)
                return buf, base
            break
        # The page itself is unreadable (or [addr, addr + n) crosses into one that is).
        try:
            return self._raw(addr, n), addr
        except ReadError:
            if len(self._bad) > 1 << 16:
                self._bad.clear()
            self._bad.add(addr & ~(self.PAGE - 1))
            raise

    def read(self, addr, n):
        if n > self.chunk:
            return self._raw(addr, n)
        buf, base = self.span(addr, n)
        off = addr - base
        return bytes(buf[off:off + n])

    def u64(self, addr):
        return struct.unpack("<Q", self.read(addr, 8))[0]

    def readable(self, addr, n=1):
        try:
            self.span(addr, n)
            return True
        except ReadError:
            return False


def as_memory(mem):
    return mem if isinstance(mem, Memory) else Memory(mem)


class CoreFile:
    """The memory an ELF core file holds, served straight from its PT_LOAD segments.

    For a core this gives the same bytes gdb would, without a round trip through gdb per read
    and without copying: a read is a memoryview into the (memory-mapped) file.  Addresses the
    core does not hold, such as read-only pages of mapped files that were left out of the dump,
    return None so the caller can ask gdb, which finds them in the files themselves.
    """

    PT_LOAD = 1
    ET_CORE = 4

    def __init__(self, data):
        self.data = memoryview(data)
        d = self.data
        if len(d) < 64 or bytes(d[:4]) != b"\x7fELF" or d[4] != 2 or d[5] != 1:
            raise ValueError("not a little-endian 64-bit ELF file")
        e_type, = struct.unpack_from("<H", d, 16)
        if e_type != self.ET_CORE:
            raise ValueError("not an ELF core file")
        phoff, = struct.unpack_from("<Q", d, 32)
        phentsize, phnum = struct.unpack_from("<HH", d, 54)
        if phentsize < 56 or phoff + phnum * phentsize > len(d):
            raise ValueError("truncated program headers")
        segs = []
        for i in range(phnum):
            p_type, _, off, vaddr, _, filesz, _ = struct.unpack_from(
                "<IIQQQQQ", d, phoff + i * phentsize)
            if p_type == self.PT_LOAD and filesz and off + filesz <= len(d):
                segs.append((vaddr, vaddr + filesz, off))
        segs.sort()
        self.segments = segs
        self._starts = [s[0] for s in segs]

    @classmethod
    def open(cls, path):
        import mmap
        with open(path, "rb") as f:
            return cls(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))

    def read(self, addr, n):
        """A memoryview of [addr, addr + n) if one segment holds it all, else None."""
        i = bisect.bisect_right(self._starts, addr) - 1
        if i < 0:
            return None
        start, end, off = self.segments[i]
        if addr + n > end:
            return None
        at = off + addr - start
        return self.data[at:at + n]


# --------------------------------------------------------------------------------------------
# The layout descriptor and the lists


class Layout:
    """The decoded `dmem_layout` descriptor (field names as in the contract)."""

    def __init__(self, addr, words):
        self.addr = addr
        for name, value in zip(LAYOUT_FIELDS, words):
            setattr(self, name, value)
        self.size_mask = (1 << self.size_bits) - 1
        if self.version == 1:
            # Version 1 did not publish them; its writer placed them right above the size.
            self.size_list_shift, self.size_list_bits = self.size_bits, 8
            self.size_align_shift, self.size_align_bits = self.size_bits + 8, 8
            self.list_off_changes = None
        self.list_shift = self.size_list_shift
        self.list_mask = (1 << self.size_list_bits) - 1
        self.align_shift = self.size_align_shift
        self.align_mask = (1 << self.size_align_bits) - 1

    def describe(self):
        return "libdmem layout v%d at %s: %d-byte headers, %d frames, %d lists" % (
            self.version, hexa(self.addr), self.header_size, self.nframes, self.nlists)


def read_layout(mem, addr):
    """Reads and checks the descriptor at `addr`; raises LayoutError with a one-line reason."""
    mem = as_memory(mem)
    try:
        head = mem.read(addr, 16)
    except ReadError:
        raise LayoutError("cannot read the dmem_layout descriptor at %s" % hexa(addr)) from None
    magic, version = struct.unpack("<QQ", head)
    if magic != LAYOUT_MAGIC:
        raise LayoutError("dmem_layout at %s has magic 0x%016x, not libdmem's 0x%016x (is the "
                          "libdmem.so gdb loaded the one the process ran?)"
                          % (hexa(addr), magic, LAYOUT_MAGIC))
    if version not in LAYOUT_VERSIONS:
        raise LayoutError("dmem_layout at %s is version %d; this script reads versions %s"
                          % (hexa(addr), version, " and ".join(map(str, LAYOUT_VERSIONS))))
    fields = LAYOUT_FIELDS_V1 if version == 1 else LAYOUT_FIELDS_V2
    try:
        raw = mem.read(addr, 8 * len(fields))
    except ReadError:
        raise LayoutError("the dmem_layout descriptor at %s is truncated" % hexa(addr)) from None
    layout = Layout(addr, struct.unpack("<%dQ" % len(fields), raw))
    why = _layout_insane(layout)
    if why:
        raise LayoutError("dmem_layout at %s is inconsistent: %s" % (hexa(addr), why))
    return layout


def find_layouts(mem, ranges):
    """Addresses of valid descriptors in the given [start, end) ranges, found by their magic.

    For when the symbol cannot be used: gdb has no symbols for libdmem.so (the core is opened
    where the library is not at the path the process used) or has a different build of it.  The
    descriptor is relocated data, so it lies in a written page of libdmem's mapping, which every
    core holds.  Each hit is checked as thoroughly as a descriptor found by its symbol, which also
    rejects the file's unrelocated copy that the text mapping's last page may show.
    """
    mem = as_memory(mem)
    needle = struct.pack("<Q", LAYOUT_MAGIC)
    found = []
    for start, end in ranges:
        page = Memory.PAGE
        addr = start & ~(page - 1)
        while addr < end:
            try:
                data = mem.read(addr, page)
            except ReadError:
                addr += page
                continue
            at = data.find(needle)
            while at >= 0:
                if at % 8 == 0:
                    try:
                        read_layout(mem, addr + at)
                        found.append(addr + at)
                    except LayoutError:
                        pass
                at = data.find(needle, at + 1)
            addr += page
    return found


def _layout_insane(L):
    hs = L.header_size
    if not 16 <= hs <= MAX_HEADER or hs % 8:
        return "header size %d" % hs
    fields = [("next", L.off_next, 8), ("prev", L.off_prev, 8),
              ("frames", L.off_frames, 8 * L.nframes), ("size", L.off_size, 8),
              ("tid", L.off_tid, 4), ("magic", L.off_magic, 4)]
    if not 1 <= L.nframes <= hs // 8:
        return "%d frames" % L.nframes
    spans = []
    for name, off, width in fields:
        if off + width > hs:
            return "%s field at offset %d overruns the header" % (name, off)
        spans.append((off, off + width, name))
    spans.sort()
    for (a0, a1, an), (b0, b1, bn) in zip(spans, spans[1:]):
        if b0 < a1:
            return "fields %s and %s overlap" % (an, bn)
    if not 8 <= L.size_bits <= 56:
        return "size_bits %d" % L.size_bits
    if L.magic_live >= 1 << 32 or L.magic_freed >= 1 << 32 or L.magic_live == L.magic_freed:
        return "block magics 0x%x/0x%x" % (L.magic_live, L.magic_freed)
    if not 1 <= L.nlists <= MAX_LISTS:
        return "%d lists" % L.nlists
    if not 8 <= L.list_stride <= MAX_HEADER:
        return "list stride %d" % L.list_stride
    for name in ("list_off_head", "list_off_live_blocks", "list_off_live_bytes",
                 "list_off_allocs", "list_off_frees"):
        if getattr(L, name) + 8 > L.list_stride:
            return "%s beyond the list stride" % name
    if not L.lists or not L.flags:
        # The library file's own copy, before the loader relocated it: seen when the last page
        # of the text mapping also holds the start of the data (both map one page of the file).
        return "its pointers are null (an unrelocated copy from the library file)"
    return None


ListInfo = collections.namedtuple(
    "ListInfo", "index addr head live_blocks live_bytes allocs frees")


def read_lists(mem, L):
    mem = as_memory(mem)
    try:
        raw = mem.read(L.lists, L.nlists * L.list_stride)
    except ReadError:
        raise LayoutError("cannot read libdmem's %d list heads at %s" % (L.nlists, hexa(L.lists))) \
            from None
    out = []
    for i in range(L.nlists):
        base = i * L.list_stride

        def word(off, base=base):
            return struct.unpack_from("<Q", raw, base + off)[0]

        out.append(ListInfo(i, L.lists + base, word(L.list_off_head),
                            word(L.list_off_live_blocks), word(L.list_off_live_bytes),
                            word(L.list_off_allocs), word(L.list_off_frees)))
    return out


def walk_cap(count):
    """How far a list is walked: its live count plus slack.  A core taken mid-update may be off
    by a block or so, and a corrupt counter must not make a broken list endless."""
    return min(count, MAX_BLOCKS) + 64 + min(count, MAX_BLOCKS) // 64


class Problem:
    """Something wrong found in the lists; `addr` is the header (or list) it concerns."""

    def __init__(self, lst, addr, text):
        self.list = lst
        self.addr = addr
        self.text = text

    def __str__(self):
        where = "list %d" % self.list if self.list is not None else "lists"
        return "%s: %s" % (where, self.text)

    def as_json(self):
        return {"list": self.list, "addr": hexa(self.addr) if self.addr is not None else None,
                "problem": self.text}


def _fixed_struct(fields, size):
    """A struct format reading (name, offset, code) fields at their offsets out of `size` bytes,
    and the position of each name in the unpacked tuple."""
    fmt = "<"
    pos = 0
    names = []
    for name, off, code in sorted(fields, key=lambda f: f[1]):
        if off > pos:
            fmt += "%dx" % (off - pos)
        fmt += code
        pos = off + struct.calcsize("<" + code)
        count = int(code[:-1]) if code[:-1] else 1
        names.extend([name] * count)
    if size is not None and size > pos:
        fmt += "%dx" % (size - pos)
    return struct.Struct(fmt), names


# --------------------------------------------------------------------------------------------
# Walking


class Heap:
    """The lists of one process image, read through a Memory.

    `backend` is "numpy", "pure" or None (numpy when importable).  Both give the same answers.
    """

    def __init__(self, mem, layout_addr, backend=None):
        self.mem = as_memory(mem)
        self.layout = read_layout(self.mem, layout_addr)
        self.lists = read_lists(self.mem, self.layout)
        L = self.layout
        try:
            self.flags = self.mem.u64(L.flags)
        except ReadError:
            self.flags = None
        if backend is None:
            backend = "numpy" if HAVE_NUMPY else "pure"
        if backend == "numpy" and not HAVE_NUMPY:
            raise DmemError("numpy is not importable here")
        self.backend = backend
        link, names = _fixed_struct(
            [("next", L.off_next, "Q"), ("prev", L.off_prev, "Q"), ("magic", L.off_magic, "I")],
            None)
        self._link = link
        self._link_pos = (names.index("next"), names.index("prev"), names.index("magic"))
        self._blocks = None
        self.problems = []

    @property
    def recording(self):
        return self.flags is not None and bool(self.flags & FLAG_RECORDING)

    def counters(self):
        """Totals of the lists' counters: (live_blocks, live_bytes, allocs, frees)."""
        tot = [0, 0, 0, 0]
        for li in self.lists:
            tot[0] += li.live_blocks
            tot[1] += li.live_bytes
            tot[2] += li.allocs
            tot[3] += li.frees
        return tuple(tot)

    def _walk_list(self, li, hdrs, gather, problems):
        """Walks one list from its head, appending header addresses to `hdrs`; returns the
        number of blocks.  Each run of headers found in one buffer is handed to
        `gather(buf, base, first, end)` (positions in `hdrs`) to copy their bytes out in bulk.

        A header is accepted only if its magic says live and its prev names the header we came
        from.  That check alone makes the walk cycle-free: to reach a header a second time we
        would have to come from its recorded prev, hence reach that one a second time, and so on
        back to the head, whose prev is null.  So the first bad link ends the list; the cap only
        guards against an endless chain of well-formed garbage.
        """
        L = self.layout
        hs = L.header_size
        live = L.magic_live
        unpack = self._link.unpack_from
        inext, iprev, imagic = self._link_pos
        span = self.mem.span
        cap = walk_cap(li.live_blocks)
        add_hdr = hdrs.append
        start = first = len(hdrs)
        buf = b""
        lo = hi = 0
        prev = 0
        addr = li.head
        # This loop runs once per block of the process, so it is kept lean: one unpack of the
        # link fields, and anything unusual (a new buffer, a misaligned pointer) on a slow path.
        for _ in range(cap):
            if not addr:
                break
            if addr & 7 or not (lo <= addr and addr + hs <= hi):
                if addr & 7:
                    problems.append(Problem(li.index, addr, "%s points to misaligned %s; rest of "
                                            "the list lost" % (_from(prev), hexa(addr))))
                    break
                try:
                    nbuf, nlo = span(addr, hs)
                except ReadError:
                    problems.append(Problem(li.index, addr, "%s points to %s, which is unreadable;"
                                            " rest of the list lost" % (_from(prev), hexa(addr))))
                    break
                if len(hdrs) > first:
                    gather(buf, lo, first, len(hdrs))
                    first = len(hdrs)
                buf, lo = nbuf, nlo
                hi = lo + len(buf)
            t = unpack(buf, addr - lo)
            if t[imagic] != live or t[iprev] != prev:
                seen = addr in hdrs[start:]
                problems.append(self._bad_link(li.index, addr, prev, t[imagic], t[iprev], seen))
                break
            add_hdr(addr)
            prev = addr
            addr = t[inext]
        else:
            if addr:
                problems.append(Problem(li.index, addr, "list goes on past %d blocks though its "
                                        "live count is %d; stopped there" % (cap, li.live_blocks)))
        if len(hdrs) > first:
            gather(buf, lo, first, len(hdrs))
        return len(hdrs) - start

    def _bad_link(self, lst, addr, prev, magic, got_prev, seen):
        L = self.layout
        came = hexa(prev) if prev else "the list head"
        if magic == L.magic_freed:
            what = "freed block (magic 0x%x) still on the list" % magic
        elif magic != L.magic_live:
            what = "bad magic 0x%08x" % magic
        else:
            what = "its prev is %s, not %s" % (hexa(got_prev), hexa(prev))
            if seen:
                what += " (it was walked already: the list loops back)"
        return Problem(lst, addr, "header %s, reached from %s: %s; rest of the list lost"
                       % (hexa(addr), came, what))

    def blocks(self):
        """Every live block, decoded (walked once, then kept)."""
        if self._blocks is None:
            hdrs = array("Q")
            problems = []
            counts = []
            hs = self.layout.header_size
            if self.backend == "numpy":
                parts = []
                width = np.arange(hs // 8, dtype=np.intp)

                def gather(buf, lo, a, b):
                    # Headers are 8-aligned in an 8-aligned buffer: take them as rows of words.
                    words = np.frombuffer(buf, dtype="<u8", count=len(buf) // 8)
                    offs = np.frombuffer(hdrs[a:b], dtype=np.uint64) - np.uint64(lo)
                    parts.append(words[(offs >> np.uint64(3)).astype(np.intp)[:, None] + width])
            else:
                raw = bytearray()

                def gather(buf, lo, a, b):
                    for h in hdrs[a:b]:
                        raw.extend(buf[h - lo:h - lo + hs])
            for li in self.lists:
                counts.append(self._walk_list(li, hdrs, gather, problems))
            if self.backend == "numpy":
                raw = np.concatenate(parts) if parts else np.zeros((0, hs // 8), np.uint64)
                self._blocks = NumpyBlocks(self.layout, hdrs, raw, counts)
            else:
                self._blocks = PureBlocks(self.layout, hdrs, raw, counts)
            self.problems = problems
        return self._blocks

    def verify(self):
        """Walks every list and checks it thoroughly; returns a VerifyReport."""
        blocks = self.blocks()
        L = self.layout
        problems = list(self.problems)
        cut = {p.list for p in problems}
        per_list = blocks.per_list()
        for li in self.lists:
            nb, nbytes = per_list.get(li.index, (0, 0))
            if li.allocs - li.frees != li.live_blocks:
                problems.append(Problem(li.index, li.addr, "counters disagree: %d allocations - "
                                        "%d frees != %d live blocks"
                                        % (li.allocs, li.frees, li.live_blocks)))
            if li.index in cut:
                continue  # the walk stopped early; its totals would only repeat that
            if nb != li.live_blocks:
                problems.append(Problem(li.index, li.addr, "walked %s but the live count is %d"
                                        % (plural(nb, "block"), li.live_blocks)))
            if nbytes != li.live_bytes:
                problems.append(Problem(li.index, li.addr, "walked blocks hold %d bytes but the "
                                        "live byte count is %d" % (nbytes, li.live_bytes)))
        for i in blocks.wrong_list():
            b = blocks.block(i)
            problems.append(Problem(b.walked_list, b.header, "header %s says it belongs on list "
                                    "%d" % (hexa(b.header), b.list)))
        for i in blocks.duplicates():
            b = blocks.block(i)
            problems.append(Problem(b.walked_list, b.header, "header %s is on more than one list"
                                    % hexa(b.header)))
        a0, a1 = L.arena_start, L.arena_end
        hs = L.header_size
        readable = self.mem.readable
        hdrs, sizes, walked = blocks.columns()
        for h, size, li in zip(hdrs, sizes, walked):
            if a0 <= h < a1:
                problems.append(Problem(li, h, "header %s lies in the bootstrap arena, whose "
                                        "blocks have no header" % hexa(h)))
            if size and not readable(h + hs + size - 1):
                problems.append(Problem(li, h, "block %s of %d bytes runs into unreadable "
                                        "memory" % (hexa(h + hs), size)))
        tot = blocks.totals(blocks.everything())
        return VerifyReport(problems, len(self.lists), tot[0], tot[1])

    def index(self):
        return self.blocks().index()


def _from(prev):
    return "next of %s" % hexa(prev) if prev else "the list head"


class VerifyReport:
    def __init__(self, problems, nlists, nblocks, nbytes):
        self.problems = problems
        self.nlists = nlists
        self.nblocks = nblocks
        self.nbytes = nbytes

    @property
    def ok(self):
        return not self.problems


# --------------------------------------------------------------------------------------------
# Decoded blocks: a column store with a numpy and a pure-Python implementation


Block = collections.namedtuple(
    "Block", "header user size tid list align_log2 frames walked_list")

StackGroup = collections.namedtuple("StackGroup", "frames count bytes example")


def trim(frames):
    """Frames up to the first unused (zero) slot."""
    frames = tuple(frames)
    try:
        return frames[:frames.index(0)]
    except ValueError:
        return frames


def _group_order(frames, counts, nbytes):
    """Canonical order of stack groups: most bytes first, then most blocks, then by frames."""
    return sorted(range(len(frames)), key=lambda g: (-nbytes[g], -counts[g], frames[g]))


class Blocks:
    """Common interface.  A selection (`sel`) is an opaque set of block indices from
    everything() or select(); results are plain Python values so both implementations can be
    compared directly."""

    def __init__(self, layout, counts):
        self.layout = layout
        self.list_counts = counts
        self.n = sum(counts)
        self._index = None

    def block(self, i):
        raise NotImplementedError

    def per_list(self):
        """{walked list: (blocks, bytes)}."""
        raise NotImplementedError

    def index(self):
        if self._index is None:
            self._index = self._make_index()
        return self._index


class PureBlocks(Blocks):
    def __init__(self, layout, hdrs, raw, counts):
        super().__init__(layout, counts)
        L = layout
        st, names = _fixed_struct(
            [("size", L.off_size, "Q"), ("tid", L.off_tid, "I"),
             ("frames", L.off_frames, "%dQ" % L.nframes)], L.header_size)
        isize = names.index("size")
        itid = names.index("tid")
        f0 = names.index("frames")
        f1 = f0 + L.nframes
        mask, lshift, ashift = L.size_mask, L.list_shift, L.align_shift
        self.hdr = list(hdrs)
        self.size = []
        self.tid = []
        self.lst = []
        self.align = []
        self.frames = []
        for t in st.iter_unpack(raw):
            w = t[isize]
            self.size.append(w & mask)
            self.lst.append((w >> lshift) & L.list_mask)
            self.align.append(w >> ashift)
            self.tid.append(t[itid])
            self.frames.append(trim(t[f0:f1]))
        self.walked = []
        for li, c in enumerate(counts):
            self.walked.extend([li] * c)

    def block(self, i):
        return Block(self.hdr[i], self.hdr[i] + self.layout.header_size, self.size[i],
                     self.tid[i], self.lst[i], self.align[i], self.frames[i], self.walked[i])

    def everything(self):
        return list(range(self.n))

    def columns(self):
        """(header addresses, sizes, walked lists) as Python lists."""
        return self.hdr, self.size, self.walked

    def select(self, min_size=None, tid=None, sel=None):
        sel = self.everything() if sel is None else sel
        if min_size is not None:
            sel = [i for i in sel if self.size[i] >= min_size]
        if tid is not None:
            sel = [i for i in sel if self.tid[i] == tid]
        return sel

    def count(self, sel):
        return len(sel)

    def totals(self, sel):
        return len(sel), sum(self.size[i] for i in sel)

    def groups(self, sel):
        """(groups in canonical order, group number of each selected block)."""
        key_gid = {}
        frames, counts, nbytes, example = [], [], [], []
        gids = []
        hs = self.layout.header_size
        for i in sel:
            f = self.frames[i]
            g = key_gid.get(f)
            if g is None:
                g = key_gid[f] = len(frames)
                frames.append(f)
                counts.append(0)
                nbytes.append(0)
                example.append(self.hdr[i] + hs)
            counts[g] += 1
            nbytes[g] += self.size[i]
            example[g] = min(example[g], self.hdr[i] + hs)
            gids.append(g)
        order = _group_order(frames, counts, nbytes)
        rank = [0] * len(order)
        for k, g in enumerate(order):
            rank[g] = k
        groups = [StackGroup(frames[g], counts[g], nbytes[g], example[g]) for g in order]
        return groups, [rank[g] for g in gids]

    def restrict(self, sel, gids, keep):
        """The selected blocks whose group number is in `keep`."""
        keep = set(keep)
        return [i for i, g in zip(sel, gids) if g in keep]

    def threads(self, sel):
        """[(tid, blocks, bytes)], most bytes first."""
        acc = {}
        for i in sel:
            a = acc.setdefault(self.tid[i], [0, 0])
            a[0] += 1
            a[1] += self.size[i]
        return sorted(((t, c, b) for t, (c, b) in acc.items()), key=lambda r: (-r[2], r[0]))

    def by_address(self, sel):
        return sorted(sel, key=lambda i: self.hdr[i])

    def per_list(self):
        acc = {}
        for i in range(self.n):
            a = acc.setdefault(self.walked[i], [0, 0])
            a[0] += 1
            a[1] += self.size[i]
        return {k: tuple(v) for k, v in acc.items()}

    def wrong_list(self):
        return [i for i in range(self.n) if self.lst[i] != self.walked[i]]

    def duplicates(self):
        seen = set()
        out = []
        for i in range(self.n):
            if self.hdr[i] in seen:
                out.append(i)
            seen.add(self.hdr[i])
        return out

    def _make_index(self):
        order = sorted(range(self.n), key=lambda i: self.hdr[i])
        return BlockIndex([self.hdr[i] for i in order], [self.size[i] for i in order], order,
                          self.layout.header_size)


class NumpyBlocks(Blocks):
    def __init__(self, layout, hdrs, raw, counts):
        super().__init__(layout, counts)
        L = layout
        dt = np.dtype({
            "names": ["size", "tid", "frames"],
            "formats": ["<u8", "<u4", ("<u8", (L.nframes,))],
            "offsets": [L.off_size, L.off_tid, L.off_frames],
            "itemsize": L.header_size,
        })
        rec = np.frombuffer(raw, dtype=dt) if self.n else np.zeros(0, dtype=dt)
        self.hdr = np.frombuffer(hdrs, dtype=np.uint64).copy() if self.n \
            else np.zeros(0, np.uint64)
        w = rec["size"]
        self.size = w & np.uint64(L.size_mask)
        self.lst = ((w >> np.uint64(L.list_shift)) & np.uint64(L.list_mask)).astype(np.int64)
        self.align = ((w >> np.uint64(L.align_shift)) & np.uint64(L.align_mask)).astype(np.int64)
        self.tid = rec["tid"].astype(np.int64)
        frames = np.array(rec["frames"], dtype=np.uint64, copy=True).reshape(self.n, L.nframes)
        # Slots after the first zero are unused by contract; clear them so stacks that differ
        # only there count as one, exactly as trim() does on the pure side.
        # (Column by column: numpy's accumulate along the short axis is slow.)
        dead = np.zeros(self.n, dtype=bool)
        for j in range(1, L.nframes):
            dead |= frames[:, j - 1] == 0
            frames[dead, j] = 0
        self.frames = frames
        self.walked = np.repeat(np.arange(len(counts), dtype=np.int64), counts)

    def block(self, i):
        return Block(int(self.hdr[i]), int(self.hdr[i]) + self.layout.header_size,
                     int(self.size[i]), int(self.tid[i]), int(self.lst[i]), int(self.align[i]),
                     trim(int(x) for x in self.frames[i]), int(self.walked[i]))

    def everything(self):
        return np.arange(self.n, dtype=np.int64)

    def columns(self):
        return self.hdr.tolist(), self.size.tolist(), self.walked.tolist()

    def select(self, min_size=None, tid=None, sel=None):
        sel = self.everything() if sel is None else sel
        if min_size is not None:
            sel = sel[self.size[sel] >= np.uint64(min_size)]
        if tid is not None:
            sel = sel[self.tid[sel] == tid]
        return sel

    def count(self, sel):
        return int(len(sel))

    def totals(self, sel):
        return int(len(sel)), int(self.size[sel].sum(dtype=np.uint64))

    @staticmethod
    def _hash_rows(f):
        h = np.full(len(f), 0xCBF29CE484222325, dtype=np.uint64)
        prime = np.uint64(0x100000001B3)
        for j in range(f.shape[1]):
            h ^= f[:, j]
            h *= prime
            h ^= h >> np.uint64(29)
        return h

    def _exact_ids(self, f):
        """(group id per row, first row of each group) by sorting the rows themselves."""
        order = np.lexsort(f.T[::-1])
        fs = f[order]
        change = np.any(fs[1:] != fs[:-1], axis=1)
        sorted_ids = np.concatenate([[0], np.cumsum(change)]).astype(np.int64)
        inv = np.empty(len(f), dtype=np.int64)
        inv[order] = sorted_ids
        first = order[np.concatenate([[0], np.flatnonzero(change) + 1])]
        return inv, first

    def _row_ids(self, f):
        # Hash each stack to one word and group the words: a sort of 8-byte keys instead of
        # 80-byte rows.  Every row is then compared with its group's first row, so a hash
        # collision is caught and answered by the exact (slower) row sort.
        h = self._hash_rows(f)
        _, first, inv = np.unique(h, return_index=True, return_inverse=True)
        inv = inv.reshape(-1)
        if np.any(f != f[first][inv]):
            return self._exact_ids(f)
        return inv.astype(np.int64), first

    def groups(self, sel):
        if len(sel) == 0:
            return [], np.zeros(0, dtype=np.int64)
        f = self.frames[sel]
        inv, first = self._row_ids(f)
        ng = len(first)
        counts = np.bincount(inv, minlength=ng)
        order = np.argsort(inv, kind="stable")
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        nbytes = np.add.reduceat(self.size[sel][order], starts)
        example = np.minimum.reduceat(self.hdr[sel][order], starts)
        frames = [trim(int(x) for x in row) for row in f[first]]
        counts_l = [int(c) for c in counts]
        nbytes_l = [int(b) for b in nbytes]
        gorder = _group_order(frames, counts_l, nbytes_l)
        rank = np.empty(ng, dtype=np.int64)
        rank[np.array(gorder, dtype=np.int64)] = np.arange(ng, dtype=np.int64)
        hs = self.layout.header_size
        groups = [StackGroup(frames[g], counts_l[g], nbytes_l[g], int(example[g]) + hs)
                  for g in gorder]
        return groups, rank[inv]

    def restrict(self, sel, gids, keep):
        return sel[np.isin(gids, np.array(sorted(keep), dtype=np.int64))]

    def threads(self, sel):
        if len(sel) == 0:
            return []
        tids, inv = np.unique(self.tid[sel], return_inverse=True)
        counts = np.bincount(inv, minlength=len(tids))
        order = np.argsort(inv, kind="stable")
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        nbytes = np.add.reduceat(self.size[sel][order], starts)
        rows = [(int(t), int(c), int(b)) for t, c, b in zip(tids, counts, nbytes)]
        return sorted(rows, key=lambda r: (-r[2], r[0]))

    def by_address(self, sel):
        return [int(i) for i in sel[np.argsort(self.hdr[sel], kind="stable")]]

    def per_list(self):
        out = {}
        if self.n:
            counts = np.bincount(self.walked)
            starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
            nonempty = counts > 0
            sums = np.add.reduceat(self.size, starts[nonempty]) if nonempty.any() else []
            for li, c, b in zip(np.flatnonzero(nonempty), counts[nonempty], sums):
                out[int(li)] = (int(c), int(b))
        return out

    def wrong_list(self):
        return [int(i) for i in np.flatnonzero(self.lst != self.walked)]

    def duplicates(self):
        if self.n == 0:
            return []
        order = np.argsort(self.hdr, kind="stable")
        hs = self.hdr[order]
        dup = np.flatnonzero(hs[1:] == hs[:-1]) + 1
        return sorted(int(i) for i in order[dup])

    def _make_index(self):
        order = np.argsort(self.hdr, kind="stable")
        return BlockIndex(self.hdr[order], self.size[order], order, self.layout.header_size)


class BlockIndex:
    """Block lookup by any address inside it (header, user data, or one past a 0-byte block's
    start): sorted header addresses and a binary search, one address at a time or, with numpy,
    a whole array of candidate pointers at once (what a reachability scan needs)."""

    def __init__(self, hdr_sorted, size_sorted, order, header_size):
        self.hdr = hdr_sorted
        self.size = size_sorted
        self.order = order  # block index of each sorted entry
        self.hs = header_size
        self._hdr_list = [int(h) for h in hdr_sorted] if not isinstance(hdr_sorted, list) \
            else hdr_sorted

    def find(self, addr):
        """(block index, where) for the block holding `addr`, where is "header" or "data";
        None if no live block holds it."""
        k = bisect.bisect_right(self._hdr_list, addr) - 1
        if k < 0:
            return None
        h = self._hdr_list[k]
        user = h + self.hs
        if addr < user:
            return int(self.order[k]), "header"
        if addr < user + max(int(self.size[k]), 1):
            return int(self.order[k]), "data"
        return None

    def find_many(self, addrs):
        """Block index of each address in `addrs` whose data part it lies in, else -1 (a numpy
        array; for the bulk pointer scans of reachability)."""
        addrs = np.asarray(addrs, dtype=np.uint64)
        if len(self._hdr_list) == 0:
            return np.full(len(addrs), -1, dtype=np.int64)
        hdr = np.asarray(self.hdr, dtype=np.uint64)
        size = np.asarray(self.size, dtype=np.uint64)
        order = np.asarray(self.order, dtype=np.int64)
        k = np.searchsorted(hdr, addrs, side="right").astype(np.int64) - 1
        kk = np.maximum(k, 0)
        user = hdr[kk] + np.uint64(self.hs)
        end = user + np.maximum(size[kk], np.uint64(1))
        ok = (k >= 0) & (addrs >= user) & (addrs < end)
        return np.where(ok, order[kk], -1)


# --------------------------------------------------------------------------------------------
# Symbols


Sym = collections.namedtuple("Sym", "function offset file line lib")
Sym.__new__.__defaults__ = (None, None, None, None, None)


class Symbols:
    """Names code addresses through `resolve(pc) -> Sym or None`, once per distinct address."""

    def __init__(self, resolve=None):
        self._resolve = resolve
        self._cache = {}

    def sym(self, pc):
        s = self._cache.get(pc, False)
        if s is False:
            s = None
            if self._resolve is not None:
                try:
                    s = self._resolve(pc)
                except Exception:  # a symbolizer failure only costs us the name
                    s = None
            self._cache[pc] = s
        return s

    def text(self, pc):
        """`function+0xoff (file:line) in lib`, with whatever parts are known."""
        s = self.sym(pc)
        if s is None:
            return hexa(pc)
        if s.function:
            out = s.function if s.offset is None else "%s+0x%x" % (s.function, s.offset)
        else:
            out = hexa(pc)
        if s.file:
            out += " (%s:%s)" % (s.file, s.line) if s.line else " (%s)" % s.file
        if s.lib:
            out += " in %s" % s.lib
        return out

    def short(self, pc):
        """The frame's name for folded stacks: the function, or the raw address."""
        s = self.sym(pc)
        name = s.function if s is not None and s.function else hexa(pc)
        return name.replace(";", ":").replace("\n", " ")

    def as_json(self, pc):
        s = self.sym(pc) or Sym()
        return {"pc": hexa(pc), "function": s.function, "offset": s.offset, "file": s.file,
                "line": s.line, "lib": s.lib, "text": self.text(pc)}


# --------------------------------------------------------------------------------------------
# Command arguments


class Options:
    def __init__(self):
        self.min_size = None
        self.thread = None
        self.match = None
        self.limit = None
        self.json = False
        self.headers = False
        self.args = []


FILTERS = ("--min-size", "--thread", "--match", "--limit")


def _number(opt, text):
    try:
        v = int(text, 0)
    except ValueError:
        raise UsageError("%s wants a number, not %r" % (opt, text)) from None
    if v < 0:
        raise UsageError("%s wants a number >= 0, not %s" % (opt, text))
    return v


def split_words(text, usage=""):
    """Splits on blanks; quotes ('...' or "...") group words.  Backslashes are kept as they are,
    because the one argument likely to hold them is a regular expression."""
    words = []
    cur = None
    quote = None
    for ch in text:
        if quote:
            if ch == quote:
                quote = None
            else:
                cur += ch
        elif ch in "'\"":
            quote = ch
            cur = cur or ""
        elif ch.isspace():
            if cur is not None:
                words.append(cur)
                cur = None
        else:
            cur = (cur or "") + ch
    if quote:
        raise UsageError("unbalanced %s quote (usage: %s)" % (quote, usage))
    if cur is not None:
        words.append(cur)
    return words


def parse_args(argstr, allowed=(), positional=0, usage=""):
    """Parses gdb command arguments: `allowed` options, then up to `positional` words."""
    words = split_words(argstr or "", usage)
    o = Options()
    it = iter(words)
    for w in it:
        if w.startswith("--") and w != "--":
            name, eq, val = w.partition("=")
            if name not in allowed:
                raise UsageError("unknown option %s (usage: %s)" % (name, usage))
            if name in ("--json", "--headers"):
                if eq:
                    raise UsageError("%s takes no value" % name)
                setattr(o, name[2:], True)
                continue
            if not eq:
                val = next(it, None)
                if val is None:
                    raise UsageError("%s needs a value (usage: %s)" % (name, usage))
            if name == "--match":
                try:
                    o.match = re.compile(val)
                except re.error as e:
                    raise UsageError("bad --match regex %r: %s" % (val, e)) from None
            elif name == "--min-size":
                o.min_size = _number(name, val)
            elif name == "--thread":
                o.thread = _number(name, val)
            elif name == "--limit":
                o.limit = _number(name, val)
        else:
            o.args.append(w)
    if len(o.args) > positional:
        raise UsageError("unexpected argument %r (usage: %s)" % (o.args[positional], usage))
    return o


# --------------------------------------------------------------------------------------------
# Commands: each returns the text to print


class Analysis:
    """Answers the dmem commands for one Heap and one Symbols."""

    def __init__(self, heap, symbols=None, source=None):
        self.heap = heap
        self.sym = symbols if symbols is not None else Symbols()
        self.source = source  # how memory is read, for `stats`

    # ---- shared pieces

    def warnings(self):
        """Lines about anything that makes the answer incomplete."""
        out = []
        heap = self.heap
        heap.blocks()
        if heap.flags is not None and not heap.recording:
            out.append("warning: libdmem was not recording in this process; its lists are empty")
        if heap.problems:
            out.append("warning: %s in the lists; the answer is incomplete "
                       "(see 'dmem verify'):" % plural(len(heap.problems), "problem"))
            out.extend("warning:   %s" % p for p in heap.problems[:5])
            if len(heap.problems) > 5:
                out.append("warning:   ... and %d more" % (len(heap.problems) - 5))
        return out

    def stack_matches(self, frames, regex):
        return any(regex.search(self.sym.text(pc)) for pc in frames)

    def filtered(self, o, grouped=True):
        """(blocks, selection, groups, group ids) after all of the options' filters; the groups
        are None unless `grouped` (or --match needed them anyway)."""
        b = self.heap.blocks()
        sel = b.select(min_size=o.min_size, tid=o.thread)
        groups = gids = None
        if o.match is not None:
            # A regex is tried once per distinct stack, not once per block.
            groups, gids = b.groups(sel)
            keep = [g for g, grp in enumerate(groups) if self.stack_matches(grp.frames, o.match)]
            sel = b.restrict(sel, gids, keep)
            groups = None
        if grouped:
            groups, gids = b.groups(sel)
        return b, sel, groups, gids

    def frames_text(self, frames, indent="    "):
        if not frames:
            return [indent + "(no stack recorded)"]
        return [indent + self.sym.text(pc) for pc in frames]

    def block_json(self, bl):
        return {"addr": hexa(bl.user), "header": hexa(bl.header), "size": bl.size,
                "tid": bl.tid, "list": bl.walked_list,
                "align": 1 << bl.align_log2 if bl.align_log2 else None,
                "stack": [self.sym.as_json(pc) for pc in bl.frames]}

    @staticmethod
    def dump(obj):
        return json.dumps(obj, indent=1) + "\n"

    def _problems_json(self):
        return [p.as_json() for p in self.heap.problems]

    # ---- commands

    def summary(self, o):
        b, sel, groups, _ = self.filtered(o)
        count, nbytes = b.totals(sel)
        limit = 20 if o.limit is None else o.limit
        shown = groups if limit == 0 else groups[:limit]
        if o.json:
            return self.dump({
                "format": JSON_FORMAT, "command": "summary",
                "total": {"stacks": len(groups), "blocks": count, "bytes": nbytes},
                "stacks": [{"rank": k + 1, "blocks": g.count, "bytes": g.bytes,
                            "example": hexa(g.example),
                            "stack": [self.sym.as_json(pc) for pc in g.frames]}
                           for k, g in enumerate(shown)],
                "problems": self._problems_json()})
        out = self.warnings()
        for k, g in enumerate(shown):
            out.append("stack %d: %d bytes in %s (e.g. %s)" % (
                k + 1, g.bytes, plural(g.count, "block"), hexa(g.example)))
            out.extend(self.frames_text(g.frames))
        rest = groups[len(shown):]
        if rest:
            out.append("... %d more %s (%d bytes in %s) not shown; --limit 0 shows all" % (
                len(rest), "stack" if len(rest) == 1 else "stacks", sum(g.bytes for g in rest),
                plural(sum(g.count for g in rest), "block")))
        out.append("total: %d bytes in %s from %s" % (
            nbytes, plural(count, "block"), plural(len(groups), "stack")))
        return "\n".join(out) + "\n"

    def _listed(self, o):
        b, sel, _, _ = self.filtered(o, grouped=False)
        idx = b.by_address(sel)
        total = len(idx)
        if o.limit:
            idx = idx[:o.limit]
        return b, idx, total

    def stacks(self, o):
        b, idx, total = self._listed(o)
        if o.json:
            return self.dump({"format": JSON_FORMAT, "command": "stacks", "total": total,
                              "blocks": [self.block_json(b.block(i)) for i in idx],
                              "problems": self._problems_json()})
        out = self.warnings()
        nbytes = 0
        for i in idx:
            bl = b.block(i)
            nbytes += bl.size
            out.append("%s: %d bytes allocated by thread %d at:" % (hexa(bl.user), bl.size,
                                                                    bl.tid))
            out.extend(self.frames_text(bl.frames))
        if total > len(idx):
            out.append("... %d more not shown" % (total - len(idx)))
        out.append("%s shown, %d bytes" % (plural(len(idx), "block"), nbytes))
        return "\n".join(out) + "\n"

    def walk(self, o):
        b, idx, total = self._listed(o)
        hs = self.heap.layout.header_size
        if o.json:
            addrs = [int(b.block(i).header) + (0 if o.headers else hs) for i in idx]
            return self.dump({"format": JSON_FORMAT, "command": "walk",
                              "kind": "headers" if o.headers else "blocks", "total": total,
                              "addrs": [hexa(a) for a in addrs],
                              "problems": self._problems_json()})
        out = self.warnings()
        delta = 0 if o.headers else hs
        hdr = b.hdr
        out.extend(hexa(int(hdr[i]) + delta) for i in idx)
        if total > len(idx):
            out.append("... %d more not shown" % (total - len(idx)))
        return "\n".join(out) + "\n" if out else ""

    def whatis(self, addr, o):
        L = self.heap.layout
        found = self.heap.index().find(addr)
        if found is None:
            in_arena = L.arena_start <= addr < L.arena_end
            if o.json:
                return self.dump({"format": JSON_FORMAT, "command": "whatis", "addr": hexa(addr),
                                  "block": None, "bootstrap_arena": in_arena})
            if in_arena:
                return ("%s: inside libdmem's bootstrap arena (%s-%s), whose blocks carry no "
                        "header or stack\n" % (hexa(addr), hexa(L.arena_start), hexa(L.arena_end)))
            return "%s: not inside any live block\n" % hexa(addr)
        i, where = found
        bl = self.heap.blocks().block(i)
        if o.json:
            d = self.block_json(bl)
            d["offset"] = addr - bl.user
            d["in_header"] = where == "header"
            return self.dump({"format": JSON_FORMAT, "command": "whatis", "addr": hexa(addr),
                              "block": d})
        if where == "header":
            head = "%s: inside libdmem's header of the %d-byte block %s (header %s, offset %d)" % (
                hexa(addr), bl.size, hexa(bl.user), hexa(bl.header), addr - bl.header)
        else:
            head = "%s: %d bytes into the %d-byte block %s (header %s)" % (
                hexa(addr), addr - bl.user, bl.size, hexa(bl.user), hexa(bl.header))
        out = [head, "allocated by thread %d at:" % bl.tid]
        out.extend(self.frames_text(bl.frames))
        return "\n".join(out) + "\n"

    def verify(self, o):
        rep = self.heap.verify()
        if o.json:
            return self.dump({"format": JSON_FORMAT, "command": "verify", "ok": rep.ok,
                              "lists": rep.nlists, "blocks": rep.nblocks, "bytes": rep.nbytes,
                              "problems": [p.as_json() for p in rep.problems]})
        out = [str(p) for p in rep.problems]
        if rep.ok:
            out.append("dmem verify: %s, %s, %d bytes: no problems found" % (
                plural(rep.nlists, "list"), plural(rep.nblocks, "block"), rep.nbytes))
        else:
            out.append("dmem verify: %s found (%s, %s, %d bytes walked)" % (
                plural(len(rep.problems), "problem"), plural(rep.nlists, "list"),
                plural(rep.nblocks, "block"), rep.nbytes))
        return "\n".join(out) + "\n"

    def stats(self, o):
        heap = self.heap
        L = heap.layout
        live_blocks, live_bytes, allocs, frees = heap.counters()
        b = heap.blocks()
        threads = b.threads(b.everything())
        walked = b.totals(b.everything())
        lists_used = sum(1 for li in heap.lists if li.allocs)
        if o.json:
            return self.dump({
                "format": JSON_FORMAT, "command": "stats", "layout": hexa(L.addr),
                "version": L.version, "recording": heap.recording if heap.flags is not None
                else None,
                "counters": {"live_blocks": live_blocks, "live_bytes": live_bytes,
                             "allocs": allocs, "frees": frees},
                "walked": {"blocks": walked[0], "bytes": walked[1]},
                "lists_used": lists_used, "memory": self.source,
                "threads": [{"tid": t, "blocks": c, "bytes": n} for t, c, n in threads],
                "problems": self._problems_json()})
        rec = "unknown (flags unreadable)" if heap.flags is None else (
            "on" if heap.recording else "off")
        out = self.warnings()
        out += [L.describe(),
                "recording: %s" % rec,
                "live blocks: %d" % live_blocks,
                "live bytes: %d" % live_bytes,
                "allocations: %d" % allocs,
                "frees: %d" % frees,
                "lists in use: %d of %d" % (lists_used, L.nlists),
                "walked: %s, %d bytes" % (plural(walked[0], "block"), walked[1])]
        if self.source:
            out.append("memory: %s" % self.source)
        out += ["per thread (live blocks by allocating thread):",
                "  %10s %12s %16s" % ("tid", "blocks", "bytes")]
        out += ["  %10d %12d %16d" % r for r in threads]
        return "\n".join(out) + "\n"

    def folded(self, o):
        """(folded text, number of lines, bytes): `outer;...;inner bytes` per stack."""
        _, sel, groups, _ = self.filtered(o)
        acc = collections.OrderedDict()
        for g in groups:
            key = ";".join(self.sym.short(pc) for pc in reversed(g.frames)) or "[no stack]"
            acc[key] = acc.get(key, 0) + g.bytes
        lines = ["%s %d" % (k, v) for k, v in sorted(acc.items())]
        return "".join(line + "\n" for line in lines), len(lines), sum(acc.values())
