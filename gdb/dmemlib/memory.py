"""Memory sources.

Two ways of reading the target, for two kinds of work:

* `Memory` serves small reads (headers, descriptors) through any read(addr, n) function (gdb's
  read_memory, a core file, a test's fake address space) in large cached chunks.
* A `Space` serves whole ranges for bulk scans: `CoreSpace` straight from a core file's mapping
  with no copies, `ReaderSpace` through a reader in large pieces (a live process).

Everything read is distrusted: any read may fail with ReadError, and callers report that rather
than stop.
"""

import bisect
import collections
import struct

from .backend import np
from .elf import PF_R, PF_W, PF_X, Mapping
from .errors import ReadError


class Memory:
    """Chunked, cached access to target memory through a read(addr, n) -> bytes function.

    Every request to gdb has a fixed cost of microseconds, more than copying a few kilobytes,
    so headers are never read one by one: the aligned chunk around an address is read once and
    kept (least recently used chunks are dropped beyond `budget` bytes).  The lists are walked
    newest block first and a thread's blocks tend to lie together, so chunks are mostly used in
    one stretch and a modest budget suffices.  A chunk that is not wholly readable, as at the end
    of a mapping, is narrowed down by halves to the readable part around the address, and
    unreadable pages are remembered so a corrupt pointer costs little.
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


def layered(first, then):
    """A reader that asks `first` (returning None where it has nothing, like CoreFile.read) and
    falls back to `then`."""
    def read(addr, n):
        data = first(addr, n)
        return then(addr, n) if data is None else data
    return read


class Space:
    """The target's memory for bulk scans: sorted readable pieces [start, end) and whole-range
    reads.  Ranges are read once and scanned as arrays, never word by word.

    `mapped` are the ranges the process had mapped, readable or not, with their PF_R/W/X bits.
    In a core, memory that was mapped but not dumped (never written, or file contents the kernel
    leaves out) holds no heap pointers, so a scan skips it; only a range that was not mapped at
    all is reported.
    """

    def __init__(self, pieces, mapped=None):
        self.pieces = sorted((s, e) for s, e in pieces if e > s)
        self._starts = [p[0] for p in self.pieces]
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

    # A core's bytes are in the page cache already: keeping copies would only cost memory.
    copies = False

    def __init__(self, corefile):
        self.core = corefile
        self._file_off = {s: off for s, _e, off in corefile.segments}
        super().__init__([(s, e) for s, e, _ in corefile.segments],
                         [(p.vaddr, p.vaddr + p.memsz, p.flags) for p in corefile.loads])

    def buffer(self, start, end):
        parts = []
        a = start
        while a < end:
            p = self.piece_of(a)
            if p is None:
                raise ReadError(a, end - a)
            b = min(end, p[1])
            parts.append(self.core.read(a, b - a))
            a = b
        if len(parts) == 1:
            return parts[0]
        return b"".join(parts)


class ReaderSpace(Space):
    """Memory read through a read(addr, n) function (gdb on a live process), in large pieces."""

    CHUNK = 64 << 20
    # Reading a live process costs a copy each time: a scan keeps what it read.
    copies = True

    def __init__(self, read, pieces, mapped=None):
        super().__init__(pieces, mapped)
        self._read = read

    def buffer(self, start, end):
        if not self.readable(start, end):
            raise ReadError(start, end - start)
        parts = []
        a = start
        while a < end:
            n = min(self.CHUNK, end - a)
            data = self._read(a, n)
            if len(data) != n:
                raise ReadError(a, n)
            parts.append(data)
            a += n
        return parts[0] if len(parts) == 1 else b"".join(bytes(p) for p in parts)


def parse_maps(text):
    """From /proc/PID/maps text: the file mappings, the readable ranges and all the ranges:
    ([Mapping], [(start, end)], [(start, end, PF bits)])."""
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
