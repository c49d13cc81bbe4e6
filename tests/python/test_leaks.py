"""Unit tests of leak finding (gdb/dmemlib: elf, memory, roots, reach, cxxtypes, leakcmds) on
synthetic memory and hand-made ELF files: plain Python, no gdb.

The heap comes from fakeheap.FakeHeap; a data segment next to it plays the roots.  Every answer
is checked on both backends, and the classification against a direct transcription of the
leak classes against a literal transcription of memcheck's algorithm on random heaps.
"""

import bisect
import json
import os
import random
import shlex
import struct
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from fakeheap import FakeHeap, backends, fake_resolve, pc  # noqa: E402

from dmemlib import (backend, cxxtypes, elf, errors, heapcmds, leakcmds, memory,  # noqa: E402
                     output, reach, symbols)
from dmemlib import roots as rootsmod  # noqa: E402


class World:
    """A FakeHeap plus a data segment whose words are the roots."""

    DATA = 0x50000

    def __init__(self, **heap_args):
        self.fh = FakeHeap(**heap_args)
        self.fh.mem.map(self.DATA, 0x1000)
        self.nroots = 0
        self.extra_mapped = []

    def block(self, size, k=1, tid=100, gap=16):
        return self.fh.alloc(size, [pc(k), pc(50)], tid=tid, gap=gap)

    def put(self, addr, value):
        self.fh.mem.put64(addr, value)

    def root(self, value):
        self.put(self.DATA + 8 * self.nroots, value)
        self.nroots += 1
        return self.DATA + 8 * (self.nroots - 1)

    def space(self):
        pieces = [(b, b + len(buf)) for b, buf in self.fh.mem.regions]
        mapped = [(s, e, elf.PF_R | elf.PF_W) for s, e in pieces + self.extra_mapped]
        return memory.ReaderSpace(self.fh.mem.read, pieces, mapped)

    def roots(self):
        return [rootsmod.Root("data", "writable data of prog", self.DATA, self.DATA + 0x1000, None)]

    def leaks(self, backend, roots=None, **target_args):
        an = heapcmds.Analysis(self.fh.heap(backend), symbols.Symbols(fake_resolve))
        target = rootsmod.Target(self.space(), self.roots() if roots is None else roots,
                                 **target_args)
        return leakcmds.Leaks(an, target)


def opts(text="", allowed=("--json", "--leaks", "--show", "--vtable", "--offset", "--type")
         + output.FILTERS):
    return output.parse_args(shlex.split(text), allowed, 0, "test")


def leak_json(lk, text="--json --limit 0"):
    return json.loads(lk.leaks(opts(text)))


R_, P_, D_, I_ = reach.REACHABLE, reach.POSSIBLE, reach.DEFINITE, reach.INDIRECT


def counts(lk):
    """(still reachable, possibly lost, definitely lost, indirectly lost) blocks."""
    c = lk.reach().counts()
    return c[R_], c[P_], c[D_], c[I_]


def class_of(lk, user):
    return lk.reach().state[int(lk.rank[lk.heap.index().find(user)[0]])]


def reference(starts, sizes, roots_words, word_at):
    """memcheck's classification (mc_leakcheck.c, as gdb/dmemlib/reach.py words it), transcribed
    literally: a worklist mark with upgrades, then cliques in address order."""
    UNMARKED, REACH, POSS, DEF, IND = 0, R_, P_, D_, I_
    ends = [max(s + z, s + 1) for s, z in zip(starts, sizes)]

    def find(a):
        i = bisect.bisect_right(starts, a)
        return i - 1 if i > 0 and a < ends[i - 1] else None

    def scan(i):
        a, e = (starts[i] + 7) & ~7, starts[i] + sizes[i]
        while a + 8 <= e:
            yield word_at(a)
            a += 8

    n = len(starts)
    st = [UNMARKED] * n
    work = []

    def push(w, from_definite):
        i = find(w)
        if i is None:
            return
        via = REACH if w == starts[i] and from_definite else POSS
        if st[i] == UNMARKED or (st[i] == POSS and via == REACH):
            st[i] = via
            work.append(i)

    for w in roots_words:
        push(w, True)
    while work:
        i = work.pop()
        for w in scan(i):
            push(w, st[i] == REACH)
    clique = [None] * n
    for head in range(n):
        if st[head] != UNMARKED or clique[head] is not None:
            continue
        st[head] = DEF
        clique[head] = head
        work.append(head)
        while work:
            for w in scan(work.pop()):
                j = find(w)
                if j is None or j == head:
                    continue
                if st[j] == UNMARKED and clique[j] is None:
                    st[j] = IND
                    clique[j] = head
                    work.append(j)
                elif st[j] == DEF and clique[j] == j:
                    # A previous head, reached by this one: demoted into this clique.
                    st[j] = IND
                    clique[j] = head
    return st


def random_world(seed):
    rnd = random.Random(seed)
    w = World()
    n = rnd.choice([1, 3, 40, 250])
    users = [w.block(rnd.choice([0, 8, 12, 16, 24, 40, 64]), k=rnd.randrange(4),
                     gap=rnd.choice([0, 16, 48])) for _ in range(n)]
    sizes = {u: w.fh.field(w.fh.header(u), "size") & ((1 << 48) - 1) for u in users}

    def somewhere(u):
        # The start half the time: the classes turn on start pointers against interior ones.
        return u if rnd.random() < 0.5 else u + rnd.randrange(max(sizes[u], 1))

    for i, u in enumerate(users):
        for a in range(u, u + sizes[u] - 7, 8):
            r = rnd.random()
            if r < 0.3:
                w.put(a, somewhere(rnd.choice(users)))
            elif r < 0.5:
                w.put(a, somewhere(users[max(0, i - 1)]))
            elif r < 0.6:
                w.put(a, u - 8)  # into its own header: not a reference
            else:
                w.put(a, rnd.randrange(1 << 40))
    for _ in range(rnd.randrange(4)):
        w.root(somewhere(rnd.choice(users)))
    return w, users, sizes


