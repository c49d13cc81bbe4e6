"""Unit tests of the list walk, the block back ends, the memory sources and the answers of the
listing commands (gdb/dmemlib) on synthetic memory: plain Python, no gdb."""

import json
import os
import random
import shlex
import struct
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from fakeheap import MAGIC_FREED, SHUFFLED, FakeHeap, backends, fake_resolve, pc  # noqa: E402

from dmemlib import (backend, blocks, elf, errors, heapcmds, layout, memory, output,  # noqa: E402
                     symbols)


def analysis(fh, backend=None, **memargs):
    return heapcmds.Analysis(fh.heap(backend, **memargs), symbols.Symbols(fake_resolve))


def opts(text="", allowed=("--json", "--headers") + output.FILTERS, positional=1):
    return output.parse_args(shlex.split(text), allowed, positional)


def problems_text(rep):
    return "\n".join(str(p) for p in rep.problems)


class LayoutTests(unittest.TestCase):
    def test_reads_descriptor_and_lists(self):
        fh = FakeHeap()
        fh.alloc(10, [pc(1)])
        h = fh.heap()
        self.assertEqual(h.layout.header_size, 112)
        self.assertEqual(h.layout.nlists, 8)
        self.assertEqual(len(h.lists), 8)
        self.assertEqual(h.lists[0].live_blocks, 1)
        self.assertTrue(h.recording)

    def test_bad_magic(self):
        fh = FakeHeap()
        fh.words["magic"] = 0x1234
        fh.write_descriptor()
        with self.assertRaises(errors.LayoutError) as cm:
            fh.heap()
        self.assertIn("magic", str(cm.exception))
        self.assertNotIn("\n", str(cm.exception))

    def test_bad_version(self):
        fh = FakeHeap()
        fh.words["version"] = 3
        fh.write_descriptor()
        with self.assertRaisesRegex(errors.LayoutError, "version 3"):
            fh.heap()

    def test_unreadable_descriptor(self):
        fh = FakeHeap()
        fh.mem.unmap(FakeHeap.LAYOUT)
        with self.assertRaisesRegex(errors.LayoutError, "cannot read"):
            fh.heap()

    def test_inconsistent_descriptor(self):
        for field, value, why in [("header_size", 100000, "header size"),
                                  ("off_magic", 110, "overruns"),
                                  ("off_tid", 100, "overlap"),
                                  ("nlists", 0, "lists"),
                                  ("list_off_frees", 124, "stride")]:
            fh = FakeHeap()
            fh.words[field] = value
            fh.write_descriptor()
            with self.assertRaisesRegex(errors.LayoutError, why, msg=field):
                fh.heap()

    def test_unreadable_list_heads(self):
        fh = FakeHeap()
        fh.mem.unmap(FakeHeap.LISTS)
        with self.assertRaisesRegex(errors.LayoutError, "list heads"):
            fh.heap()

    def test_find_layouts_by_magic(self):
        fh = FakeHeap()
        fh.alloc(10, [pc(1)])
        mem = memory.Memory(fh.mem.read)
        # Unmapped gaps and the heap around the descriptor's page are skipped or searched alike.
        ranges = [(0x1000, 0x3000), (FakeHeap.LAYOUT - 0x2000, FakeHeap.LAYOUT + 0x1000),
                  (FakeHeap.HEAP, FakeHeap.HEAP + 0x4000)]
        self.assertEqual(layout.find_layouts(mem, ranges), [FakeHeap.LAYOUT])
        # A copy of the magic that is not a descriptor is not taken for one.
        fh.mem.put64(FakeHeap.HEAP + 0x1008, layout.LAYOUT_MAGIC)
        self.assertEqual(layout.find_layouts(mem, ranges), [FakeHeap.LAYOUT])
        fh.words["version"] = 9
        fh.write_descriptor()
        self.assertEqual(layout.find_layouts(memory.Memory(fh.mem.read), ranges), [])

    def test_unrelocated_descriptor_is_refused(self):
        # The library file's copy of the descriptor, as the text mapping's last page can show
        # it: every field but the pointers, which the loader has not filled in there.
        fh = FakeHeap()
        fh.words["lists"] = 0
        fh.words["flags"] = 0
        fh.write_descriptor()
        with self.assertRaisesRegex(errors.LayoutError, "unrelocated"):
            fh.heap()
        ranges = [(FakeHeap.LAYOUT - 0x1000, FakeHeap.LAYOUT + 0x1000)]
        self.assertEqual(layout.find_layouts(memory.Memory(fh.mem.read), ranges), [])

    def test_not_recording(self):
        fh = FakeHeap(recording=False)
        a = analysis(fh)
        self.assertFalse(a.heap.recording)
        self.assertIn("not recording", a.summary(opts()))


