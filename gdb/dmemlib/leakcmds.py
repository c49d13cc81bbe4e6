"""The answers of the leak-finding commands: leaks, types, words and why (and the leaked stacks
of `folded --leaks`), as text or JSON, over one heapcmds.Analysis and one roots.Target."""

import collections

from . import cxxtypes
from .backend import NUMPY, np
from .cxxtypes import WORD_TYPES, Vtables, histogram
from .errors import UsageError
from .heapcmds import fold
from .output import JSON_FORMAT, dump, frames_text, hexa, plural, stack_json
from .reach import CLASS_NAMES, DIRECT, INDIRECT, REACHED, Graph, PartlyUnread, Reach

# `dmem why` prints this many blocks at each end of a longer chain.
WHY_ENDS = 4


class Leaks:
    """`dmem leaks`, `types`, `words` and `why` over one heapcmds.Analysis and one Target.

    Blocks are handled here in address order (position k); `order[k]` is the same block's index
    in the heap's Blocks, whose selections, groups and filters are reused for the output.
    """

    def __init__(self, analysis, target):
        self.an = analysis
        self.heap = analysis.heap
        self.t = target
        self.np = self.heap.backend == NUMPY
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
        """Selection, stack groups and group ids of the blocks at positions `pos` after the
        filters --min-size, --thread and --match."""
        return self.an.select(o, sel=self.to_blocks(pos))

    def warnings(self, scanned=True):
        out = self.an.warnings()
        out.extend("warning: %s" % n for n in self.t.notes)
        if scanned:
            r = self.reach()
            if r.unread_roots:
                out.append("warning: %s could not be read and %s not scanned: %s" % (
                    plural(len(r.unread_roots), "root range"),
                    "was" if len(r.unread_roots) == 1 else "were",
                    ", ".join(x.where for x in r.unread_roots[:4])))
        if self.graph.unread:
            out.append("warning: %s not in memory; their contents were not scanned" %
                       plural(len(self.graph.unread), "block"))
        return out

    def block_line(self, k):
        """`0x... (N bytes, thread T)` for the block at position k."""
        bl = self.b.block(int(self.order[k]))
        return "%s (%d bytes, thread %d)" % (hexa(bl.user), bl.size, bl.tid)

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
            return dump({
                "format": JSON_FORMAT, "command": "leaks",
                "total": {"blocks": total_blocks, "direct": total_direct,
                          "indirect": total_blocks - total_direct, "bytes": total_bytes,
                          "stacks": ng},
                "reachable": {"blocks": nreach, "bytes": reach_bytes},
                "stacks": [{"rank": g + 1, "blocks": groups[g].count, "direct": direct[g],
                            "indirect": groups[g].count - direct[g], "bytes": groups[g].bytes,
                            "example": hexa(groups[g].example),
                            "stack": stack_json(self.an.sym, groups[g].frames)}
                           for g in shown],
                "roots": self._roots_json(),
                "problems": self.an.problems_json()})
        out = self.warnings()
        for g in shown:
            grp = groups[g]
            out.append("leak %d: %d bytes in %s (%d direct, %d indirect), e.g. %s, allocated at:"
                       % (g + 1, grp.bytes, plural(grp.count, "block"), direct[g],
                          grp.count - direct[g], hexa(grp.example)))
            out.extend(frames_text(self.an.sym, grp.frames))
        if ng > len(shown):
            rest = groups[len(shown):]
            out.append("... %d more %s (%d bytes in %s) not shown; --limit 0 shows all" % (
                len(rest), "stack" if len(rest) == 1 else "stacks", sum(x.bytes for x in rest),
                plural(sum(x.count for x in rest), "block")))
        out.append("total: %d bytes leaked in %s (%d direct, %d indirect) from %s; %s (%d bytes) "
                   "still reachable" % (total_bytes, plural(total_blocks, "block"),
                                        total_direct, total_blocks - total_direct,
                                        plural(ng, "stack"),
                                        plural(nreach, "block"), reach_bytes))
        return "\n".join(out) + "\n"

    def _classes(self, sel):
        """Class of each block of a selection of the heap's Blocks."""
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

    # ---- dmem folded --leaks

    def folded(self, o):
        """(folded text, number of lines, bytes) of the leaked blocks, as heapcmds.fold."""
        _, groups, _ = self.select(self.positions(True), o)
        return fold(self.an.sym, groups)

    # ---- dmem types

    def block_types(self):
        """(positions, vtable numbers) of the blocks whose first word points into a vtable."""
        if self._types is None:
            vt = self.vtables()
            pos, first = cxxtypes.fields(self.graph, self.positions(False), 0, 8)
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
            return dump({
                "format": JSON_FORMAT, "command": "types", "blocks": what,
                "total": {"types": len(rows), "blocks": sum(r[1] for r in rows),
                          "bytes": sum(r[2] for r in rows), "of_blocks": pool_n},
                "types": [{"type": n, "blocks": c, "bytes": z,
                           "stacks": [{"blocks": g.count, "bytes": g.bytes,
                                       "example": hexa(g.example),
                                       "stack": stack_json(self.an.sym, g.frames)}
                                      for g in groups[:3]]}
                          for n, c, z, groups in shown],
                "problems": self.an.problems_json()})
        out = self.warnings(scanned=o.leaks)
        if not rows:
            out.append("no %s block starts with a pointer into a vtable (of %s)" % (
                what, plural(len(self.vtables()), "vtable symbol")))
            return "\n".join(out) + "\n"
        out.append("%12s %14s  %s" % ("blocks", "bytes", "type"))
        out.extend("%12d %14d  %s" % (c, z, n) for n, c, z, _ in shown)
        if len(rows) > len(shown):
            out.append("... %d more types not shown; --limit 0 shows all"
                       % (len(rows) - len(shown)))
        for n, c, z, groups in shown:
            g = groups[0]
            out.append("%s: %s, most from (%s, %d bytes, e.g. %s):" % (
                n, plural(c, "block"), plural(g.count, "block"), g.bytes,
                hexa(g.example)))
            out.extend(frames_text(self.an.sym, g.frames))
            if len(groups) > 1:
                out.append("    ... and %s more" % plural(len(groups) - 1, "stack"))
        out.append("total: %d of %d %s blocks (%d bytes) are of %s" % (
            sum(r[1] for r in rows), pool_n, what, sum(r[2] for r in rows),
            plural(len(rows), "C++ type")))
        return "\n".join(out) + "\n"

    # ---- dmem words

    def words(self, o):
        if o.type is not None and o.offset is None:
            raise UsageError("--type goes with --offset")
        what = "leaked" if o.leaks else "live"
        if o.vtable is not None:
            typed = self.typed(o.leaks)
            pos = typed.get(o.vtable)
            if pos is None:
                pos = typed.get(self.vtables().type_of_symbol(o.vtable))
            if pos is None:
                seen = sorted(typed)[:8]
                raise UsageError("no %s block has the vtable of %r; types seen: %s" % (
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
            have, vals = cxxtypes.fields(self.graph, pos, o.offset, width)
            values, counts, total, distinct = histogram(vals, limit)
            title = "the %s at offset %d of %s (%d of %d big enough)" % (
                o.type or "u64", o.offset, about, len(have), nblocks)
        else:
            width = 8
            values, counts, total, distinct = cxxtypes.word_histogram(self.graph, pos, limit)
            title = "the 8-byte words of %s (%s)" % (about, plural(nblocks, "block"))
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
            return dump({
                "format": JSON_FORMAT, "command": "words", "blocks": nblocks,
                "vtable": o.vtable, "offset": o.offset, "type": o.type or "u64",
                "leaks": bool(o.leaks), "words": total, "distinct": distinct,
                "values": [{"value": hexa(v), "count": c, "symbol": names.get(v)}
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
                return dump({"format": JSON_FORMAT, "command": "why",
                                     "addr": hexa(addr), "block": None})
            return "%s: not inside any live block\n" % hexa(addr)
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
                        "addr": hexa(word) if word is not None else None,
                        "value": hexa(rt.value) if rt.value is not None else None}
            return dump({
                "format": JSON_FORMAT, "command": "why", "addr": hexa(addr),
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
                hexa(target.user), plural(len(chain), "block")))
            if rt.kind == "register":
                out.append("  root: %s = %s" % (rt.where, hexa(rt.value)))
            else:
                name = self._symbol(word)
                out.append("  root: the word at %s%s, in the %s" % (
                    hexa(word), " (%s)" % name if name else "", rt.where))
        else:
            head = chain[0]
            if cls == DIRECT:
                out.append("%s is unreachable: a direct leak (no root and no other leaked block "
                           "points to it)" % hexa(target.user))
            else:
                out.append("%s is unreachable: an indirect leak, held only by leaked blocks; "
                           "a chain from the direct leak %s:" % (
                               hexa(target.user), hexa(self.b.block(int(self.order[head])).user)))
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
                out.extend(frames_text(self.an.sym, frames, indent="       "))
                last = frames
        else:
            out.append("  %s, allocated at:" % self.block_line(k))
            out.extend(frames_text(self.an.sym, target.frames, indent="       "))
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
