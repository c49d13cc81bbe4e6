"""Unit tests of leak finding (gdb/dmemlib: elf, memory, roots, reach, cxxtypes, leakcmds) on
synthetic memory and hand-made ELF files: plain Python, no gdb.

The heap comes from fakeheap.FakeHeap; a data segment next to it plays the roots.  Every answer
is checked on both backends, and the classification against a direct transcription of the
exit report's algorithm (src/reach.rs) on random heaps.
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


def opts(text="", allowed=("--json", "--leaks", "--vtable", "--offset", "--type") + output.FILTERS):
    return output.parse_args(shlex.split(text), allowed, 0, "test")


def leak_json(lk, text="--json --limit 0"):
    return json.loads(lk.leaks(opts(text)))


def reference(starts, sizes, roots_words, word_at):
    """The exit report's classification (src/reach.rs), transcribed literally."""
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
    st = [0] * n
    work = []
    for w in roots_words:
        i = find(w)
        if i is not None and st[i] == 0:
            st[i] = 1
            work.append(i)
    while work:
        for w in scan(work.pop()):
            j = find(w)
            if j is not None and st[j] == 0:
                st[j] = 1
                work.append(j)
    for lead in range(n):
        if st[lead]:
            continue
        st[lead] = 2
        work.append(lead)
        while work:
            for w in scan(work.pop()):
                j = find(w)
                if j is None or j == lead:
                    continue
                if st[j] == 0:
                    st[j] = 3
                    work.append(j)
                elif st[j] == 2:
                    st[j] = 3
    return st


def random_world(seed):
    rnd = random.Random(seed)
    w = World()
    n = rnd.choice([1, 3, 40, 250])
    users = [w.block(rnd.choice([0, 8, 12, 16, 24, 40, 64]), k=rnd.randrange(4),
                     gap=rnd.choice([0, 16, 48])) for _ in range(n)]
    sizes = {u: w.fh.field(w.fh.header(u), "size") & ((1 << 48) - 1) for u in users}

    def somewhere(u):
        return u + rnd.randrange(max(sizes[u], 1))

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
            singles = [w.block(24, k=3) for _ in range(5)]
            for chain in (held, orphan):
                for a, b in zip(chain, chain[1:]):
                    w.put(a, b)
            w.root(held[0])
            lk = w.leaks(be)
            self.assertEqual(lk.reach().counts(), (10, 6, 9), be)
            j = leak_json(lk)
            self.assertEqual((j["total"]["blocks"], j["total"]["direct"], j["total"]["indirect"]),
                             (15, 6, 9))
            self.assertEqual(j["reachable"], {"blocks": 10, "bytes": 160})
            by_frame = {s["stack"][0]["function"]: s for s in j["stacks"]}
            self.assertEqual((by_frame["f2"]["direct"], by_frame["f2"]["indirect"]), (1, 9))
            self.assertEqual(by_frame["f2"]["example"], "0x%x" % orphan[0])
            self.assertEqual((by_frame["f3"]["direct"], by_frame["f3"]["indirect"]), (5, 0))
            self.assertNotIn("f1", by_frame)
            text = lk.leaks(opts())
            self.assertIn("leak 1: 160 bytes in 10 blocks (1 direct, 9 indirect), e.g. 0x%x, "
                          "allocated at:" % orphan[0], text)
            self.assertIn("    f2+0x10 (prog.c:3) in prog", text)
            self.assertTrue(text.endswith("total: 280 bytes leaked in 15 blocks (6 direct, "
                                          "9 indirect) from 2 stacks; 10 blocks (160 bytes) "
                                          "still reachable\n"), text)

    def test_agrees_with_the_exit_report_algorithm(self):
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
                self.assertEqual(lk.reach().counts(), (0, 1, 2999), (be, backwards))
                head = nodes[-1] if backwards else nodes[0]
                self.assertEqual(lk.reach().state[int(lk.rank[lk.heap.index().find(head)[0]])],
                                 reach.DIRECT)
                # Held from the far end instead, the whole chain is reachable.
                w.root(head)
                self.assertEqual(w.leaks(be).reach().counts(), (3000, 0, 0))
            w = World()
            ring = [w.block(32, k=1) for _ in range(5)]
            for a, b in zip(ring, ring[1:] + ring[:1]):
                w.put(a + 8, b)
            tail = w.block(8, k=2)
            w.put(ring[3] + 16, tail)
            self.assertEqual(w.leaks(be).reach().counts(), (0, 1, 5))

    def test_what_counts_as_a_pointer(self):
        for be in backends():
            w = World()
            a = w.block(100)
            b = w.block(12)    # its word at +8 is not whole inside it
            c = w.block(0)     # owns its start address
            d = w.block(40)
            e = w.block(40)
            f = w.block(40)
            w.root(a + 99)     # interior, last byte
            w.put(a, b)
            w.put(b + 8, d)    # past b's end: not scanned
            w.put(b, c)
            w.root(e + 40)     # one past the end: not e
            w.root(f - 8)      # f's header: not f
            w.fh.mem.put32(w.DATA + 0x100 + 4, (d >> 32) & 0xFFFFFFFF)  # misaligned: no
            w.fh.mem.put32(w.DATA + 0x100, d & 0xFFFFFFFF)
            w.put(w.DATA + 0x104 - 4, 0)
            lk = w.leaks(be)
            st = {u: lk.reach().state[int(lk.rank[lk.heap.index().find(u)[0]])]
                  for u in (a, b, c, d, e, f)}
            self.assertEqual(st, {a: reach.REACHED, b: reach.REACHED, c: reach.REACHED,
                                  d: reach.DIRECT,
                                  e: reach.DIRECT, f: reach.DIRECT}, be)

    def test_registers_stacks_and_tls(self):
        for be in backends():
            w = World()
            stack = 0x60000
            w.fh.mem.map(stack, 0x2000)
            tls = 0x70000
            w.fh.mem.map(tls, 0x3000)
            by_reg, below_sp, above_sp, in_tls, in_tcb, far = (w.block(16) for _ in range(6))
            sp = stack + 0x1000
            w.put(sp - 8, below_sp)
            w.put(sp + 0x800, above_sp)
            fs = tls + 0x2000
            w.put(fs - 0x100, in_tls)
            w.put(fs + 0x10, in_tcb)
            w.put(tls, far)  # far below the static TLS window
            th = elf.Thread(42, {"rsp": sp, "rbx": by_reg + 3, "fs_base": fs, "rip": 0x400000})
            roots, skipped = rootsmod.gather_roots([], [th], w.space())
            self.assertEqual(skipped, [])
            kinds = {r.where for r in roots}
            self.assertIn("stack of thread 42", kinds)
            self.assertIn("register rbx of thread 42", kinds)
            self.assertIn("TLS of thread 42", kinds)
            stack_root = [r for r in roots if r.kind == "stack"][0]
            self.assertEqual((stack_root.start, stack_root.end), (sp, stack + 0x2000))
            lk = w.leaks(be, roots=roots)
            st = [lk.reach().state[int(lk.rank[lk.heap.index().find(u)[0]])]
                  for u in (by_reg, below_sp, above_sp, in_tls, in_tcb, far)]
            self.assertEqual(st, [reach.REACHED, reach.DIRECT, reach.REACHED, reach.REACHED,
                                  reach.REACHED,
                                  reach.DIRECT])
            text = lk.why(by_reg, opts())
            self.assertIn("root: register rbx of thread 42 = 0x%x" % (by_reg + 3), text)

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
            self.assertEqual(lk.reach().counts(), (1, 0, 0))
            self.assertNotIn("warning", lk.leaks(opts()))
            roots.append(rootsmod.Root("data", "writable data of libgone", 0xA0000, 0xA1000, None))
            lk = w.leaks(be, roots=roots)
            self.assertEqual(lk.reach().counts(), (1, 0, 0))
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
            self.assertEqual(leak_json(lk, "--json --thread 7")["total"]["blocks"], 3)
            self.assertEqual(leak_json(lk, "--json --min-size 1000")["total"]["bytes"], 5000)
            self.assertEqual(leak_json(lk, "--json --match f2")["total"]["blocks"], 1)
            text = lk.leaks(opts("--limit 1"))
            self.assertIn("leak 1: 5000 bytes in 1 block (1 direct, 0 indirect)", text)
            self.assertIn("... 1 more stack (300 bytes in 3 blocks) not shown", text)