class DecodeTests(unittest.TestCase):
    def check_decoding(self, layout):
        for be in backends():
            fh = FakeHeap(layout=layout)
            nf = fh.fmt["nframes"]
            u1 = fh.alloc(100, [pc(1), pc(2), pc(3)], tid=11, li=0)
            u2 = fh.alloc(0, [pc(4)] * 20, tid=12, li=3, align_log2=6)
            u3 = fh.alloc(5000, [], tid=13, li=7)
            b = fh.heap(be).blocks()
            self.assertEqual(b.n, 3)
            got = {b.block(i).user: b.block(i) for i in range(b.n)}
            self.assertEqual(set(got), {u1, u2, u3})
            self.assertEqual(got[u1].size, 100)
            self.assertEqual(got[u1].tid, 11)
            self.assertEqual(got[u1].frames, (pc(1), pc(2), pc(3)))
            self.assertEqual(got[u1].list, 0)
            self.assertEqual(got[u2].size, 0)
            self.assertEqual(got[u2].align_log2, 6)
            self.assertEqual(got[u2].list, 3)
            self.assertEqual(got[u2].frames, (pc(4),) * nf)
            self.assertEqual(got[u3].frames, ())
            self.assertEqual(got[u3].walked_list, 7)
            self.assertEqual(got[u1].header, fh.header(u1))

    def test_standard_layout(self):
        self.check_decoding(None)

    def test_offsets_come_from_the_descriptor(self):
        self.check_decoding(SHUFFLED)

    def test_freed_blocks_are_not_listed(self):
        for be in backends():
            fh = FakeHeap()
            p512 = fh.alloc(512, [pc(1)])
            fh.free(p512)
            p2048 = fh.alloc(2048, [pc(2)])
            b = fh.heap(be).blocks()
            self.assertEqual([b.block(i).user for i in range(b.n)], [p2048])
            self.assertEqual(fh.field(fh.header(p512), "magic"), MAGIC_FREED)

    def test_unused_frame_slots_after_a_zero_are_ignored(self):
        for be in backends():
            fh = FakeHeap()
            fh.alloc(8, [pc(1), pc(2)])
            u = fh.alloc(8, [pc(1), pc(2)])
            # Garbage after the terminating zero must not split the stack into two.
            fh.mem.put64(fh.header(u) + fh.fmt["off_frames"] + 8 * 5, 0xDEAD)
            groups, _ = fh.heap(be).blocks().groups(fh.heap(be).blocks().everything())
            self.assertEqual(len(groups), 1)
            self.assertEqual(groups[0].frames, (pc(1), pc(2)))

    def test_few_reads_for_many_headers(self):
        fh = FakeHeap()
        for i in range(2000):
            fh.alloc(100 + i % 7, [pc(i % 5)], li=i % 8)
        h = fh.heap()
        before = fh.mem.calls
        self.assertEqual(h.blocks().n, 2000)
        # 2000 headers over about 0.5 MB of heap: a handful of chunk reads, not one per header.
        self.assertLess(fh.mem.calls - before, 20)