def classes_by_address(lk):
    r = lk.reach()
    return [r.state[k] for k in range(lk.graph.n)]


class ClassificationTests(unittest.TestCase):
    def test_held_list_orphaned_list_and_singles(self):
        for be in backends():
            w = World()
            held = [w.block(16, k=1) for _ in range(10)]
            orphan = [w.block(16, k=2) for _ in range(10)]
            for _ in range(5):  # five single blocks nothing points to
                w.block(24, k=3)
            for chain in (held, orphan):
                for a, b in zip(chain, chain[1:]):
                    w.put(a, b)
            w.root(held[0])
            lk = w.leaks(be)
            self.assertEqual(counts(lk), (10, 0, 6, 9), be)
            j = leak_json(lk)
            self.assertEqual(j["definitely_lost"], {"blocks": 6, "bytes": 16 + 5 * 24})
            self.assertEqual(j["indirectly_lost"], {"blocks": 9, "bytes": 9 * 16})
            self.assertEqual(j["possibly_lost"], {"blocks": 0, "bytes": 0})
            self.assertEqual(j["still_reachable"], {"blocks": 10, "bytes": 160})
            self.assertEqual(j["show"], ["definite", "indirect", "possible"])
            self.assertEqual(j["total"], {"stacks": 2, "blocks": 15, "bytes": 280})
            by_frame = {s["stack"][0]["function"]: s for s in j["stacks"]}
            self.assertEqual((by_frame["f2"]["definitely_lost"]["blocks"],
                              by_frame["f2"]["indirectly_lost"]["blocks"]), (1, 9))
            self.assertEqual(by_frame["f2"]["example"], "0x%x" % orphan[0])
            self.assertEqual(by_frame["f3"]["definitely_lost"], {"blocks": 5, "bytes": 120})
            self.assertNotIn("f1", by_frame)
            text = lk.leaks(opts())
            self.assertIn("stack 1: 160 bytes in 10 blocks (1 definitely lost, 9 indirectly "
                          "lost), e.g. 0x%x, allocated at:" % orphan[0], text)
            self.assertIn("    f2+0x10 (prog.c:3) in prog", text)
            self.assertTrue(text.endswith(
                "total: definitely lost: 136 bytes in 6 blocks; indirectly lost: 144 bytes in 9 "
                "blocks; possibly lost: 0 bytes in 0 blocks; still reachable: 160 bytes in 10 "
                "blocks\n"), text)
            # --show picks the classes listed; the total line stays whole.
            text = lk.leaks(opts("--show reachable"))
            self.assertIn("stack 1: 160 bytes in 10 blocks (10 still reachable)", text)
            self.assertNotIn("stack 2", text)
            self.assertIn("still reachable: 160 bytes in 10 blocks", text)
            j = leak_json(lk, "--json --show all")
            self.assertEqual(j["total"], {"stacks": 3, "blocks": 25, "bytes": 440})
            self.assertEqual(leak_json(lk, "--json --show definite+indirect")["show"],
                             ["definite", "indirect"])

    def test_agrees_with_memcheck(self):
        saved = reach.SMALL_LEVEL, reach.Reach.ROUNDS
        try:
            for small, rounds in ((48, 6), (1, 0), (2, 1), (10 ** 9, 100)):
                reach.SMALL_LEVEL, reach.Reach.ROUNDS = small, rounds
                for seed in range(40):
                    w, users, sizes = random_world(seed)
                    order = sorted(users)
                    want = reference(order, [sizes[u] for u in order],
                                     [w.fh.mem.u64(w.DATA + 8 * k) for k in range(w.nroots)],
                                     w.fh.mem.u64)
                    got = {}
                    for be in backends():
                        lk = w.leaks(be)
                        self.assertEqual(classes_by_address(lk), want, (seed, be, small))
                        r = lk.reach()
                        got[be] = ([r.chain(k) for k in range(lk.graph.n)], list(r.parent))
                    self.assertEqual(len(set(map(repr, got.values()))), 1, seed)
        finally:
            reach.SMALL_LEVEL, reach.Reach.ROUNDS = saved

    def test_long_chains_and_cycles(self):
        for be in backends():
            for backwards in (False, True):
                w = World(heap_size=1 << 23)
                nodes = [w.block(16, k=1, gap=0) for _ in range(3000)]
                links = list(zip(nodes, nodes[1:]))
                if backwards:
                    links = [(b, a) for a, b in links]
                for a, b in links:
                    w.put(a, b + 8)  # interior pointers
                lk = w.leaks(be)
                self.assertEqual(counts(lk), (0, 0, 1, 2999), (be, backwards))
                head = nodes[-1] if backwards else nodes[0]
                self.assertEqual(class_of(lk, head), D_)
                # Held by its start from the far end: only the head is still reachable, the
                # rest hangs off interior pointers.
                w.root(head)
                self.assertEqual(counts(w.leaks(be)), (1, 2999, 0, 0))
            w = World()
            ring = [w.block(32, k=1) for _ in range(5)]
            for a, b in zip(ring, ring[1:] + ring[:1]):
                w.put(a + 8, b)
            tail = w.block(8, k=2)
            w.put(ring[3] + 16, tail)
            lk = w.leaks(be)
            self.assertEqual(counts(lk), (0, 0, 1, 5))
            self.assertEqual(class_of(lk, ring[0]), D_)

    def test_cycles_as_memcheck_counts_them(self):
        # The cycles of c-fixtures/leakclass_cycle.c: an orphaned 3-cycle; a 2-cycle allocated before the orphaned head
        # that points into it (the cycle heads a clique first, then the head takes it over);
        # a held 4-cycle.
        for be in backends():
            w = World()

            def cycle(n):
                nodes = [w.block(48) for _ in range(n)]
                for a, b in zip(nodes, nodes[1:] + nodes[:1]):
                    w.put(a, b)
                return nodes

            three = cycle(3)
            two = cycle(2)
            head = w.block(48)
            w.put(head, two[0])
            held = cycle(4)
            w.root(held[2])
            lk = w.leaks(be)
            self.assertEqual(counts(lk), (4, 0, 2, 4), be)
            self.assertEqual([class_of(lk, u) for u in three + two + [head]],
                             [D_, I_, I_, I_, I_, D_])
            text = lk.why(two[1], opts())
            self.assertIn("0x%x is indirectly lost: only lost blocks point to it; a chain from "
                          "the definitely lost block 0x%x:" % (two[1], head), text)

    def test_interior_pointers_make_possibly_lost(self):
        for be in backends():
            w = World()
            parents = [w.block(64) for _ in range(3)]
            children = [w.block(32) for _ in range(3)]
            for p, c in zip(parents, children):
                w.put(p, c)
                w.root(p + 40)
            held = w.block(64)
            w.root(held)
            upgraded = w.block(16)   # interior from the root, then a start pointer from held
            w.root(upgraded + 8)
            w.put(held + 8, upgraded)
            lk = w.leaks(be)
            self.assertEqual(counts(lk), (2, 6, 0, 0), be)
            self.assertEqual(class_of(lk, upgraded), R_)
            j = leak_json(lk)
            self.assertEqual(j["possibly_lost"], {"blocks": 6, "bytes": 3 * 96})
            self.assertEqual(j["total"]["blocks"], 6)
            text = lk.why(children[1] + 4, opts())
            self.assertIn("0x%x is possibly lost: only a chain through an interior pointer leads "
                          "to it from a root, through 2 blocks:" % children[1], text)
            self.assertIn(", in the writable data of prog, 40 bytes into the first block", text)
            self.assertIn("  -> 0x%x (32 bytes, thread 100) at offset 0 of the block above"
                          % children[1], text)
            j = json.loads(lk.why(children[1], opts("--json")))
            self.assertEqual(j["class"], "possibly_lost")
            self.assertEqual((j["root"]["start_pointer"], j["root"]["into"]), (False, 40))
            self.assertEqual([x["addr"] for x in j["chain"]],
                             ["0x%x" % parents[1], "0x%x" % children[1]])
            self.assertIn("is still reachable", lk.why(upgraded, opts()))

    def test_what_counts_as_a_pointer(self):
        for be in backends():
            w = World()
            a = w.block(100)
            b = w.block(12)    # its word at +8 is not whole inside it
            c = w.block(0)     # owns its start address
            d = w.block(40)
            e = w.block(40)
            f = w.block(40)
            g = w.block(40)
            w.root(a)
            w.root(g + 39)     # interior, last byte
            w.put(a, b)
            w.put(b + 8, d)    # past b's end: not scanned
            w.put(b, c)
            w.root(e + 40)     # one past the end: not e
            w.root(f - 8)      # f's header: not f
            w.fh.mem.put32(w.DATA + 0x100 + 4, (d >> 32) & 0xFFFFFFFF)  # misaligned: no
            w.fh.mem.put32(w.DATA + 0x100, d & 0xFFFFFFFF)
            w.put(w.DATA + 0x104 - 4, 0)
            lk = w.leaks(be)
            self.assertEqual({u: class_of(lk, u) for u in (a, b, c, d, e, f, g)},
                             {a: R_, b: R_, c: R_, d: D_, e: D_, f: D_, g: P_}, be)

    def test_registers_stacks_and_tls(self):
        for be in backends():
            w = World()
            stack = 0x60000
            w.fh.mem.map(stack, 0x2000)
            tls = 0x70000
            w.fh.mem.map(tls, 0x3000)
            by_reg, in_red_zone, below, above_sp, in_tls, in_tcb, far, inside_reg = (
                w.block(16) for _ in range(8))
            sp = stack + 0x1000
            w.put(sp - 8, in_red_zone)
            w.put(sp - 136, below)  # beyond the red zone: a dead frame
            w.put(sp + 0x800, above_sp)
            fs = tls + 0x2000
            w.put(fs - 0x100, in_tls)
            w.put(fs + 0x10, in_tcb)
            w.put(tls, far)  # far below the static TLS window
            th = elf.Thread(42, {"rsp": sp, "rbx": by_reg, "r12": inside_reg + 3,
                                 "fs_base": fs, "rip": 0x400000})
            found = rootsmod.gather_roots([], [th], w.space())
            self.assertEqual((found.excluded, found.notes), ([], []))
            kinds = {r.where for r in found.roots}
            self.assertIn("stack of thread 42", kinds)
            self.assertIn("register rbx of thread 42", kinds)
            self.assertIn("TLS of thread 42", kinds)
            stack_root = [r for r in found.roots if r.kind == "stack"][0]
            self.assertEqual((stack_root.start, stack_root.end), (sp - 128, stack + 0x2000))
            lk = w.leaks(be, roots=found.roots)
            self.assertEqual([class_of(lk, u) for u in (by_reg, in_red_zone, below, above_sp,
                                                        in_tls, in_tcb, far, inside_reg)],
                             [R_, R_, D_, R_, R_, R_, D_, P_])
            text = lk.why(by_reg, opts())
            self.assertIn("root: register rbx of thread 42 = 0x%x" % by_reg, text)
            text = lk.why(inside_reg, opts())
            self.assertIn("root: register r12 of thread 42 = 0x%x, 3 bytes into the first block"
                          % (inside_reg + 3), text)

    def test_unreadable_roots_and_blocks(self):
        for be in backends():
            w = World()
            x = w.block(16)
            w.root(x)
            # Mapped but not in memory (a core leaves out pages never written): no pointers,
            # no warning.  Not mapped at all: a warning.
            w.extra_mapped.append((0x90000, 0x91000))
            roots = w.roots() + [rootsmod.Root("data", "writable data of libz", 0x90000, 0x91000,
                                               None)]
            lk = w.leaks(be, roots=roots)
            self.assertEqual(counts(lk), (1, 0, 0, 0))
            self.assertNotIn("warning", lk.leaks(opts()))
            roots.append(rootsmod.Root("data", "writable data of libgone", 0xA0000, 0xA1000,
                                       None))
            lk = w.leaks(be, roots=roots)
            self.assertEqual(counts(lk), (1, 0, 0, 0))
            self.assertIn("warning: 1 root range could not be read and was not scanned: "
                          "writable data of libgone", lk.leaks(opts()))
            self.assertEqual(leak_json(lk)["roots"]["unreadable"], ["writable data of libgone"])

    def test_filters(self):
        for be in backends():
            w = World()
            for _ in range(3):
                w.block(100, k=1, tid=7)
            w.block(5000, k=2, tid=8)
            kept = w.block(64, k=3, tid=7)
            w.root(kept)
            lk = w.leaks(be)
            j = leak_json(lk, "--json --thread 7")
            self.assertEqual((j["total"]["blocks"], j["definitely_lost"]["blocks"],
                              j["still_reachable"]["blocks"]), (3, 3, 1))
            self.assertEqual(leak_json(lk, "--json --min-size 1000")["total"]["bytes"], 5000)
            self.assertEqual(leak_json(lk, "--json --match f2")["total"]["blocks"], 1)
            text = lk.leaks(opts("--limit 1"))
            self.assertIn("stack 1: 5000 bytes in 1 block (1 definitely lost)", text)
            self.assertIn("... 1 more stack (300 bytes in 3 blocks) not shown", text)


