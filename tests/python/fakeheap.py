"""Synthetic process memory holding libdmem's descriptor, list heads and headers.

The builder lays things out as the interposer does (new blocks pushed at the head of their list,
counters kept in the list structs) so the decoder can be tested without a process; tests then
break the structures on purpose.  The header layout is a parameter, so the decoder can be shown
to follow the descriptor's offsets rather than assume the usual ones.
"""

import os
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "gdb"))

from dmemlib import backend, errors, layout, memory, symbols  # noqa: E402

# The usual layout (as libdmem v1 writes it) and a shuffled one with a bigger header.
STANDARD = dict(header_size=112, nframes=10, off_next=0, off_prev=8, off_frames=16, off_size=96,
                off_tid=104, off_magic=108)
SHUFFLED = dict(header_size=128, nframes=6, off_magic=0, off_tid=4, off_size=8, off_frames=16,
                off_prev=64, off_next=72)

MAGIC_LIVE = 0xD3E3A11C
MAGIC_FREED = 0xD3E3F4EE


class FakeMemory:
    """Mapped regions of a pretend address space; reads outside them fail like gdb's."""

    def __init__(self):
        self.regions = []  # (base, bytearray)
        self.calls = 0

    def map(self, base, size):
        buf = bytearray(size)
        self.regions.append((base, buf))
        return buf

    def unmap(self, base):
        self.regions = [(b, m) for b, m in self.regions if b != base]

    def _find(self, addr, n):
        for base, buf in self.regions:
            if base <= addr and addr + n <= base + len(buf):
                return base, buf
        return None

    def read(self, addr, n):
        self.calls += 1
        hit = self._find(addr, n)
        if hit is None:
            raise errors.ReadError(addr, n)
        base, buf = hit
        return bytes(buf[addr - base:addr - base + n])

    def write(self, addr, data):
        hit = self._find(addr, len(data))
        assert hit is not None, "write to unmapped 0x%x" % addr
        base, buf = hit
        buf[addr - base:addr - base + len(data)] = data

    def u64(self, addr):
        return struct.unpack("<Q", self.read(addr, 8))[0]

    def put64(self, addr, v):
        self.write(addr, struct.pack("<Q", v))

    def put32(self, addr, v):
        self.write(addr, struct.pack("<I", v))