class MemoryTests(unittest.TestCase):
    def test_narrowing_at_the_end_of_a_mapping(self):
        m = FakeHeap().mem
        base = 0x900000
        buf = m.map(base, 0x3000)  # three pages, so the 1 MiB chunk around them fails
        buf[0x2FF8:0x3000] = b"ABCDEFGH"
        mem = memory.Memory(m.read)
        self.assertEqual(mem.read(base + 0x2FF8, 8), b"ABCDEFGH")
        self.assertEqual(mem.read(base + 0x2FF0, 8), bytes(8))
        self.assertFalse(mem.readable(base + 0x3000))
        self.assertFalse(mem.readable(base + 0x2FFC, 8))
        with self.assertRaises(errors.ReadError):
            mem.read(base - 8, 8)

    def test_read_across_chunks(self):
        m = FakeHeap().mem
        base = 0x10000000
        m.map(base, 3 << 20)
        m.write(base + (1 << 20) - 4, b"12345678")
        mem = memory.Memory(m.read)
        self.assertEqual(mem.read(base + (1 << 20) - 4, 8), b"12345678")
        self.assertEqual(len(mem.read(base, 2 << 20)), 2 << 20)

    def test_budget_evicts(self):
        m = FakeHeap().mem
        base = 0x10000000
        m.map(base, 8 << 20)
        mem = memory.Memory(m.read, chunk=1 << 20, budget=2 << 20)
        for k in range(8):
            mem.read(base + (k << 20), 8)
        self.assertLessEqual(len(mem._chunks), 2)
        n = mem.reads
        mem.read(base + (7 << 20) + 100, 8)
        self.assertEqual(mem.reads, n)  # still cached
        mem.read(base, 8)
        self.assertEqual(mem.reads, n + 1)  # evicted, read again

    def test_short_read_is_an_error(self):
        mem = memory.Memory(lambda addr, n: b"x")
        with self.assertRaises(errors.ReadError):
            mem.read(0x1000, 8)

    def test_header_straddling_a_chunk_boundary(self):
        for be in backends():
            fh = FakeHeap()
            at = FakeHeap.HEAP + (1 << 20) - 48
            u = fh.alloc(64, [pc(1)], at=at)
            b = fh.heap(be).blocks()
            self.assertEqual(b.block(0).user, u)
            self.assertEqual(b.block(0).frames, (pc(1),))


class CoreFileTests(unittest.TestCase):
    @staticmethod
    def elf_core(segments, e_type=4):
        """A minimal ELF64 core: header, program headers, then each segment's bytes."""
        phoff = 64
        data_at = phoff + 56 * len(segments)
        head = bytearray(64)
        head[:6] = b"\x7fELF\x02\x01"
        struct.pack_into("<HHI", head, 16, e_type, 62, 1)
        struct.pack_into("<Q", head, 32, phoff)
        struct.pack_into("<HHHH", head, 52, 64, 56, len(segments), 64)
        phdrs = bytearray()
        body = bytearray()
        for p_type, vaddr, content, memsz in segments:
            phdrs += struct.pack("<IIQQQQQQ", p_type, 6, data_at + len(body), vaddr, 0,
                                 len(content), memsz, 0x1000)
            body += content
        return bytes(head + phdrs + body)

    def test_reads_segments(self):
        a = bytes(range(256)) * 16
        b = b"\xaa" * 0x1000
        data = self.elf_core([(1, 0x10000, a, 0x1000), (4, 0x20000, b"note", 0),
                              (1, 0x11000, b, 0x1000), (1, 0x30000, b"", 0x2000)])
        cf = elf.CoreFile(data)
        self.assertEqual(bytes(cf.read(0x10010, 4)), bytes([16, 17, 18, 19]))
        self.assertEqual(bytes(cf.read(0x11ff8, 8)), b"\xaa" * 8)
        self.assertIsNone(cf.read(0x10ffc, 8))  # spans two segments: left to gdb
        self.assertIsNone(cf.read(0x20000, 4))  # not a PT_LOAD
        self.assertIsNone(cf.read(0x30000, 8))  # in memory but not in the file
        self.assertIsNone(cf.read(0xF000, 8))
        mem = memory.Memory(lambda addr, n: cf.read(addr, n) or b"")
        self.assertEqual(mem.read(0x10100, 2), bytes([0, 1]))

    def test_rejects_other_files(self):
        with self.assertRaises(errors.ElfError):
            elf.CoreFile(b"not an elf file at all" * 4)
        with self.assertRaises(errors.ElfError):
            elf.CoreFile(self.elf_core([(1, 0x1000, b"x" * 8, 8)], e_type=3))