class WhyTests(unittest.TestCase):
    def test_chains(self):
        for be in backends():
            w = World()
            a, b, c = (w.block(32, k=i) for i in (1, 2, 3))
            word = w.root(a)
            w.put(a + 16, b + 4)
            w.put(b + 24, c)
            lost = [w.block(16, k=4) for _ in range(3)]
            w.put(lost[0], lost[1])
            w.put(lost[1], lost[2])
            lk = w.leaks(be, symbol_at=lambda addr: "table" if addr == word else None)
            text = lk.why(c + 5, opts())
            lines = text.splitlines()
            self.assertEqual(lines[0], "0x%x is in use: reachable from a root through 3 blocks:"
                             % c)
            self.assertEqual(lines[1], "  root: the word at 0x%x (table), in the writable data "
                             "of prog" % word)
            self.assertIn("  -> 0x%x (32 bytes, thread 100), allocated at:" % a, text)
            self.assertIn("  -> 0x%x (32 bytes, thread 100) at offset 16 of the block above" % b,
                          text)
            self.assertIn("  -> 0x%x (32 bytes, thread 100) at offset 24 of the block above" % c,
                          text)
            self.assertIn("       f3+0x10 (prog.c:4) in prog", text)
            j = json.loads(lk.why(c, opts("--json")))
            self.assertEqual(j["class"], "reachable")
            self.assertEqual(j["root"]["addr"], "0x%x" % word)
            self.assertEqual([x["addr"] for x in j["chain"]], ["0x%x" % u for u in (a, b, c)])
            self.assertEqual([x["via_offset"] for x in j["chain"]], [None, 16, 24])

            self.assertIn("is unreachable: a direct leak", lk.why(lost[0], opts()))
            text = lk.why(lost[2], opts())
            self.assertIn("an indirect leak, held only by leaked blocks; a chain from the "
                          "direct leak 0x%x:" % lost[0], text)
            self.assertEqual(json.loads(lk.why(lost[2], opts("--json")))["chain"][0]["addr"],
                             "0x%x" % lost[0])
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
    def __init__(self, syms):
        self.syms = syms

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
            self.assertIn("total: 30 of 31 leaked blocks (720 bytes) are of 1 C++ type", text)

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
            self.assertEqual(lines[0], "histogram of the 8-byte words of leaked blocks "
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
        roots, skipped = rootsmod.gather_roots(objs, cf.threads, space, exclude=base + 0x1500)
        self.assertEqual([o.name for o in skipped], ["libx.so"])
        self.assertFalse([r for r in roots if r.kind == "data"])
        roots, skipped = rootsmod.gather_roots(objs, cf.threads, space)
        self.assertEqual([(r.start, r.end) for r in roots if r.kind == "data"],
                         [(base + 0x2000, base + 0x5000)])

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