class FakeHeap:
    """Builds a process image the way libdmem would leave it."""

    LAYOUT = 0x10000
    LISTS = 0x20000
    FLAGS = 0x30000
    ARENA = (0x40000, 0x48000)
    HEAP = 0x7F0000000000

    def __init__(self, layout=None, nlists=8, stride=128, heap_size=1 << 22, recording=True):
        self.fmt = dict(STANDARD if layout is None else layout)
        self.nlists = nlists
        self.stride = stride
        self.mem = FakeMemory()
        self.mem.map(self.LAYOUT, 0x1000)
        self.mem.map(self.LISTS, max(0x1000, nlists * stride))
        self.mem.map(self.FLAGS, 0x1000)
        self.mem.map(self.ARENA[0], self.ARENA[1] - self.ARENA[0])
        self.mem.map(self.HEAP, heap_size)
        self.heap_end = self.HEAP + heap_size
        self.brk = self.HEAP + 0x40
        self.words = self._descriptor(recording)
        self.write_descriptor()

    def _descriptor(self, recording):
        f = self.fmt
        w = dict(magic=layout.LAYOUT_MAGIC, version=2, size_bits=48, magic_live=MAGIC_LIVE,
                 magic_freed=MAGIC_FREED, lists=self.LISTS, nlists=self.nlists,
                 list_stride=self.stride, list_off_head=0, list_off_live_blocks=8,
                 list_off_live_bytes=16, list_off_allocs=24, list_off_frees=32,
                 arena_start=self.ARENA[0], arena_end=self.ARENA[1], flags=self.FLAGS,
                 size_list_shift=48, size_list_bits=8, size_align_shift=56, size_align_bits=8,
                 list_off_changes=40)
        w.update(f)
        self.mem.put64(self.FLAGS, 1 if recording else 0)
        return w

    def write_descriptor(self):
        for i, name in enumerate(layout.LAYOUT_FIELDS):
            self.mem.put64(self.LAYOUT + 8 * i, self.words[name])

    # ---- list structs

    def list_addr(self, li):
        return self.LISTS + li * self.stride

    def counter(self, li, name):
        return self.mem.u64(self.list_addr(li) + {"head": 0, "live_blocks": 8, "live_bytes": 16,
                                                  "allocs": 24, "frees": 32}[name])

    def set_counter(self, li, name, v):
        self.mem.put64(self.list_addr(li) + {"head": 0, "live_blocks": 8, "live_bytes": 16,
                                             "allocs": 24, "frees": 32}[name], v)

    # ---- header fields

    def field(self, hdr, name):
        off = self.fmt["off_" + name]
        if name in ("tid", "magic"):
            return struct.unpack("<I", self.mem.read(hdr + off, 4))[0]
        return self.mem.u64(hdr + off)

    def set_field(self, hdr, name, v):
        off = self.fmt["off_" + name]
        if name in ("tid", "magic"):
            self.mem.put32(hdr + off, v)
        else:
            self.mem.put64(hdr + off, v)

    # ---- allocation

    def alloc(self, size, frames, tid=100, li=0, align_log2=0, at=None, gap=16):
        """Places a block (header + size bytes) and links it at the head of list `li`; returns
        the user address."""
        hs = self.fmt["header_size"]
        if at is None:
            at = self.brk
            self.brk = (at + hs + size + gap + 15) & ~15
        hdr = at
        assert hdr + hs + size <= self.heap_end, "fake heap full"
        frames = list(frames)[:self.fmt["nframes"]]
        frames += [0] * (self.fmt["nframes"] - len(frames))
        for k, pc in enumerate(frames):
            self.mem.put64(hdr + self.fmt["off_frames"] + 8 * k, pc)
        self.set_field(hdr, "size", size | (li << 48) | (align_log2 << 56))
        self.set_field(hdr, "tid", tid)
        self.set_field(hdr, "magic", MAGIC_LIVE)
        head = self.counter(li, "head")
        self.set_field(hdr, "prev", 0)
        self.set_field(hdr, "next", head)
        if head:
            self.set_field(head, "prev", hdr)
        self.set_counter(li, "head", hdr)
        self.set_counter(li, "live_blocks", self.counter(li, "live_blocks") + 1)
        self.set_counter(li, "live_bytes", self.counter(li, "live_bytes") + size)
        self.set_counter(li, "allocs", self.counter(li, "allocs") + 1)
        return hdr + hs

    def free(self, user):
        hs = self.fmt["header_size"]
        hdr = user - hs
        li = (self.field(hdr, "size") >> 48) & 0xFF
        size = self.field(hdr, "size") & ((1 << 48) - 1)
        prev, nxt = self.field(hdr, "prev"), self.field(hdr, "next")
        if prev:
            self.set_field(prev, "next", nxt)
        else:
            self.set_counter(li, "head", nxt)
        if nxt:
            self.set_field(nxt, "prev", prev)
        self.set_field(hdr, "next", 0)
        self.set_field(hdr, "prev", 0)
        self.set_field(hdr, "magic", MAGIC_FREED)
        self.set_counter(li, "live_blocks", self.counter(li, "live_blocks") - 1)
        self.set_counter(li, "live_bytes", self.counter(li, "live_bytes") - size)
        self.set_counter(li, "frees", self.counter(li, "frees") + 1)

    def header(self, user):
        return user - self.fmt["header_size"]

    def heap(self, backend_name=None, **memargs):
        mem = memory.Memory(self.mem.read, **memargs)
        return layout.Heap(mem, self.LAYOUT, backend_name)


# A symbolizer over made-up code addresses: 0x400000 + 0x100 * k is function f<k> in "prog",
# 0x7000000 + ... is in "libc.so.6", anything else is unknown.
def fake_resolve(pc):
    if 0x400000 <= pc < 0x500000:
        k, off = divmod(pc - 0x400000, 0x100)
        return symbols.Sym("f%d" % k, off, "prog.c", k + 1, "prog")
    if 0x7000000 <= pc < 0x7100000:
        k, off = divmod(pc - 0x7000000, 0x100)
        return symbols.Sym("libc_fn%d" % k, off, None, None, "libc.so.6")
    return None


def pc(k, off=0x10):
    return 0x400000 + 0x100 * k + off


def backends():
    return [backend.PURE, backend.NUMPY] if backend.HAVE_NUMPY else [backend.PURE]