class GroupingAndFilterTests(unittest.TestCase):
    def build(self):
        fh = FakeHeap()
        # Stack A: 3 x 100 bytes by thread 1; stack B: 1 x 1000 by thread 2;
        # stack C: 2 x 10 by threads 1 and 2.
        for _ in range(3):
            fh.alloc(100, [pc(1), pc(2), 0x7000010], tid=1, li=1)
        fh.alloc(1000, [pc(3), pc(2)], tid=2, li=2)
        fh.alloc(10, [pc(4)], tid=1, li=1)
        fh.alloc(10, [pc(4)], tid=2, li=2)
        return fh

    def test_summary_groups_by_stack_sorted_by_bytes(self):
        for be in backends():
            b = self.build().heap(be).blocks()
            groups, gids = b.groups(b.everything())
            self.assertEqual([(g.count, g.bytes) for g in groups], [(1, 1000), (3, 300), (2, 20)])
            self.assertEqual(groups[0].frames, (pc(3), pc(2)))
            self.assertEqual(len(gids), 6)
            self.assertEqual(sorted(int(g) for g in gids), [0, 1, 1, 1, 2, 2])
            self.assertEqual(b.threads(b.everything()), [(2, 2, 1010), (1, 4, 310)])

    def test_summary_text(self):
        for be in backends():
            a = analysis(self.build(), be)
            text = a.summary(opts())
            lines = text.splitlines()
            self.assertEqual(lines[0].split(":")[0], "stack 1")
            self.assertIn("1000 bytes in 1 block", lines[0])
            self.assertIn("    f3+0x10 (prog.c:4) in prog", lines[1])
            self.assertIn("libc_fn0+0x10 in libc.so.6", text)
            self.assertEqual(lines[-1], "total: 1320 bytes in 6 blocks from 3 stacks")

    def test_filters(self):
        for be in backends():
            a = analysis(self.build(), be)
            self.assertIn("total: 1300 bytes in 4 blocks from 2 stacks",
                          a.summary(opts("--min-size 100")))
            self.assertIn("total: 310 bytes in 4 blocks from 2 stacks",
                          a.summary(opts("--thread 1")))
            # --match looks at every frame's text, not only the innermost.
            self.assertIn("total: 1300 bytes in 4 blocks from 2 stacks",
                          a.summary(opts("--match f2\\\\b")))
            self.assertIn("total: 300 bytes in 3 blocks from 1 stack",
                          a.summary(opts("--match libc\\\\.so")))
            self.assertIn("total: 0 bytes in 0 blocks from 0 stacks",
                          a.summary(opts("--match nothing-like-this")))
            limited = a.summary(opts("--limit 1"))
            self.assertIn("stack 1:", limited)
            self.assertNotIn("stack 2:", limited)
            self.assertIn("2 more stacks (320 bytes in 5 blocks) not shown", limited)
            self.assertIn("total: 1320 bytes in 6 blocks", limited)
            self.assertIn("total: 10 bytes in 1 block from 1 stack",
                          a.summary(opts("--thread 2 --match f4 --min-size 1")))

    def test_stacks_and_walk(self):
        for be in backends():
            fh = self.build()
            a = analysis(fh, be)
            users = sorted(a.heap.blocks().block(i).user for i in range(6))
            text = a.stacks(opts("--thread 2"))
            self.assertEqual(text.count("allocated by thread 2 at:"), 2)
            self.assertNotIn("thread 1 ", text)
            self.assertEqual(a.walk(opts()).split(), ["0x%x" % u for u in users])
            self.assertEqual(a.walk(opts("--headers")).split(),
                             ["0x%x" % (u - 112) for u in users])
            self.assertEqual(a.walk(opts("--min-size 1000")).split(),
                             ["0x%x" % u for u in users if fh.field(u - 112, "size") & 0xFFFF
                              == 1000])
            self.assertEqual(len(a.walk(opts("--limit 2")).splitlines()), 3)
            self.assertEqual(a.stacks(opts("--match f3")).count("allocated by"), 1)

    def test_json(self):
        for be in backends():
            a = analysis(self.build(), be)
            s = json.loads(a.summary(opts("--json")))
            self.assertEqual(s["total"], {"stacks": 3, "blocks": 6, "bytes": 1320})
            self.assertEqual(s["stacks"][0]["stack"][0]["function"], "f3")
            self.assertEqual(s["stacks"][0]["stack"][0]["line"], 4)
            st = json.loads(a.stacks(opts("--json --min-size 1000")))
            self.assertEqual(len(st["blocks"]), 1)
            self.assertEqual(st["blocks"][0]["size"], 1000)
            self.assertEqual(st["blocks"][0]["tid"], 2)
            w = json.loads(a.walk(opts("--json")))
            self.assertEqual(len(w["addrs"]), 6)
            stats = json.loads(a.stats(opts("--json")))
            self.assertEqual(stats["counters"]["live_blocks"], 6)
            self.assertEqual(stats["threads"][0], {"tid": 2, "blocks": 2, "bytes": 1010})
            v = json.loads(a.verify(opts("--json")))
            self.assertTrue(v["ok"])

    def test_folded(self):
        for be in backends():
            a = analysis(self.build(), be)
            text, n, total = a.folded(opts())
            self.assertEqual(n, 3)
            self.assertEqual(total, 1320)
            lines = text.splitlines()
            # Outermost frame first, as flame graph tools expect.
            self.assertIn("libc_fn0;f2;f1 300", lines)
            self.assertIn("f2;f3 1000", lines)
            self.assertIn("f4 20", lines)
            text, n, total = a.folded(opts("--thread 1"))
            self.assertIn("f4 10", text.splitlines())

    def test_unknown_frames_print_raw(self):
        for be in backends():
            fh = FakeHeap()
            fh.alloc(8, [0x123456789])
            a = analysis(fh, be)
            self.assertIn("    0x123456789\n", a.summary(opts()))
            self.assertIn("0x123456789 8", a.folded(opts())[0])

    def test_stats(self):
        for be in backends():
            fh = self.build()
            fh.free(fh.alloc(5, [pc(9)], li=1))
            text = analysis(fh, be).stats(opts())
            self.assertIn("live blocks: 6\n", text)
            self.assertIn("live bytes: 1320\n", text)
            self.assertIn("allocations: 7\n", text)
            self.assertIn("frees: 1\n", text)
            self.assertRegex(text, r"\n\s+2\s+2\s+1010\n")
            self.assertRegex(text, r"\n\s+1\s+4\s+310\n")