class AllocatorStateTests(unittest.TestCase):
    """The allocator's own state is left out of the roots."""

    LIBC = 0x80000

    CHUNKS = 0x98000

    def arena(self, w, empty_bins=127, top=0, linked=False):
        """Writes a main_arena into libc's data: bins empty except the first few when
        `empty_bins` < 127 (each then holding one free chunk when `linked`, else garbage), and
        `top` pointing where the caller says."""
        base = self.LIBC + 0x200
        bins = base + 112
        w.put(base + 96, top)
        for i in range(127):
            q = bins + 16 * i
            if i >= 127 - empty_bins:
                w.put(q, q - 16)
                w.put(q + 8, q - 16)
            elif linked:
                chunk = self.CHUNKS + 64 * i
                w.put(q, chunk)
                w.put(q + 8, chunk)
                w.put(chunk + 16, q - 16)
                w.put(chunk + 24, q - 16)
            else:
                w.put(q, 0x1234560 + i)
                w.put(q + 8, 0x1234560 + i)
        return base

    def objects(self, *names):
        """Libraries with one writable page each: the last at LIBC, the others below it."""
        out = []
        for k, name in enumerate(names):
            at = self.LIBC - 0x1000 * (len(names) - 1 - k)
            ph = elf.Phdr(elf.PT_LOAD, elf.PF_R | elf.PF_W, 0, at, 0x1000, 0x1000)
            out.append(rootsmod.LoadedObject("/lib/" + name, StubElf([], [ph]), 0, []))
        return out

    def test_main_arena_is_found_and_left_out(self):
        for be in backends():
            w = World()
            w.fh.mem.map(self.LIBC, 0x1000)
            last = w.block(24)
            base = self.arena(w, top=last + 16)  # glibc's top, just past the last chunk
            w.put(self.LIBC + 0x10, 0)
            objs = self.objects("libc.so.6")
            self.assertEqual(rootsmod.main_arena(w.space(), self.LIBC, self.LIBC + 0x1000),
                             (base, base + 112 + 127 * 16 + 16 + 64))
            found = rootsmod.gather_roots(objs, [], w.space())
            self.assertEqual([x.what for x in found.excluded],
                             ["main_arena of libc.so.6 (the allocator's own state)"])
            self.assertEqual([(r.start, r.end) for r in found.roots],
                             [(self.LIBC, base), (base + 112 + 127 * 16 + 80, self.LIBC + 0x1000)])
            lk = w.leaks(be, roots=found.roots, excluded=found.excluded)
            self.assertEqual(class_of(lk, last), D_)
            # Scanned as a root, the same word would keep the block.
            whole = [rootsmod.Root("data", "libc", self.LIBC, self.LIBC + 0x1000, None)]
            self.assertEqual(class_of(w.leaks(be, roots=whole), last), P_)

    def test_a_run_of_empty_bins_places_the_arena(self):
        w = World()
        w.fh.mem.map(self.LIBC, 0x1000)
        w.fh.mem.map(self.CHUNKS, 0x4000)
        end = self.LIBC + 0x200 + 112 + 127 * 16 + 80
        # The first 27 bins hold chunks that link back to them: the whole array is found.
        base = self.arena(w, empty_bins=100, linked=True)
        self.assertEqual(rootsmod.main_arena(w.space(), self.LIBC, self.LIBC + 0x1000),
                         (base, end))
        # Bins that hold what does not look like chunks: the run of empty ones is all there is.
        self.arena(w, empty_bins=100)
        first = base + 112 + 27 * 16
        self.assertEqual(rootsmod.main_arena(w.space(), self.LIBC, self.LIBC + 0x1000),
                         (first - 112, end))
        w.fh.mem.unmap(self.LIBC)
        w.fh.mem.map(self.LIBC, 0x1000)
        self.arena(w, empty_bins=31)
        self.assertIsNone(rootsmod.main_arena(w.space(), self.LIBC, self.LIBC + 0x1000))
        found = rootsmod.gather_roots(self.objects("libc.so.6"), [], w.space())
        self.assertEqual(found.excluded, [])
        self.assertEqual(len(found.notes), 1)
        self.assertIn("main_arena was not found in the data of libc.so.6", found.notes[0])
        lk = w.leaks(backend.PURE, roots=found.roots, notes=found.notes)
        self.assertIn("\nnote: glibc's main_arena was not found", "\n" + lk.leaks(opts()))

    def test_other_backends_leave_out_their_whole_data(self):
        w = World()
        w.fh.mem.map(self.LIBC - 0x1000, 0x2000)
        for name in ("libjemalloc.so.2", "libtcmalloc.so.4", "libmimalloc.so.2"):
            found = rootsmod.gather_roots(self.objects(name, "libc.so.6"), [], w.space())
            self.assertEqual([x.what for x in found.excluded],
                             ["writable data of %s (the allocator's own state)" % name])
            # glibc is not the backend, so its arena not being there is no news.
            self.assertEqual(found.notes, [])
            self.assertEqual([r.where for r in found.roots], ["writable data of libc.so.6"])


