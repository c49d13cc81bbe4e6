"""The answers of the commands about live blocks: summary, stacks, walk, whatis, verify, stats
and folded, as text or JSON.  `Analysis` holds one Heap and one Symbols; each method takes parsed
Options and returns what to print."""

import collections

from .output import JSON_FORMAT, dump, frames_text, hexa, plural, stack_json
from .symbols import Symbols


def fold(sym, groups):
    """(folded text, number of lines, bytes) of stack groups: `outer;...;inner bytes` per
    stack, the input of inferno-flamegraph and FlameGraph's flamegraph.pl."""
    acc = collections.OrderedDict()
    for g in groups:
        key = ";".join(sym.short(pc) for pc in reversed(g.frames)) or "[no stack]"
        acc[key] = acc.get(key, 0) + g.bytes
    lines = ["%s %d" % (k, v) for k, v in sorted(acc.items())]
    return "".join(line + "\n" for line in lines), len(lines), sum(acc.values())


class Analysis:
    """Answers the dmem commands about live blocks for one Heap and one Symbols."""

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

    def select(self, o, sel=None, grouped=True):
        """(selection, groups, group ids) of the blocks in `sel` (default: all) that pass the
        filters --min-size, --thread and --match; the groups are None unless `grouped`.  A
        regex is tried once per distinct stack, not once per block."""
        b = self.heap.blocks()
        sel = b.select(min_size=o.min_size, tid=o.thread, sel=sel)
        groups = gids = None
        if o.match is not None:
            groups, gids = b.groups(sel)
            keep = [g for g, grp in enumerate(groups) if self.sym.matches(grp.frames, o.match)]
            sel = b.restrict(sel, gids, keep)
            groups = None
        if grouped:
            groups, gids = b.groups(sel)
        return sel, groups, gids

    def block_json(self, bl):
        return {"addr": hexa(bl.user), "header": hexa(bl.header), "size": bl.size,
                "tid": bl.tid, "list": bl.walked_list,
                "align": 1 << bl.align_log2 if bl.align_log2 else None,
                "stack": stack_json(self.sym, bl.frames)}

    def problems_json(self):
        return [p.as_json() for p in self.heap.problems]

    @staticmethod
    def rest_line(groups, shown):
        """The `... N more stacks not shown` line, or None."""
        rest = groups[len(shown):]
        if not rest:
            return None
        return "... %d more %s (%d bytes in %s) not shown; --limit 0 shows all" % (
            len(rest), "stack" if len(rest) == 1 else "stacks", sum(g.bytes for g in rest),
            plural(sum(g.count for g in rest), "block"))

    @staticmethod
    def limited(rows, o):
        """The rows --limit lets through (20 unless given; 0 for all)."""
        limit = 20 if o.limit is None else o.limit
        return rows if limit == 0 else rows[:limit]

    # ---- commands

    def summary(self, o):
        b = self.heap.blocks()
        sel, groups, _ = self.select(o)
        count, nbytes = b.totals(sel)
        shown = self.limited(groups, o)
        if o.json:
            return dump({
                "format": JSON_FORMAT, "command": "summary",
                "total": {"stacks": len(groups), "blocks": count, "bytes": nbytes},
                "stacks": [{"rank": k + 1, "blocks": g.count, "bytes": g.bytes,
                            "example": hexa(g.example), "stack": stack_json(self.sym, g.frames)}
                           for k, g in enumerate(shown)],
                "problems": self.problems_json()})
        out = self.warnings()
        for k, g in enumerate(shown):
            out.append("stack %d: %d bytes in %s (e.g. %s)" % (
                k + 1, g.bytes, plural(g.count, "block"), hexa(g.example)))
            out.extend(frames_text(self.sym, g.frames))
        rest = self.rest_line(groups, shown)
        if rest:
            out.append(rest)
        out.append("total: %d bytes in %s from %s" % (
            nbytes, plural(count, "block"), plural(len(groups), "stack")))
        return "\n".join(out) + "\n"

    def _listed(self, o):
        b = self.heap.blocks()
        sel, _, _ = self.select(o, grouped=False)
        idx = b.by_address(sel)
        total = len(idx)
        if o.limit:
            idx = idx[:o.limit]
        return b, idx, total

    def stacks(self, o):
        b, idx, total = self._listed(o)
        if o.json:
            return dump({"format": JSON_FORMAT, "command": "stacks", "total": total,
                         "blocks": [self.block_json(b.block(i)) for i in idx],
                         "problems": self.problems_json()})
        out = self.warnings()
        nbytes = 0
        for i in idx:
            bl = b.block(i)
            nbytes += bl.size
            out.append("%s: %d bytes allocated by thread %d at:" % (hexa(bl.user), bl.size,
                                                                    bl.tid))
            out.extend(frames_text(self.sym, bl.frames))
        if total > len(idx):
            out.append("... %d more not shown" % (total - len(idx)))
        out.append("%s shown, %d bytes" % (plural(len(idx), "block"), nbytes))
        return "\n".join(out) + "\n"

    def walk(self, o):
        b, idx, total = self._listed(o)
        delta = 0 if o.headers else self.heap.layout.header_size
        hdr = b.hdr
        addrs = [int(hdr[i]) + delta for i in idx]
        if o.json:
            return dump({"format": JSON_FORMAT, "command": "walk",
                         "kind": "headers" if o.headers else "blocks", "total": total,
                         "addrs": [hexa(a) for a in addrs], "problems": self.problems_json()})
        out = self.warnings()
        out.extend(hexa(a) for a in addrs)
        if total > len(idx):
            out.append("... %d more not shown" % (total - len(idx)))
        return "\n".join(out) + "\n" if out else ""

    def whatis(self, addr, o):
        L = self.heap.layout
        found = self.heap.index().find(addr)
        if found is None:
            in_arena = L.arena_start <= addr < L.arena_end
            if o.json:
                return dump({"format": JSON_FORMAT, "command": "whatis", "addr": hexa(addr),
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
            return dump({"format": JSON_FORMAT, "command": "whatis", "addr": hexa(addr),
                         "block": d})
        if where == "header":
            head = "%s: inside libdmem's header of the %d-byte block %s (header %s, offset %d)" % (
                hexa(addr), bl.size, hexa(bl.user), hexa(bl.header), addr - bl.header)
        else:
            head = "%s: %d bytes into the %d-byte block %s (header %s)" % (
                hexa(addr), addr - bl.user, bl.size, hexa(bl.user), hexa(bl.header))
        out = [head, "allocated by thread %d at:" % bl.tid]
        out.extend(frames_text(self.sym, bl.frames))
        return "\n".join(out) + "\n"

    def verify(self, o):
        rep = self.heap.verify()
        if o.json:
            return dump({"format": JSON_FORMAT, "command": "verify", "ok": rep.ok,
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
            return dump({
                "format": JSON_FORMAT, "command": "stats", "layout": hexa(L.addr),
                "version": L.version, "recording": heap.recording if heap.flags is not None
                else None,
                "counters": {"live_blocks": live_blocks, "live_bytes": live_bytes,
                             "allocs": allocs, "frees": frees},
                "walked": {"blocks": walked[0], "bytes": walked[1]},
                "lists_used": lists_used, "memory": self.source,
                "threads": [{"tid": t, "blocks": c, "bytes": n} for t, c, n in threads],
                "problems": self.problems_json()})
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
        """(folded text, number of lines, bytes) of the live blocks."""
        _, groups, _ = self.select(o)
        return fold(self.sym, groups)