class WhatisTests(unittest.TestCase):
    def test_interior_pointers(self):
        for be in backends():
            fh = FakeHeap()
            a1 = fh.alloc(100, [pc(1)], tid=5)
            a0 = fh.alloc(0, [pc(2)], tid=6)
            a2 = fh.alloc(4096, [pc(3)], tid=7)
            freed = fh.alloc(64, [pc(4)])
            fh.free(freed)
            an = analysis(fh, be)
            idx = an.heap.index()
            b = an.heap.blocks()

            def user_of(addr):
                hit = idx.find(addr)
                return None if hit is None else (b.block(hit[0]).user, hit[1])

            self.assertEqual(user_of(a1), (a1, "data"))
            self.assertEqual(user_of(a1 + 99), (a1, "data"))
            self.assertIsNone(user_of(a1 + 100))
            self.assertEqual(user_of(a1 - 1), (a1, "header"))
            self.assertEqual(user_of(a1 - 112), (a1, "header"))
            self.assertIsNone(user_of(a1 - 113))
            self.assertEqual(user_of(a0), (a0, "data"))
            self.assertEqual(user_of(a2 + 4000), (a2, "data"))
            self.assertIsNone(user_of(freed + 8))
            self.assertIsNone(user_of(0))
            self.assertIsNone(user_of(1 << 63))

            text = an.whatis(a2 + 4000, opts())
            self.assertIn("4000 bytes into the 4096-byte block 0x%x" % a2, text)
            self.assertIn("allocated by thread 7 at:", text)
            self.assertIn("f3+0x10 (prog.c:4) in prog", text)
            self.assertIn("not inside any live block", an.whatis(freed, opts()))
            self.assertIn("header", an.whatis(a1 - 8, opts()))
            self.assertIn("bootstrap arena", an.whatis(FakeHeap.ARENA[0] + 64, opts()))
            j = json.loads(an.whatis(a1 + 10, opts("--json")))
            self.assertEqual(j["block"]["offset"], 10)
            self.assertEqual(j["block"]["size"], 100)


