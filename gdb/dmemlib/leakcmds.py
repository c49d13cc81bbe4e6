"""The answers of the leak-finding commands: leaks, types, words and why (and the lost stacks of
`folded --leaks`), as text or JSON, over one heapcmds.Analysis and one roots.Target.

The leak classes are valgrind's (see reach.py): definitely, indirectly and possibly lost, and
still reachable; `--show` picks the ones listed, and `--leaks` means the lost ones.
"""

import collections

from . import cxxtypes
from .backend import NUMPY, np
from .cxxtypes import WORD_TYPES, Vtables, histogram
from .errors import UsageError
from .heapcmds import fold
from .output import JSON_FORMAT, dump, frames_text, hexa, plural, stack_json
from .reach import (CLASS_KEY, CLASS_TEXT, CLASSES, DEFAULT_SHOW, DEFINITE, POSSIBLE, REACHABLE,
                    SHOW_WORDS, Graph, Reach)

# `dmem why` prints this many blocks at each end of a longer chain.
WHY_ENDS = 4

SHOW_NAME = {c: w for w, c in SHOW_WORDS.items()}


def classes_of(o):
    """The leak classes a command looks at: --show's, else the lost ones with --leaks, else
    None (every live block)."""
    if o.show:
        return o.show
    return DEFAULT_SHOW if o.leaks else None


