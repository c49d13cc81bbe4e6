"""Reachability: the graph of pointers between live blocks, the mark from the roots, and the
leak classes, as valgrind's memcheck defines them (mc_leakcheck.c; the exit report in src/analysis/reach.rs
follows the same definition):

* Every aligned 8-byte word of a root or of a marked block is a pointer candidate.  A word equal
  to a block's user address is a *start pointer*; one inside (user, user + size) an *interior
  pointer* (a zero-sized block is hit only by its start).  Only whole words inside a block are
  its contents.
* **Still reachable**: reached by a start pointer from a root or from a still reachable block.
* **Possibly lost**: not still reachable, but reached from a root through an interior pointer
  somewhere, or through a possibly lost block.
* The rest is lost.  Taken in address order, each lost block no earlier one has claimed heads a
  clique: it is **definitely lost**, and every lost block it reaches (through any pointer) that
  is not yet claimed is **indirectly lost**.  A clique head reached by a later head is demoted
  to indirectly lost, so a cycle with no outside pointer has exactly one definitely lost block.

Memory is scanned in bulk through a Space, candidate words are filtered by the heap's address
range and mapped to blocks with a sorted-array search.  numpy does this in whole arrays; the
pure-Python path gives identical answers, more slowly.
"""

import bisect
import collections
import struct
from array import array

from .backend import np
from .errors import ReadError

# The state of a block during and after the mark.
UNSEEN, REACHABLE, POSSIBLE, DEFINITE, INDIRECT = 0, 1, 2, 3, 4

# The classes in the order every output lists them, their names as valgrind prints them, their
# JSON keys, and the words of --show.
CLASSES = (DEFINITE, INDIRECT, POSSIBLE, REACHABLE)
CLASS_TEXT = {DEFINITE: "definitely lost", INDIRECT: "indirectly lost",
              POSSIBLE: "possibly lost", REACHABLE: "still reachable"}
CLASS_KEY = {c: t.replace(" ", "_") for c, t in CLASS_TEXT.items()}
SHOW_WORDS = {"definite": DEFINITE, "indirect": INDIRECT, "possible": POSSIBLE,
              "reachable": REACHABLE}
# What `dmem leaks` lists unless --show says otherwise, as valgrind's --show-leak-kinds.
DEFAULT_SHOW = (DEFINITE, INDIRECT, POSSIBLE)
LOST = (DEFINITE, INDIRECT)

# A level of a traversal smaller than this is expanded in Python: numpy's per-call cost would
# dominate on long chains such as a linked list.
SMALL_LEVEL = 48

# Words scanned per numpy pass: big enough to amortise the calls, small enough that the
# temporaries stay in cache-friendly sizes.
SCAN_CHUNK = 1 << 20


class PartlyUnread(ReadError):
    """Part of a range was not mapped at all; carries what the rest of it gave."""

    def __init__(self, refs):
        Exception.__init__(self, "part of the range is not mapped")
        self.refs = refs


Refs = collections.namedtuple("Refs", "addrs tgts exact")


def _aligned(start, end):
    return (start + 7) & ~7, end & ~7


