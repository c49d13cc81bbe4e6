"""What the contents of blocks say: C++ types from the vtable pointer in a block's first word,
and histograms of the words (or of one field) of many blocks.

Vtables are the `vtable for X` symbols (_ZTV...) of the loaded objects; names are demangled by
the debugger when it can, else by c++filt.
"""

import bisect
import collections
import struct
import subprocess

from .backend import np
from .reach import SCAN_CHUNK

# Field types of `dmem words --type`: (width in bytes, numpy type, struct code).
WORD_TYPES = {"u8": (1, "<u1", "B"), "u16": (2, "<u2", "H"), "u32": (4, "<u4", "I"),
              "u64": (8, "<u8", "Q")}


def fields(graph, idx, offset, width):
    """(blocks, values): the `width`-byte little-endian field at `offset` of each block in
    `idx` big enough to hold it (blocks whose memory is unreadable are left out)."""
    if graph.np:
        idx = np.asarray(idx, dtype=np.int64)
        idx = idx[graph.sizes[idx] >= np.uint64(offset + width)]
        out_b, out_v = [np.zeros(0, np.int64)], [np.zeros(0, np.uint64)]
        for r, base, sel in graph.by_run(idx):
            raw = graph.run_words(r).view(np.uint8)
            at = (graph.starts[sel] - np.uint64(base) + np.uint64(offset)).astype(np.int64)
            v = np.zeros(len(sel), dtype=np.uint64)
            for k in range(width):
                v |= raw[at + k].astype(np.uint64) << np.uint64(8 * k)
            out_b.append(sel)
            out_v.append(v)
        return np.concatenate(out_b), np.concatenate(out_v)
    code = "<" + {1: "B", 2: "H", 4: "I", 8: "Q"}[width]
    out_b, out_v = [], []
    for r, base, sel in graph.by_run(idx):
        raw = graph.run_words(r).cast("B")
        for b in sel:
            if graph.sizes[b] >= offset + width:
                out_b.append(b)
                out_v.append(struct.unpack_from(code, raw, graph.starts[b] - base + offset)[0])
    return out_b, out_v


def word_histogram(graph, idx, limit):
    """Histogram of every aligned word of the blocks in `idx`: see histogram()."""
    if graph.np:
        parts = []
        for r, base, sel in graph.by_run(idx):
            w = graph.run_words(r)
            a = ((graph.starts[sel] - np.uint64(base)) >> np.uint64(3)).astype(np.int64)
            b = ((graph.wends[sel] - np.uint64(base)) >> np.uint64(3)).astype(np.int64)
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
    for r, base, sel in graph.by_run(idx):
        w = graph.run_words(r)
        for b in sel:
            s = (graph.starts[b] - base) // 8
            words.extend(w[s:max(s, (graph.wends[b] - base) // 8)])
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