def describe(classes):
    """How output names the blocks of `classes`: "live", "lost", or the classes themselves."""
    if classes is None:
        return "live"
    if tuple(classes) == DEFAULT_SHOW:
        return "lost"
    return " or ".join(CLASS_TEXT[c] for c in classes)


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

    def _state(self):
        st = self.reach().state
        if self.np:
            return np.frombuffer(st, dtype=np.uint8) if len(st) else np.zeros(0, np.uint8)
        return st

    def positions(self, classes=None):
        """Positions (address order) of every live block, or of those in `classes`."""
        n = self.graph.n
        if classes is None:
            return np.arange(n, dtype=np.int64) if self.np else list(range(n))
        return self.keep(list(range(n)) if not self.np else np.arange(n, dtype=np.int64),
                         self._state(), classes)

    def keep(self, items, cls, classes):
        """The items (of a selection or positions) whose class (in `cls`, alongside) is one of
        `classes`."""
        if self.np:
            return items[np.isin(cls, np.array(classes, dtype=np.uint8))]
        return [x for x, c in zip(items, cls) if c in classes]

    def class_of(self, sel):
        """Class of each block of a selection of the heap's Blocks."""
        pos = self.to_positions(sel)
        st = self._state()
        if self.np:
            return st[pos]
        return [st[k] for k in pos]

    def to_blocks(self, pos):
        if self.np:
            return self.order[np.asarray(pos, dtype=np.int64)]
        return [self.order[k] for k in pos]

    def to_positions(self, sel):
        if self.np:
            return self.rank[np.asarray(sel, dtype=np.int64)]
        return [self.rank[i] for i in sel]

    def select(self, pos, o, grouped=True):
        """Selection, stack groups and group ids of the blocks at positions `pos` after the
        filters --min-size, --thread and --match."""
        return self.an.select(o, sel=self.to_blocks(pos), grouped=grouped)

    def warnings(self, scanned=True):
        out = self.an.warnings()
        out.extend("warning: %s" % w for w in self.t.warnings)
        if scanned:
            out.extend("note: %s" % n for n in self.t.notes)
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

    def _by_class(self, sel, cls, gids=None, ngroups=1):
        """{class: [(blocks, bytes) per group]} of the selected blocks (one group if gids is
        None)."""
        out = {}
        if self.np:
            sizes = self.b.size[np.asarray(sel, dtype=np.int64)]
            g = np.zeros(len(sel), np.int64) if gids is None else np.asarray(gids, np.int64)
            for c in CLASSES:
                m = cls == c
                count = np.bincount(g[m], minlength=ngroups)
                nbytes = np.zeros(ngroups, np.uint64)
                np.add.at(nbytes, g[m], sizes[m])
                out[c] = [(int(x), int(y)) for x, y in zip(count, nbytes)]
            return out
        acc = {c: [[0, 0] for _ in range(ngroups)] for c in CLASSES}
        for k, (i, c) in enumerate(zip(sel, cls)):
            a = acc[c][0 if gids is None else gids[k]]
            a[0] += 1
            a[1] += self.b.size[i]
        return {c: [tuple(x) for x in v] for c, v in acc.items()}

    # ---- dmem leaks

    def leaks(self, o):
        self.reach()
        shown = o.show or DEFAULT_SHOW
        every, _, _ = self.an.select(o, grouped=False)
        cls_every = self.class_of(every)
        totals = {c: v[0] for c, v in self._by_class(every, cls_every).items()}
        sel = self.keep(every, cls_every, shown)
        groups, gids = self.b.groups(sel)
        per = self._by_class(sel, self.class_of(sel), gids, len(groups))
        listed = self.an.limited(groups, o)
        if o.json:
            def classes_json(g):
                return {CLASS_KEY[c]: {"blocks": per[c][g][0], "bytes": per[c][g][1]}
                        for c in CLASSES}
            doc = {"format": JSON_FORMAT, "command": "leaks",
                   "show": [SHOW_NAME[c] for c in shown]}
            doc.update({CLASS_KEY[c]: {"blocks": totals[c][0], "bytes": totals[c][1]}
                        for c in CLASSES})
            doc.update({
                "total": {"stacks": len(groups), "blocks": sum(g.count for g in groups),
                          "bytes": sum(g.bytes for g in groups)},
                "stacks": [dict({"rank": k + 1, "blocks": g.count, "bytes": g.bytes,
                                 "example": hexa(g.example)}, **classes_json(k),
                                stack=stack_json(self.an.sym, g.frames))
                           for k, g in enumerate(listed)],
                "roots": self._roots_json(),
                "notes": self.t.notes,
                "warnings": self.t.warnings,
                "problems": self.an.problems_json()})
            return dump(doc)
        out = self.warnings()
        for k, g in enumerate(listed):
            parts = ", ".join("%d %s" % (per[c][k][0], CLASS_TEXT[c]) for c in CLASSES
                              if per[c][k][0])
            out.append("stack %d: %d bytes in %s (%s), e.g. %s, allocated at:" % (
                k + 1, g.bytes, plural(g.count, "block"), parts, hexa(g.example)))
            out.extend(frames_text(self.an.sym, g.frames))
        rest = self.an.rest_line(groups, listed)
        if rest:
            out.append(rest)
        # valgrind's LEAK SUMMARY wording, as the exit report's summary line has it too.
        out.append("total: " + "; ".join("%s: %d bytes in %s" % (
            CLASS_TEXT[c], totals[c][1], plural(totals[c][0], "block")) for c in CLASSES))
        return "\n".join(out) + "\n"

    def _roots_json(self):
        r = self.reach()
        ranges = [x for x in self.t.roots if x.kind != "register"]
        return {"ranges": len(ranges), "bytes": sum(x.end - x.start for x in ranges),
                "registers": len(self.t.roots) - len(ranges),
                "unreadable": [x.where for x in r.unread_roots],
                "excluded": [{"start": hexa(x.start), "end": hexa(x.end), "what": x.what}
                             for x in self.t.excluded]}

    # ---- dmem folded --leaks

    def folded(self, o):
        """(folded text, number of lines, bytes) of the lost blocks (or those of --show), as
        heapcmds.fold writes them."""
        _, groups, _ = self.select(self.positions(o.show or DEFAULT_SHOW), o)
        return fold(self.an.sym, groups)

    # ---- dmem types

    def block_types(self):
        """(positions, vtable numbers) of the blocks whose first word points into a vtable."""
        if self._types is None:
            vt = self.vtables()
            pos, first = cxxtypes.fields(self.graph, self.positions(), 0, 8)
            ks = vt.lookup(first, self.np)
            if self.np:
                ok = ks >= 0
                self._types = (pos[ok], ks[ok])
            else:
                self._types = ([p for p, k in zip(pos, ks) if k >= 0], [k for k in ks if k >= 0])
        return self._types

    def typed(self, classes):
        """{type name: positions} over the live blocks (or those of `classes`) that have a
        vtable pointer."""
        pos, ks = self.block_types()
        if classes is not None:
            st = self._state()
            if self.np:
                keep = np.isin(st[pos], np.array(classes, dtype=np.uint8))
                pos, ks = pos[keep], ks[keep]
            else:
                pairs = [(p, k) for p, k in zip(pos, ks) if st[p] in classes]
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
        classes = classes_of(o)
        rows = []
        for name, pos in self.typed(classes).items():
            sel, groups, _ = self.select(pos, o)
            count, nbytes = self.b.totals(sel)
            if count:
                rows.append((name, count, nbytes, groups))
        rows.sort(key=lambda r: (-r[1], -r[2], r[0]))
        shown = self.an.limited(rows, o)
        pool_n = len(self.positions(classes))
        what = describe(classes)
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
        out = self.warnings(scanned=classes is not None)
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
                n, plural(c, "block"), plural(g.count, "block"), g.bytes, hexa(g.example)))
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
        classes = classes_of(o)
        what = describe(classes)
        if o.vtable is not None:
            typed = self.typed(classes)
            pos = typed.get(o.vtable)
            if pos is None:
                pos = typed.get(self.vtables().type_of_symbol(o.vtable))
            if pos is None:
                seen = sorted(typed)[:8]
                raise UsageError("no %s block has the vtable of %r; types seen: %s" % (
                    what, o.vtable, ", ".join(seen) if seen else "none"))
            about = "%s blocks of type %s" % (what, o.vtable)
        else:
            pos = self.positions(classes)
            about = "%s blocks" % what
        sel, _, _ = self.select(pos, o, grouped=False)
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
        if width == 8:
            for v, _ in shown:
                name = self._symbol(v) if v else None
                if name:
                    names[v] = name
        if o.json:
            return dump({
                "format": JSON_FORMAT, "command": "words", "blocks": nblocks,
                "vtable": o.vtable, "offset": o.offset, "type": o.type or "u64",
                "leaks": classes is not None, "words": total, "distinct": distinct,
                "values": [{"value": hexa(v), "count": c, "symbol": names.get(v)}
                           for v, c in shown]})
        out = self.warnings(scanned=classes is not None)
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
                return dump({"format": JSON_FORMAT, "command": "why", "addr": hexa(addr),
                             "block": None})
            return "%s: not inside any live block\n" % hexa(addr)
        i, _where = found
        k = int(self.rank[i])
        r = self.reach()
        cls = r.state[k]
        chain, ref = r.chain(k)
        # (offset in the block above, offset into this block) of each hop down the chain.
        hops = [self.graph.link(a, b) or (None, None) for a, b in zip(chain, chain[1:])]
        root = into = None
        if ref is not None:
            root_i, word, exact = ref
            root = self.t.roots[root_i]
            value = root.value if word is None else self.graph.word(word)
            into = None if exact or value is None else value - int(self.graph.starts[chain[0]])
        if o.json:
            root_json = None
            if root is not None:
                root_json = {"kind": root.kind, "where": root.where,
                             "addr": hexa(word) if word is not None else None,
                             "value": hexa(root.value) if root.value is not None else None,
                             "start_pointer": bool(exact), "into": into}
            return dump({
                "format": JSON_FORMAT, "command": "why", "addr": hexa(addr),
                "class": CLASS_KEY[cls], "root": root_json,
                "chain": [dict(self.an.block_json(self.b.block(int(self.order[p]))),
                               via_offset=None if n == 0 else hops[n - 1][0],
                               into=None if n == 0 else hops[n - 1][1])
                          for n, p in enumerate(chain)]})
        out = self.warnings()
        target = self.b.block(i)
        user = hexa(target.user)
        if cls in (REACHABLE, POSSIBLE):
            if cls == REACHABLE:
                out.append("%s is still reachable: start pointers lead to it from a root "
                           "through %s:" % (user, plural(len(chain), "block")))
            else:
                out.append("%s is possibly lost: only a chain through an interior pointer leads "
                           "to it from a root, through %s:" % (user, plural(len(chain), "block")))
            hit = "" if into is None else ", %d bytes into the first block" % into
            if root is None:
                pass
            elif root.kind == "register":
                out.append("  root: %s = %s%s" % (root.where, hexa(root.value), hit))
            else:
                name = self._symbol(word)
                out.append("  root: the word at %s%s, in the %s%s" % (
                    hexa(word), " (%s)" % name if name else "", root.where, hit))
        elif cls == DEFINITE:
            out.append("%s is definitely lost: no pointer from a root or from a block in use "
                       "leads to it, and no other lost block holds it" % user)
        else:
            out.append("%s is indirectly lost: only lost blocks point to it; a chain from the "
                       "definitely lost block %s:" % (
                           user, hexa(self.b.block(int(self.order[chain[0]])).user)))
        if cls == DEFINITE:
            out.append("  %s, allocated at:" % self.block_line(k))
            out.extend(frames_text(self.an.sym, target.frames, indent="       "))
            return "\n".join(out) + "\n"
        # A long chain (a linked list) shows its ends; --json gives all of it.
        keep = WHY_ENDS if len(chain) > 2 * WHY_ENDS + 1 else len(chain)
        last = None
        for n, p in enumerate(chain):
            if keep <= n < len(chain) - keep:
                if n == keep:
                    out.append("  ... %d more blocks on the way ..." % (len(chain) - 2 * keep))
                continue
            via = ""
            if n:
                off, inside = hops[n - 1]
                via = " at offset %s of the block above" % off
                if inside:
                    via += ", %d bytes into this one" % inside
            frames = self.b.block(int(self.order[p])).frames
            if frames == last:
                out.append("  -> %s%s, allocated at the same stack" % (self.block_line(p), via))
                continue
            out.append("  -> %s%s, allocated at:" % (self.block_line(p), via))
            out.extend(frames_text(self.an.sym, frames, indent="       "))
            last = frames
        return "\n".join(out) + "\n"

    def _symbol(self, addr):
        if self.t.symbol_at is None:
            return None
        try:
            return self.t.symbol_at(addr)
        except Exception:  # a failing lookup only costs the name
            return None