class Graph:
    """Live blocks sorted by address and the pointers between them (CSR arrays).

    `starts` and `sizes` are the blocks' user addresses and sizes in address order.  Edges run
    from block to block; `indptr[i]:indptr[i + 1]` are block i's targets in `dst`, in the order
    of the words that point to them, and `exact` tells which of those words are start pointers.
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
        self.indptr = self.dst = self.exact = None

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

    def is_start(self, k, addr):
        return int(self.starts[k]) == addr

    def _targets_np(self, vals):
        """(positions in vals, block index, start pointer?) of the values that point into a
        block."""
        span = np.uint64(self.hi - self.lo)
        pos = np.flatnonzero((vals - np.uint64(self.lo)) < span)
        if not len(pos):
            return pos, pos, np.zeros(0, bool)
        v = vals[pos]
        k = np.searchsorted(self.starts, v, side="right").astype(np.int64) - 1
        kk = np.maximum(k, 0)
        ok = v < self.ends[kk]
        ok &= k >= 0
        return pos[ok], k[ok], (v == self.starts[kk])[ok]

    def refs(self, start, end):
        """Words in [start, end) that point into blocks: Refs(word addresses, block indices,
        start pointer?), as numpy arrays or lists.  Parts of the range not in memory are
        skipped; PartlyUnread (carrying the rest) if some of it was not even mapped."""
        a, b = _aligned(start, end)
        parts, missing = self.space.parts(a, b)
        got = []
        for s, e in parts:
            s, e = _aligned(s, e)
            if e > s and self.n:
                got.append(self._refs(s, e))
        if self.np:
            out = Refs(np.concatenate([x.addrs for x in got]) if got else np.zeros(0, np.uint64),
                       np.concatenate([x.tgts for x in got]) if got else np.zeros(0, np.int64),
                       np.concatenate([x.exact for x in got]) if got else np.zeros(0, bool))
        else:
            out = Refs(*([v for x in got for v in getattr(x, f)] for f in Refs._fields))
        if missing:
            raise PartlyUnread(out)
        return out

    def _refs(self, a, b):
        w = self.space.words(a, b, self.np)
        if self.np:
            addrs, tgts, exact = [], [], []
            for c in range(0, len(w), SCAN_CHUNK):
                pos, k, ex = self._targets_np(w[c:c + SCAN_CHUNK])
                addrs.append(np.uint64(a + 8 * c) + pos.astype(np.uint64) * np.uint64(8))
                tgts.append(k)
                exact.append(ex)
            return Refs(np.concatenate(addrs), np.concatenate(tgts), np.concatenate(exact))
        addrs, tgts, exact = [], [], []
        lo, hi, starts, ends = self.lo, self.hi, self.starts, self.ends
        for i, v in enumerate(w):
            if lo <= v < hi:
                k = bisect.bisect_right(starts, v) - 1
                if v < ends[k]:
                    addrs.append(a + 8 * i)
                    tgts.append(k)
                    exact.append(v == starts[k])
        return Refs(addrs, tgts, exact)

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
            if self.space.copies:
                self._words[r] = w
        return w

    def _build(self):
        if self.np:
            self._build_np()
        else:
            self._build_pure()

    def _build_np(self):
        srcs, dsts, exact = [], [], []
        starts, wends = self.starts, self.wends
        for r, (i, j, base, end) in enumerate(self.runs()):
            w = self.run_words(r)
            for c in range(0, len(w), SCAN_CHUNK):
                pos, k, ex = self._targets_np(w[c:c + SCAN_CHUNK])
                if not len(pos):
                    continue
                addr = np.uint64(base + 8 * c) + pos.astype(np.uint64) * np.uint64(8)
                s = np.searchsorted(starts[i:j], addr, side="right").astype(np.int64) - 1 + i
                ok = (s >= i) & (addr < wends[np.maximum(s, i)])
                srcs.append(s[ok])
                dsts.append(k[ok])
                exact.append(ex[ok])
        src = np.concatenate(srcs) if srcs else np.zeros(0, np.int64)
        # Runs are scanned in address order, so the sources come out sorted.
        self.dst = np.concatenate(dsts).astype(np.int64) if dsts else np.zeros(0, np.int64)
        self.exact = np.concatenate(exact) if exact else np.zeros(0, bool)
        self.indptr = np.zeros(self.n + 1, dtype=np.int64)
        if self.n:
            np.cumsum(np.bincount(src, minlength=self.n), out=self.indptr[1:])

    def _build_pure(self):
        dst = array("q")
        exact = array("b")
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
                            exact.append(v == starts[k])
            indptr.append(len(dst))
        self.dst = dst
        self.exact = exact
        self.indptr = indptr

    def sources(self):
        """The source block of every edge, in edge order."""
        if self.np:
            ip = self.indptr
            return np.repeat(np.arange(self.n, dtype=np.int64), ip[1:] - ip[:-1])
        return [u for u in range(self.n) for _ in range(self.indptr[u + 1] - self.indptr[u])]

    def start_edges(self):
        """The CSR arrays (indptr, dst) of the edges that are start pointers only."""
        self.edges()
        if self.np:
            keep = self.exact.astype(bool)
            ip = np.zeros(self.n + 1, dtype=np.int64)
            np.cumsum(np.bincount(self.sources()[keep], minlength=self.n), out=ip[1:])
            return ip, self.dst[keep]
        ip = array("q", [0])
        dst = array("q")
        for u in range(self.n):
            for e in range(self.indptr[u], self.indptr[u + 1]):
                if self.exact[e]:
                    dst.append(self.dst[e])
            ip.append(len(dst))
        return ip, dst

    def link(self, a, b):
        """(offset in block a, offset into block b) of the word of a that points into b: the
        first start pointer if there is one, else the first pointer; None if none does."""
        s = int(self.starts[a])
        try:
            refs = self.refs(s, int(self.wends[a]))
        except PartlyUnread as e:
            refs = e.refs
        first = None
        for ad, t, ex in zip(*refs):
            if int(t) == b:
                if ex:
                    return int(ad) - s, 0
                if first is None:
                    first = int(ad) - s
        if first is None:
            return None
        return first, self.word(s + first) - int(self.starts[b])

    def word(self, addr):
        """The 8-byte word at addr, or None if it cannot be read."""
        try:
            return struct.unpack("<Q", bytes(self.space.buffer(addr, addr + 8)))[0]
        except ReadError:
            return None

    # ---- contents, for types and histograms

    def by_run(self, idx):
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



class Reach:
    """Classifies every block of a Graph from its roots.

    `state[k]` is one of CLASSES.  For a still reachable or possibly lost block, `parent[k]` is
    the block that first pointed to it in a breadth-first mark (so chains are short), or -2 - r
    for the r-th entry of `root_refs`: (root index, address of the word or None for a register,
    start pointer?).

    The mark runs in two passes, which give exactly memcheck's answer: still reachable blocks
    are those a chain of start pointers leads to from a root, so the first pass follows start
    pointers only; every other block a chain of any pointers leads to is possibly lost, so the
    second pass goes on from the roots' interior pointers and from every edge out of a still
    reachable block, along any pointer.

    Lost blocks are split into cliques without replaying them one by one.  A lost block ends up
    in the clique of the lowest-addressed lost block that can reach it (its *owner*; a block no
    lower one reaches owns itself and heads a clique), and a head stays definitely lost exactly
    when every lost block pointing to it is in its own clique.  So owners are computed as the
    minimum over each block's lost ancestors, by relaxing edges: whole-array rounds while much
    changes, then a worklist.
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

    def _bfs(self, level, ip, dst, mark):
        """Marks `mark` every unseen block the edges (ip, dst) lead to from `level`."""
        state, parent = self.state, self.parent
        use_np = self.g.np
        ipv = memoryview(ip).cast("B").cast("q") if use_np else ip
        dsv = memoryview(np.ascontiguousarray(dst)).cast("B").cast("q") \
            if use_np and len(dst) else dst
        while len(level):
            if use_np and len(level) >= SMALL_LEVEL:
                level = np.asarray(level, dtype=np.int64)
                rep, d = self._expand_np(ip, dst, level)
                if rep is None:
                    break
                take = self._first(d, self._st[d] == UNSEEN)
                level = d[take]
                self._st[level] = mark
                self._par[level] = rep[take]
                continue
            nxt = []
            for u in (level if isinstance(level, list) else level.tolist()):
                for e in range(ipv[u], ipv[u + 1]):
                    v = dsv[e]
                    if state[v] == UNSEEN:
                        state[v] = mark
                        parent[v] = u
                        nxt.append(v)
            level = nxt

    def _root_refs(self):
        """Refs of every root, in root order; registers give one ref (or none)."""
        g = self.g
        for r, root in enumerate(self.roots):
            if root.kind == "register":
                k = g.find(root.value)
                yield r, (Refs([None], [k], [g.is_start(k, root.value)]) if k >= 0 else None)
                continue
            try:
                yield r, g.refs(root.start, root.end)
            except PartlyUnread as e:
                self.unread_roots.append(root)
                yield r, e.refs

    def _seed(self, r, refs, want_exact, mark, level):
        """Marks `mark` the unseen blocks root r's refs hit with a start pointer (want_exact) or
        an interior one, recording the first word that hit each."""
        addrs, tgts, exact = refs
        if self.g.np and not isinstance(tgts, list):
            if not len(tgts):
                return
            m = exact if want_exact else ~exact
            first = self._first(tgts, m & (self._st[tgts] == UNSEEN)).tolist()
            hits = [(int(addrs[p]), int(tgts[p])) for p in first]
        else:
            hits = [(a, k) for a, k, x in zip(addrs, tgts, exact) if bool(x) == want_exact]
        for a, k in hits:
            if self.state[k] == UNSEEN:
                self.state[k] = mark
                self.parent[k] = -2 - len(self.root_refs)
                self.root_refs.append((r, a, want_exact))
                level.append(k)

    def _mark(self):
        g = self.g
        every = [(r, refs) for r, refs in self._root_refs() if refs is not None]
        # Still reachable: start pointers from the roots, then from still reachable blocks.
        level = []
        for r, refs in every:
            self._seed(r, refs, True, REACHABLE, level)
        self._bfs(level, *g.start_edges(), REACHABLE)
        # Possibly lost: the rest of what any pointer leads to from there.
        level = []
        for r, refs in every:
            self._seed(r, refs, False, POSSIBLE, level)
        ip, dst = g.indptr, g.dst
        if g.np:
            src = g.sources()
            if len(dst):
                take = self._first(dst, (self._st[src] == REACHABLE) & (self._st[dst] == UNSEEN))
                d = dst[take]
                self._st[d] = POSSIBLE
                self._par[d] = src[take]
                level.extend(d.tolist())
        else:
            for u in range(g.n):
                if self.state[u] != REACHABLE:
                    continue
                for e in range(ip[u], ip[u + 1]):
                    v = dst[e]
                    if self.state[v] == UNSEEN:
                        self.state[v] = POSSIBLE
                        self.parent[v] = u
                        level.append(v)
        self._bfs(level, ip, dst, POSSIBLE)

    # ---- definitely and indirectly lost: the cliques

    def _classify_leaks(self):
        g = self.g
        n = g.n
        if g.np:
            leaked = self._st == UNSEEN
            src = g.sources()
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
            # A head that a block of another clique points to is demoted.
            hit = dst[owner[src] != dst]
            lead[hit] = False
            self._st[leaked] = INDIRECT
            self._st[lead] = DEFINITE
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
            st[u] = DEFINITE if u in lead else INDIRECT

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
        """{class: number of blocks}."""
        c = collections.Counter(self.state)
        return {k: c[k] for k in CLASSES}

    def chain(self, k):
        """The blocks from the root (or from the definitely lost head of its clique) down to
        block k; and the root reference (root index, word address, start pointer?) of a still
        reachable or possibly lost block, else None."""
        if self.state[k] in (REACHABLE, POSSIBLE):
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
                src = g.sources()
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
        """A shortest chain of lost blocks from a definitely lost one to lost block k (searching
        backwards from k; every indirectly lost block hangs off some clique head)."""
        if self.state[k] == DEFINITE:
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
                    if u in came or state[u] not in LOST:
                        continue
                    came[u] = v
                    if state[u] == DEFINITE:
                        out = [u]
                        while came[out[-1]] is not None:
                            out.append(came[out[-1]])
                        return out
                    nxt.append(u)
            level = nxt
        return [k]