class VerifyTests(unittest.TestCase):
    def build(self, n=6, li=2):
        fh = FakeHeap()
        users = [fh.alloc(50 + i, [pc(i)], li=li) for i in range(n)]
        return fh, users[::-1]  # list order: newest first

    def verify(self, fh, be):
        return fh.heap(be).verify()

    def test_clean(self):
        for be in backends():
            fh, _ = self.build()
            rep = self.verify(fh, be)
            self.assertTrue(rep.ok, problems_text(rep))
            self.assertEqual(rep.nblocks, 6)
            out = analysis(fh, be).verify(opts())
            self.assertIn("no problems found", out)

    def test_cycle(self):
        for be in backends():
            fh, users = self.build()
            # The 4th block's next points back to the 2nd: an endless loop for a naive walker.
            fh.set_field(fh.header(users[3]), "next", fh.header(users[1]))
            rep = self.verify(fh, be)
            text = problems_text(rep)
            self.assertIn("list 2: header 0x%x, reached from 0x%x: its prev is 0x%x, not 0x%x "
                          "(it was walked already: the list loops back)"
                          % (fh.header(users[1]), fh.header(users[3]), fh.header(users[0]),
                             fh.header(users[3])), text)
            self.assertEqual(rep.nblocks, 4)

    def test_self_loop(self):
        for be in backends():
            fh, users = self.build()
            h = fh.header(users[2])
            fh.set_field(h, "next", h)
            rep = self.verify(fh, be)
            self.assertIn("its prev is 0x%x, not 0x%x (it was walked already"
                          % (fh.header(users[1]), h), problems_text(rep))

    def test_bad_prev(self):
        for be in backends():
            fh, users = self.build()
            fh.set_field(fh.header(users[2]), "prev", 0x1234)
            rep = self.verify(fh, be)
            self.assertIn("its prev is 0x1234, not 0x%x; rest" % fh.header(users[1]),
                          problems_text(rep))
            self.assertEqual(rep.nblocks, 2)

    def test_bad_magic_and_freed_block(self):
        for be in backends():
            fh, users = self.build()
            fh.set_field(fh.header(users[1]), "magic", 0x41414141)
            text = problems_text(self.verify(fh, be))
            self.assertIn("header 0x%x" % fh.header(users[1]), text)
            self.assertIn("bad magic 0x41414141", text)
            fh.set_field(fh.header(users[1]), "magic", MAGIC_FREED)
            self.assertIn("freed block", problems_text(self.verify(fh, be)))

    def test_unmapped_next(self):
        for be in backends():
            fh, users = self.build()
            fh.set_field(fh.header(users[4]), "next", 0x6660000000)
            rep = self.verify(fh, be)
            text = problems_text(rep)
            self.assertIn("next of 0x%x points to 0x6660000000, which is unreadable"
                          % fh.header(users[4]), text)
            self.assertEqual(rep.nblocks, 5)

    def test_unmapped_and_misaligned_head(self):
        for be in backends():
            fh, _ = self.build()
            fh.set_counter(2, "head", 0x10)
            self.assertIn("the list head points to 0x10, which is unreadable",
                          problems_text(self.verify(fh, be)))
            fh.set_counter(2, "head", FakeHeap.HEAP + 3)
            self.assertIn("misaligned", problems_text(self.verify(fh, be)))

    def test_counter_mismatches(self):
        for be in backends():
            fh, _ = self.build()
            fh.set_counter(2, "live_blocks", 7)
            text = problems_text(self.verify(fh, be))
            self.assertIn("walked 6 blocks but the live count is 7", text)
            self.assertIn("6 allocations - 0 frees != 7 live blocks", text)
            fh.set_counter(2, "live_blocks", 6)
            fh.set_counter(2, "live_bytes", 1)
            self.assertIn("live byte count is 1", problems_text(self.verify(fh, be)))

    def test_endless_chain_is_capped(self):
        for be in backends():
            fh = FakeHeap()
            for i in range(200):
                fh.alloc(8, [pc(1)], li=0)
            # Counters say the list is empty: the walk must stop near there, not at the end.
            fh.set_counter(0, "live_blocks", 0)
            fh.set_counter(0, "live_bytes", 0)
            fh.set_counter(0, "allocs", 0)
            rep = self.verify(fh, be)
            self.assertIn("goes on past 64 blocks", problems_text(rep))
            self.assertEqual(rep.nblocks, 64)

    def test_wrong_list_duplicate_arena_and_overrun(self):
        for be in backends():
            fh, users = self.build()
            fh.set_field(fh.header(users[0]), "size", 50 + 5 | (5 << 48))
            text = problems_text(self.verify(fh, be))
            self.assertIn("says it belongs on list 5", text)

            fh, users = self.build()
            # Two lists sharing a head see the same blocks twice.
            fh.set_counter(3, "head", fh.counter(2, "head"))
            self.assertIn("on more than one list", problems_text(self.verify(fh, be)))

            fh = FakeHeap()
            fh.alloc(64, [pc(1)], at=FakeHeap.ARENA[0] + 0x100)
            self.assertIn("bootstrap arena", problems_text(self.verify(fh, be)))

            fh = FakeHeap(heap_size=1 << 16)
            fh.alloc(100, [pc(1)], at=FakeHeap.HEAP + 0x100)
            big = fh.header(fh.alloc(100, [pc(1)], at=FakeHeap.HEAP + 0x400))
            fh.set_field(big, "size", 1 << 20)
            fh.set_counter(0, "live_bytes", 100 + (1 << 20))
            self.assertIn("runs into unreadable memory", problems_text(self.verify(fh, be)))

    def test_listing_commands_survive_corruption(self):
        for be in backends():
            fh, users = self.build()
            fh.set_field(fh.header(users[3]), "next", fh.header(users[1]))
            a = analysis(fh, be)
            text = a.summary(opts())
            self.assertIn("warning: 1 problem in the lists", text)
            self.assertIn("total: %d bytes in 4 blocks" % sum(50 + i for i in (5, 4, 3, 2)),
                          text)
            self.assertIn("dmem verify: 1 problem found", a.verify(opts()))