class WhyTests(unittest.TestCase):
    def test_chains(self):
        for be in backends():
            w = World()
            a, b, c = (w.block(32, k=i) for i in (1, 2, 3))
            word = w.root(a)
            w.put(a + 16, b)
            w.put(b + 24, c)
            lost = [w.block(16, k=4) for _ in range(3)]
            w.put(lost[0], lost[1])
            w.put(lost[1], lost[2])
            lk = w.leaks(be, symbol_at=lambda addr: "table" if addr == word else None)
            text = lk.why(c + 5, opts())
            lines = text.splitlines()
            self.assertEqual(lines[0], "0x%x is still reachable: start pointers lead to it from "
                             "a root through 3 blocks:" % c)
            self.assertEqual(lines[1], "  root: the word at 0x%x (table), in the writable data "
                             "of prog" % word)
            self.assertIn("  -> 0x%x (32 bytes, thread 100), allocated at:" % a, text)
            self.assertIn("  -> 0x%x (32 bytes, thread 100) at offset 16 of the block above" % b,
                          text)
            self.assertIn("  -> 0x%x (32 bytes, thread 100) at offset 24 of the block above" % c,
                          text)
            self.assertIn("       f3+0x10 (prog.c:4) in prog", text)
            j = json.loads(lk.why(c, opts("--json")))
            self.assertEqual(j["class"], "still_reachable")
            self.assertEqual(j["root"]["addr"], "0x%x" % word)
            self.assertEqual([x["addr"] for x in j["chain"]], ["0x%x" % u for u in (a, b, c)])
            self.assertEqual([x["via_offset"] for x in j["chain"]], [None, 16, 24])

            text = lk.why(lost[0], opts())
            self.assertIn("0x%x is definitely lost: no pointer from a root or from a block in use "
                          "leads to it" % lost[0], text)
            text = lk.why(lost[2], opts())
            self.assertIn("is indirectly lost: only lost blocks point to it; a chain from the "
                          "definitely lost block 0x%x:" % lost[0], text)
            j = json.loads(lk.why(lost[2], opts("--json")))
            self.assertEqual((j["class"], j["chain"][0]["addr"]),
                             ("indirectly_lost", "0x%x" % lost[0]))
            self.assertEqual(lk.why(0x1234, opts()), "0x1234: not inside any live block\n")

    def test_long_chain_shows_its_ends(self):
        for be in backends():
            w = World()
            nodes = [w.block(16) for _ in range(20)]
            for a, b in zip(nodes, nodes[1:]):
                w.put(a + 8, b)
            w.root(nodes[0])
            lk = w.leaks(be)
            text = lk.why(nodes[-1], opts())
            self.assertIn("through 20 blocks", text)
            self.assertEqual(text.count("  -> 0x"), 8)
            self.assertEqual(text.count(", allocated at the same stack"), 7)
            self.assertIn("  ... 12 more blocks on the way ...", text)
            self.assertIn("  -> 0x%x (16 bytes, thread 100) at offset 8" % nodes[-1], text)
            self.assertEqual(len(json.loads(lk.why(nodes[-1], opts("--json")))["chain"]), 20)


