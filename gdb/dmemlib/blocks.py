"""The live blocks, decoded from their headers: a column store with two back ends behind one
interface, `NumpyBlocks` (whole arrays) and `PureBlocks` (lists and dicts), which give identical
answers (tests/python checks them against each other).

A selection (`sel`) is an opaque set of block indices from everything() or select(); results
handed out are plain Python values, so the two back ends can be compared directly.  Blocks are
indexed in walk order; `index()` sorts them by address for lookups.
"""

import bisect
import collections
import struct

from .backend import NUMPY, np

Block = collections.namedtuple(
    "Block", "header user size tid list align_log2 frames walked_list")

StackGroup = collections.namedtuple("StackGroup", "frames count bytes example")


def fixed_struct(fields, size):
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


class Collector:
    """Copies headers out of the buffers a list walk reads them from, in bulk, and builds the
    Blocks of the chosen back end from them.  `hdrs` is the walk's array of header addresses."""

    def __init__(self, backend_name, layout, hdrs):
        self.backend = backend_name
        self.layout = layout
        self.hdrs = hdrs
        hs = layout.header_size
        if backend_name == NUMPY:
            self._parts = []
            self._width = np.arange(hs // 8, dtype=np.intp)
        else:
            self._raw = bytearray()

    def gather(self, buf, lo, a, b):
        """Takes the headers hdrs[a:b], which lie in `buf` (memory from address `lo` on)."""
        if self.backend == NUMPY:
            # Headers are 8-aligned in an 8-aligned buffer: take them as rows of words.
            words = np.frombuffer(buf, dtype="<u8", count=len(buf) // 8)
            offs = np.frombuffer(self.hdrs[a:b], dtype=np.uint64) - np.uint64(lo)
            self._parts.append(words[(offs >> np.uint64(3)).astype(np.intp)[:, None]
                                     + self._width])
        else:
            hs = self.layout.header_size
            raw = self._raw
            for h in self.hdrs[a:b]:
                raw.extend(buf[h - lo:h - lo + hs])

    def blocks(self, counts):
        """The Blocks of everything gathered; `counts` are the blocks walked per list."""
        if self.backend == NUMPY:
            hs = self.layout.header_size
            raw = np.concatenate(self._parts) if self._parts else np.zeros((0, hs // 8), np.uint64)
            return NumpyBlocks(self.layout, self.hdrs, raw, counts)
        return PureBlocks(self.layout, self.hdrs, self._raw, counts)


class Blocks:
    """What both back ends offer."""

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
        st, names = fixed_struct(
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
            self.align.append((w >> ashift) & L.align_mask)
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
        sel = self.everything() if sel is None else np.asarray(sel, dtype=np.int64)
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
        inv = inv.reshape(-1)
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
    """Block lookup by any address inside it (header, user data, or a 0-byte block's start):
    sorted header addresses and a binary search."""

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