class BackendAgreementTests(unittest.TestCase):
    def random_heap(self, seed, corrupt=False):
        rnd = random.Random(seed)
        fh = FakeHeap(heap_size=1 << 25)
        stacks = [[pc(rnd.randrange(40)) for _ in range(rnd.randrange(0, 12))] for _ in range(25)]
        live = []
        for _ in range(3000):
            u = fh.alloc(rnd.choice([0, 1, 24, 100, 700, 4096, rnd.randrange(1, 20000)]),
                         rnd.choice(stacks), tid=rnd.choice([7, 8, 9, 1000]),
                         li=rnd.randrange(8), align_log2=rnd.choice([0, 0, 0, 5, 12]))
            live.append(u)
            if rnd.random() < 0.3:
                fh.free(live.pop(rnd.randrange(len(live))))
        if corrupt:
            victim = fh.header(rnd.choice(live))
            fh.set_field(victim, "next", 0x5000)
            fh.set_counter(3, "live_bytes", 12345)
        return fh

    def outputs(self, fh, be):
        a = analysis(fh, be)
        b = a.heap.blocks()
        return {
            "summary": a.summary(opts("--limit 0")),
            "summary_json": a.summary(opts("--json --limit 0")),
            "summary_filtered": a.summary(opts("--min-size 100 --thread 8 --match f1[0-9]")),
            "stacks": a.stacks(opts()),
            "walk": a.walk(opts("--headers")),
            "stats": a.stats(opts()),
            "verify": a.verify(opts()),
            "folded": a.folded(opts()),
            "whatis": [a.whatis(b.block(i).user + 3, opts()) for i in range(0, b.n, 97)],
            "threads": b.threads(b.everything()),
        }

    @unittest.skipUnless(backend.HAVE_NUMPY, "numpy is not importable")
    def test_numpy_and_pure_agree(self):
        for seed, corrupt in [(1, False), (2, False), (3, True)]:
            fh = self.random_heap(seed, corrupt)
            pure = self.outputs(fh, "pure")
            fast = self.outputs(fh, "numpy")
            for key in pure:
                self.assertEqual(pure[key], fast[key], "%s differs (seed %d)" % (key, seed))
            if corrupt:
                self.assertIn("unreadable", pure["verify"])

    @unittest.skipUnless(backend.HAVE_NUMPY, "numpy is not importable")
    def test_hash_collisions_fall_back_to_exact_grouping(self):
        fh = self.random_heap(4)
        want = self.outputs(fh, "pure")["summary"]
        orig = blocks.NumpyBlocks.__dict__["_hash_rows"]
        try:
            # Every stack hashes alike: only the exact comparison can tell them apart.
            blocks.NumpyBlocks._hash_rows = staticmethod(
                lambda f: backend.np.zeros(len(f), dtype=backend.np.uint64))
            got = analysis(fh, "numpy").summary(opts("--limit 0"))
        finally:
            blocks.NumpyBlocks._hash_rows = orig
        self.assertEqual(got, want)