class StubElf:
    def __init__(self, syms, phdrs=()):
        self.syms = syms
        self.phdrs = list(phdrs)

    def symbols(self, prefix):
        return [s for s in self.syms if s[0].startswith(prefix.decode())]


class TypesAndWordsTests(unittest.TestCase):
    VT_A, VT_B = 0x400800, 0x400900

    def build(self):
        w = World()
        objs = []
        for i in range(30):
            u = w.block(24, k=1)
            w.put(u, self.VT_A + 16)
            w.put(u + 8, [1, 1, 2][i % 3] | (0xAB << 32))
            objs.append(u)
        b = w.block(16, k=2)
        w.put(b, self.VT_B + 16)
        w.put(b + 8, 0x1122334455667788)
        w.root(b)
        small = w.block(4, k=3)  # too small for a vtable pointer
        w.fh.mem.put32(small, 0x80)
        prog = rootsmod.LoadedObject("/bin/prog", StubElf([("_ZTV1A", self.VT_A, 40),
                                                    ("_ZTVN4shop6BasketE", self.VT_B, 32)]),
                              0, [])
        names = {"_ZTV1A": "vtable for A", "_ZTVN4shop6BasketE": "vtable for shop::Basket"}
        return w, objs, b, dict(objects=[prog], demangle=lambda ms: {m: names[m] for m in ms},
                                symbol_at=lambda a: "vtable for A + 16 in .data.rel.ro of prog"
                                if a == self.VT_A + 16 else None)

    def test_types(self):
        for be in backends():
            w, objs, b, target = self.build()
            lk = w.leaks(be, **target)
            j = json.loads(lk.types(opts("--json")))
            self.assertEqual([(t["type"], t["blocks"], t["bytes"]) for t in j["types"]],
                             [("A", 30, 720), ("shop::Basket", 1, 16)])
            self.assertEqual(j["total"]["of_blocks"], 32)
            j = json.loads(lk.types(opts("--json --leaks")))
            self.assertEqual([(t["type"], t["blocks"]) for t in j["types"]], [("A", 30)])
            text = lk.types(opts("--leaks"))
            self.assertIn("          30            720  A", text)
            self.assertIn("A: 30 blocks, most from (30 blocks, 720 bytes, e.g. 0x%x):" % objs[0],
                          text)
            self.assertIn("total: 30 of 31 lost blocks (720 bytes) are of 1 C++ type", text)

    def test_member_histograms(self):
        for be in backends():
            w, objs, b, target = self.build()
            lk = w.leaks(be, **target)
            j = json.loads(lk.words(opts("--json --vtable A --offset 8")))
            self.assertEqual([(v["value"], v["count"]) for v in j["values"]],
                             [("0xab00000001", 20), ("0xab00000002", 10)])
            j = json.loads(lk.words(opts("--json --vtable A --offset 8 --type u32")))
            self.assertEqual([(v["value"], v["count"]) for v in j["values"]],
                             [("0x1", 20), ("0x2", 10)])
            j = json.loads(lk.words(opts("--json --vtable A --offset 12 --type u8")))
            self.assertEqual([(v["value"], v["count"]) for v in j["values"]], [("0xab", 30)])
            j = json.loads(lk.words(opts("--json --vtable _ZTVN4shop6BasketE --offset 8 "
                                         "--type u16")))
            self.assertEqual([(v["value"], v["count"]) for v in j["values"]], [("0x7788", 1)])
            # A field past the end of a block is skipped, not read from the next one.
            j = json.loads(lk.words(opts("--json --vtable A --offset 20 --type u64")))
            self.assertEqual(j["values"], [])
            text = lk.words(opts("--vtable A --offset 8 --type u32"))
            self.assertIn("histogram of the u32 at offset 8 of live blocks of type A (30 of 30 "
                          "big enough): 30 values, 2 distinct", text)
            self.assertIn("          20  0x00000001  (1)", text)
            with self.assertRaisesRegex(errors.UsageError, "no live block has the vtable of 'Z'"):
                lk.words(opts("--vtable Z --offset 0"))
            with self.assertRaisesRegex(errors.UsageError, "--type goes with --offset"):
                lk.words(opts("--type u8"))

    def test_word_histogram(self):
        for be in backends():
            w, objs, b, target = self.build()
            lk = w.leaks(be, **target)
            j = json.loads(lk.words(opts("--json --leaks --limit 0")))
            got = {v["value"]: (v["count"], v["symbol"]) for v in j["values"]}
            self.assertEqual(got["0x%x" % (self.VT_A + 16)],
                             (30, "vtable for A + 16 in .data.rel.ro of prog"))
            self.assertEqual(got["0xab00000001"], (20, None))
            self.assertEqual(j["words"], 30 * 3)
            self.assertEqual(j["distinct"], 4)  # the vtable, two states, and zero
            text = lk.words(opts("--leaks --limit 2"))
            lines = text.splitlines()
            self.assertEqual(lines[0], "histogram of the 8-byte words of lost blocks "
                             "(31 blocks): 90 values, 4 distinct")
            # Ties go by value: the zero words first.
            self.assertEqual(lines[2:4], ["          30  0x0000000000000000  (0)",
                                          "          30  0x%016x  vtable for A + 16 in "
                                          ".data.rel.ro of prog" % (self.VT_A + 16)])
            self.assertEqual(lines[-1], "... 2 more distinct values; --limit 0 shows all")
            j = json.loads(lk.words(opts("--json --limit 0")))
            self.assertEqual(j["words"], 30 * 3 + 2)  # every live block; the 4-byte one has none


