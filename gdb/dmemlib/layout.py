"""libdmem's binary contract, read from the process: the `dmem_layout` descriptor, the list
heads it points to, and the walk of the lists that yields every live block's header.

Versions 1 and 2 of the descriptor are read.  Everything read is distrusted: a core may come from
a process that crashed half way through a list update, or whose heap was overwritten by the very
bug being chased, so every walk is bounded by the lists' own counters, every read may fail, and
a problem is recorded (and reported by `dmem verify` and as warnings) rather than raised.
"""

import collections
import struct
from array import array

from . import backend, blocks
from .blocks import fixed_struct
from .errors import LayoutError, ReadError
from .memory import Memory, as_memory
from .output import hexa, plural

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


class Heap:
    """The lists of one process image, read through a Memory.

    `backend` is "numpy", "pure" or None (see backend.choose).  Both give the same answers.
    """

    def __init__(self, mem, layout_addr, backend_name=None):
        self.mem = as_memory(mem)
        self.layout = read_layout(self.mem, layout_addr)
        self.lists = read_lists(self.mem, self.layout)
        L = self.layout
        try:
            self.flags = self.mem.u64(L.flags)
        except ReadError:
            self.flags = None
        self.backend = backend.choose(backend_name)
        link, names = fixed_struct(
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
            collect = blocks.Collector(self.backend, self.layout, hdrs)
            for li in self.lists:
                counts.append(self._walk_list(li, hdrs, collect.gather, problems))
            self._blocks = collect.blocks(counts)
            self.problems = problems
        return self._blocks

    def verify(self):
        """Walks every list and checks it thoroughly; returns a VerifyReport."""
        blocks_ = self.blocks()
        L = self.layout
        problems = list(self.problems)
        cut = {p.list for p in problems}
        per_list = blocks_.per_list()
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
        for i in blocks_.wrong_list():
            b = blocks_.block(i)
            problems.append(Problem(b.walked_list, b.header, "header %s says it belongs on list "
                                    "%d" % (hexa(b.header), b.list)))
        for i in blocks_.duplicates():
            b = blocks_.block(i)
            problems.append(Problem(b.walked_list, b.header, "header %s is on more than one list"
                                    % hexa(b.header)))
        a0, a1 = L.arena_start, L.arena_end
        hs = L.header_size
        readable = self.mem.readable
        hdrs, sizes, walked = blocks_.columns()
        for h, size, li in zip(hdrs, sizes, walked):
            if a0 <= h < a1:
                problems.append(Problem(li, h, "header %s lies in the bootstrap arena, whose "
                                        "blocks have no header" % hexa(h)))
            if size and not readable(h + hs + size - 1):
                problems.append(Problem(li, h, "block %s of %d bytes runs into unreadable "
                                        "memory" % (hexa(h + hs), size)))
        tot = blocks_.totals(blocks_.everything())
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