class ArgumentTests(unittest.TestCase):
    ALLOWED = ("--json", "--headers") + output.FILTERS

    def test_parse(self):
        # Words as gdb.string_to_argv hands them over: quotes are gone, backslashes are the
        # regex's own.
        o = output.parse_args(["--min-size=0x10", "--thread", "42", "--match", "a b\\.c",
                               "--limit", "3", "--json", "0x1234"], self.ALLOWED, 1)
        self.assertEqual((o.min_size, o.thread, o.match.pattern, o.limit, o.json, o.args),
                         (16, 42, "a b\\.c", 3, True, ["0x1234"]))
        o = output.parse_args(["--json", "--", "--headers"], self.ALLOWED, 1)
        self.assertEqual((o.json, o.headers, o.args), (True, False, ["--headers"]))

    def test_errors_are_usage_errors(self):
        for bad in [["--min-size"], ["--min-size", "x"], ["--limit", "-1"], ["--bogus"],
                    ["--match", "("], ["a", "b"], ["--json=1"]]:
            with self.assertRaises(errors.UsageError, msg=bad):
                output.parse_args(bad, self.ALLOWED, 1)
        with self.assertRaises(errors.UsageError):
            output.parse_args(["--headers"], ("--json",), 0)

    def test_address_is_the_rest_of_the_line(self):
        # whatis and why read ADDR alike: options, then one gdb expression, spaces and all.
        for text, want in [("held->next", (False, "held->next")),
                           ("--json  x ^ 0x5a5a ", (True, "x ^ 0x5a5a")),
                           ("'a + 1'", (False, "a + 1")),
                           ("'file.c'::var + 8", (False, "'file.c'::var + 8")),
                           ('"it\'s"', (False, "it's"))]:
            o = output.address_args(text, usage="x")
            self.assertEqual((o.json, o.args), (want[0], [want[1]]), text)
        for bad, why in [("", "an address is needed"), ("--json", "an address is needed"),
                         ("--bogus x", "unknown option --bogus"), ("--json=1 x", "no value")]:
            with self.assertRaisesRegex(errors.UsageError, why, msg=bad):
                output.address_args(bad, usage="x")


if __name__ == "__main__":
    unittest.main()