class HistogramTests(unittest.TestCase):
    def test_top_values_and_ties(self):
        rnd = random.Random(3)
        values = [rnd.choice([5, 7, 9, 11, 13, 1 << 63]) for _ in range(200)] + [2, 2, 3]
        want = sorted(((values.count(v), v) for v in set(values)), key=lambda t: (-t[0], t[1]))
        impls = [list]
        if backend.HAVE_NUMPY:
            impls.append(lambda v: backend.np.array(v, dtype=backend.np.uint64))
        for make in impls:
            for limit in (0, 1, 3, 6, 7, 50):
                vals, counts, n, distinct = cxxtypes.histogram(make(values), limit)
                top = want if limit == 0 else want[:limit]
                self.assertEqual(list(zip(counts, vals)), top, (make, limit))
                self.assertEqual((n, distinct), (203, len(want)))
            # Equal counts: the lower values are kept.
            vals, counts, _, _ = cxxtypes.histogram(make([4, 3, 2, 1, 1, 2, 3, 4]), 2)
            self.assertEqual((vals, counts), ([1, 2], [2, 2]))
            self.assertEqual(cxxtypes.histogram(make([]), 5), ([], [], 0, 0))


class ArgumentTests(unittest.TestCase):
    def test_parse(self):
        o = opts("--leaks --vtable 'ns::T<int, 2>' --offset=0x10 --type u16 --limit 3 --json")
        self.assertEqual((o.leaks, o.vtable, o.offset, o.type, o.limit, o.json),
                         (True, "ns::T<int, 2>", 16, "u16", 3, True))
        for bad, why in (("--type u128 --offset 0", "--type is one of"),
                         ("--offset", "needs a value"), ("--offset -1", ">= 0"),
                         ("--leaks=1", "takes no value"), ("--bogus", "unknown option")):
            with self.assertRaisesRegex(errors.UsageError, why, msg=bad):
                opts(bad)
        with self.assertRaisesRegex(errors.UsageError, "unknown option --vtable"):
            output.parse_args(["--vtable", "A"], ("--json", "--leaks"), 0, "x")


# --------------------------------------------------------------------------------------------
# ELF and core files, written by hand


def elf_file(e_type, segments=(), notes=(), symbols=()):
    """A little-endian ELF64 image: `segments` are (type, flags, vaddr, memsz, data or filesz);
    `notes` (name, type, desc) go into one PT_NOTE; `symbols` (name, value, size) into .symtab.
    Segments given as a size lie at file offset = vaddr, as in a linked library (the first one
    holds the headers); those given as data are appended, as in a core."""
    nph = len(segments) + (1 if notes else 0)
    blob = bytearray(64 + 56 * nph)
    note = b""
    for name, kind, desc in notes:
        nb = name.encode() + b"\0"
        note += struct.pack("<III", len(nb), len(desc), kind)
        note += nb + b"\0" * (-len(nb) % 4) + desc + b"\0" * (-len(desc) % 4)
    phdrs = []
    if notes:
        phdrs.append((4, 4, len(blob), 0, len(note), 0))
        blob += note
    for kind, flags, vaddr, memsz, data in segments:
        blob += b"\0" * (-len(blob) % 4096)
        if isinstance(data, int) and e_type != 4:
            phdrs.append((kind, flags, vaddr, vaddr, data, memsz))
            blob += b"\0" * max(0, vaddr + data - len(blob))
        elif isinstance(data, int):
            phdrs.append((kind, flags, len(blob), vaddr, data, memsz))
            blob += b"\0" * data
        else:
            phdrs.append((kind, flags, len(blob), vaddr, len(data), memsz))
            blob += data
    shdrs = [(0,) * 10]
    if symbols:
        strtab = b"\0"
        symtab = b"\0" * 24
        for name, value, size in symbols:
            symtab += struct.pack("<IBBHQQ", len(strtab), 0x11, 0, 5, value, size)
            strtab += name.encode() + b"\0"
        shdrs.append((0, 3, 0, 0, len(blob), len(strtab), 0, 0, 1, 0))
        blob += strtab
        blob += b"\0" * (-len(blob) % 8)
        shdrs.append((0, 2, 0, 0, len(blob), len(symtab), 1, 0, 8, 24))
        blob += symtab
    blob += b"\0" * (-len(blob) % 8)
    shoff = len(blob)
    for sh in shdrs:
        blob += struct.pack("<IIQQQQIIQQ", *sh)
    struct.pack_into("<4sBBBB8xHHIQQQIHHHHHH", blob, 0, b"\x7fELF", 2, 1, 1, 0, e_type, 62, 1,
                     0, 64, shoff, 0, 64, 56, nph, 64, len(shdrs), 0)
    for i, (kind, flags, off, vaddr, filesz, memsz) in enumerate(phdrs):
        struct.pack_into("<IIQQQQQQ", blob, 64 + 56 * i, kind, flags, off, vaddr, vaddr, filesz,
                         memsz, 4096)
    return bytes(blob)


class ElfTests(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.dir.cleanup()

    def write(self, name, data):
        path = os.path.join(self.dir.name, name)
        with open(path, "wb") as f:
            f.write(data)
        return path

    def library(self, name):
        # R, R+X, R+W (with .bss past the file), and a vtable symbol.
        return self.write(name, elf_file(3, [(1, 4, 0x0, 0x1000, 0x1000), (1, 5, 0x1000, 0x1000,
                                                                          0x1000),
                                             (1, 6, 0x2000, 0x3000, 0x1000)],
                                         symbols=[("_ZTV1A", 0x2100, 40), ("main", 0x1010, 8)]))

    def test_core_file(self):
        lib = self.library("libx.so")
        base = 0x7F0000000000
        prstatus = bytearray(336)
        struct.pack_into("<I", prstatus, elf.PRSTATUS_PID, 4242)
        regs = dict.fromkeys(elf.PRSTATUS_REGS, 0)
        regs.update(rsp=0x7FFF0100, fs_base=0x7FFF8000, rbx=0x1234)
        struct.pack_into("<27Q", prstatus, elf.PRSTATUS_REG_OFF,
                         *[regs[r] for r in elf.PRSTATUS_REGS])
        names = [lib, lib, lib, lib]
        # A symbolizer's read-only mapping of the whole library, then the library as loaded.
        files = [(0x6F0000000000, 0x6F0000003000, 0), (base, base + 0x1000, 0),
                 (base + 0x1000, base + 0x2000, 1), (base + 0x2000, base + 0x3000, 2)]
        nt_file = struct.pack("<QQ", len(files), 4096)
        nt_file += b"".join(struct.pack("<QQQ", *f) for f in files)
        nt_file += b"".join(n.encode() + b"\0" for n in names)
        data = bytearray(0x1000)
        struct.pack_into("<Q", data, 0x10, 0xDEADBEEF)
        path = self.write("core", elf_file(4, [
            (1, 4, base, 0x1000, 0),                      # text and rodata: not dumped
            (1, 5, base + 0x1000, 0x1000, 0),
            (1, 6, base + 0x2000, 0x1000, bytes(data)),   # .data
            (1, 6, base + 0x3000, 0x2000, 0),             # .bss never written: not dumped
            (1, 4, 0x6F0000000000, 0x3000, 0),
        ], notes=[("CORE", elf.NT_PRSTATUS, bytes(prstatus)), ("CORE", elf.NT_FILE, nt_file)]))
        cf = elf.CoreFile.open(path)
        self.assertEqual(cf.threads[0].tid, 4242)
        self.assertEqual(cf.threads[0].regs["rsp"], 0x7FFF0100)
        self.assertEqual(cf.threads[0].regs["rbx"], 0x1234)
        self.assertEqual(len(cf.mappings), 4)
        space = memory.CoreSpace(cf)
        self.assertEqual(bytes(space.buffer(base + 0x2010, base + 0x2018)),
                         struct.pack("<Q", 0xDEADBEEF))
        with self.assertRaises(errors.ReadError):
            space.buffer(base + 0x2ff8, base + 0x3008)
        self.assertEqual(space.parts(base + 0x2800, base + 0x4000),
                         ([(base + 0x2800, base + 0x3000)], 0))
        self.assertEqual(space.parts(base + 0x4800, base + 0x5800)[1], 0x800)
        self.assertEqual(space.prot(base + 0x1800), elf.PF_R | elf.PF_X)

        objs = rootsmod.loaded_objects(cf.mappings, space=space)
        self.assertEqual([(o.name, o.bias) for o in objs], [("libx.so", base)])
        self.assertEqual(objs[0].writable(), [(base + 0x2000, base + 0x5000)])
        # Only permissions tell the whole-file mapping from the loaded library.
        whole = [(0x6F0000000000, 0x6F0000003000, 0)]
        self.assertEqual(objs[0].elf.bias(whole), 0x6F0000000000)
        self.assertIsNone(objs[0].elf.bias(whole, space.prot))
        found = rootsmod.gather_roots(objs, cf.threads, space, exclude=base + 0x1500)
        self.assertEqual([x.what for x in found.excluded],
                         ["writable data of libx.so (its own lists)"])
        self.assertFalse([r for r in found.roots if r.kind == "data"])
        found = rootsmod.gather_roots(objs, cf.threads, space)
        self.assertEqual([(r.start, r.end) for r in found.roots if r.kind == "data"],
                         [(base + 0x2000, base + 0x5000)])
        self.assertEqual([(r.start, r.end) for r in found.roots if r.kind == "stack"], [])

        self.assertEqual(rootsmod.unmatched_objects(cf.mappings, objs, space), [])
        self.assertEqual(rootsmod.unmatched_objects(cf.mappings, [], space), [lib])
        self.assertEqual(rootsmod.unmatched_objects(cf.mappings, [], space, exclude=base + 0x10),
                         [])

        vt = cxxtypes.Vtables(objs, demangle=lambda ms: {m: "vtable for A" for m in ms})
        self.assertEqual(vt.lookup([base + 0x2110, base + 0x2128, base + 0x2090], False),
                         [0, -1, -1])
        self.assertEqual(vt.names([0]), {0: "A"})

    def test_not_elf_and_debug_files(self):
        with self.assertRaises(errors.ElfError):
            elf.Elf.open(self.write("text", b"hello" * 100))
        # A separate debug file: segments without contents.
        dbg = self.write("x.debug", elf_file(3, [(1, 4, 0, 0x1000, 0x200), (1, 5, 0x1000, 0x1000,
                                                                             0)]))
        self.assertIsNone(elf.Elf.open(dbg).bias([(0x10000, 0x12000, 0)]))
        self.assertEqual(rootsmod.loaded_objects([elf.Mapping(0x10000, 0x12000, 0, dbg),
                                           elf.Mapping(0x20000, 0x21000, 0, "/nonexistent/x")]),
                         [])

    def test_maps(self):
        maps, pieces, mapped = memory.parse_maps(
            "55d0-55d1 r--p 00000000 08:01 12 /bin/prog\n"
            "55d1-55d2 r-xp 00001000 08:01 12 /bin/prog\n"
            "7ff0-7ff1 ---p 00000000 00:00 0\n"
            "7ff1-7ff2 rw-p 00000000 00:00 0 [heap]\n"
            "7ffe-7fff r--p 00000000 00:00 0 [vvar]\n")
        self.assertEqual([(m.start, m.path) for m in maps], [(0x55d0, "/bin/prog"),
                                                              (0x55d1, "/bin/prog")])
        self.assertEqual(pieces, [(0x55d0, 0x55d1), (0x55d1, 0x55d2), (0x7ff1, 0x7ff2)])
        self.assertEqual([m[2] for m in mapped], [4, 5, 0, 6, 4])


if __name__ == "__main__":
    unittest.main()
