"""The one ELF parser of the gdb side: program headers, notes and symbols of 64-bit
little-endian files, and what a core file adds (its memory segments, the files the process had
mapped and every thread's registers).

Files are mapped read-only and read in place: a read of a core's memory is a memoryview into the
mapping, never a copy.
"""

import bisect
import collections
import mmap
import struct

from .errors import ElfError

PT_LOAD, PT_NOTE, PT_TLS = 1, 4, 7
PF_X, PF_W, PF_R = 1, 2, 4
SHT_SYMTAB, SHT_DYNSYM = 2, 11
NT_PRSTATUS, NT_FILE = 1, 0x46494C45
ET_EXEC, ET_DYN, ET_CORE = 2, 3, 4

# user_regs_struct, the register set in each NT_PRSTATUS note (x86_64).
PRSTATUS_REGS = ("r15", "r14", "r13", "r12", "rbp", "rbx", "r11", "r10", "r9", "r8", "rax", "rcx",
                 "rdx", "rsi", "rdi", "orig_rax", "rip", "cs", "eflags", "rsp", "ss", "fs_base",
                 "gs_base", "ds", "es", "fs", "gs")
PRSTATUS_PID = 32
PRSTATUS_REG_OFF = 112

PAGE = 4096

Phdr = collections.namedtuple("Phdr", "type flags offset vaddr filesz memsz")
Thread = collections.namedtuple("Thread", "tid regs")
Mapping = collections.namedtuple("Mapping", "start end offset path")


class Elf:
    """Program headers, notes and symbols of a 64-bit little-endian ELF image."""

    def __init__(self, data, path="<memory>"):
        self.path = path
        self.data = data
        d = data
        if len(d) < 64 or bytes(d[:4]) != b"\x7fELF" or d[4] != 2 or d[5] != 1:
            raise ElfError("%s is not a 64-bit little-endian ELF file" % path)
        self.type = struct.unpack_from("<H", d, 16)[0]
        phoff, shoff = struct.unpack_from("<QQ", d, 32)
        phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", d, 54)
        self.phdrs = []
        for i in range(phnum if phentsize >= 56 else 0):
            p = phoff + i * phentsize
            if p + 56 > len(d):
                break
            t, fl, off, va, _pa, fs, ms = struct.unpack_from("<IIQQQQQ", d, p)
            self.phdrs.append(Phdr(t, fl, off, va, fs, ms))
        self.sections = []
        for i in range(shnum if shoff and shentsize >= 64 else 0):
            p = shoff + i * shentsize
            if p + 64 > len(d):
                break
            self.sections.append(struct.unpack_from("<IIQQQQIIQQ", d, p))

    @classmethod
    def open(cls, path):
        """The file at `path`, mapped read-only."""
        try:
            with open(path, "rb") as f:
                data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError) as e:
            raise ElfError("cannot map %s: %s" % (path, getattr(e, "strerror", None) or e)) \
                from None
        return cls(data, path)

    def notes(self):
        """(type, name, descriptor bytes) of every note in the PT_NOTE segments."""
        d = self.data
        for ph in self.phdrs:
            if ph.type != PT_NOTE:
                continue
            p, end = ph.offset, min(ph.offset + ph.filesz, len(d))
            while p + 12 <= end:
                namesz, descsz, kind = struct.unpack_from("<III", d, p)
                name_at = p + 12
                desc_at = name_at + (namesz + 3) // 4 * 4
                if desc_at + descsz > end:
                    break
                name = bytes(d[name_at:name_at + namesz]).rstrip(b"\0").decode("latin-1")
                yield kind, name, memoryview(d)[desc_at:desc_at + descsz]
                p = desc_at + (descsz + 3) // 4 * 4

    def symbols(self, prefix):
        """(name, value, size) of the defined symbols whose name starts with `prefix` (bytes),
        from .symtab and .dynsym, each name once."""
        d = self.data
        out = {}
        for sh in self.sections:
            _name, kind, _fl, _addr, off, size, link, _info, _align, entsize = sh
            if kind not in (SHT_SYMTAB, SHT_DYNSYM) or entsize != 24 or link >= len(self.sections):
                continue
            stroff, strsize = self.sections[link][4], self.sections[link][5]
            strtab = d[stroff:stroff + strsize]
            for st_name, _info, _other, shndx, value, ssize in struct.iter_unpack(
                    "<IBBHQQ", d[off:off + size - size % 24]):
                if shndx == 0 or not strtab.startswith(prefix, st_name):
                    continue
                end = strtab.find(b"\0", st_name)
                name = strtab[st_name:end if end >= 0 else len(strtab)].decode("latin-1")
                out.setdefault(name, (value, ssize))
        return [(n, v, s) for n, (v, s) in out.items()]

    def bias(self, mappings, prot=None):
        """Load bias of this file if it is loaded as a program or library at `mappings`
        ([(start, end, file offset)] of this file), else None.  `prot(addr)`, when given, tells
        the ELF-style permission bits (PF_R/W/X) of the memory at addr.

        Every PT_LOAD with file contents, code among them, must be mapped from its page-rounded
        file offset at its page-rounded address plus the bias, and code must be executable
        there.  A file mapped some other way (a symbolizer maps whole libraries and separate
        debug files read-only) is not a loaded object and has no roots.
        """
        loads = [p for p in self.phdrs if p.type == PT_LOAD and p.filesz]
        if not any(p.flags & PF_X for p in loads) or self.type not in (ET_EXEC, ET_DYN):
            return None
        first = min(loads, key=lambda p: p.vaddr)
        for start, _end, off in mappings:
            if off != first.offset & ~(PAGE - 1):
                continue
            bias = 0 if self.type == ET_EXEC else start - (first.vaddr & ~(PAGE - 1))
            if all(self._mapped(p, bias, mappings, prot) for p in loads):
                return bias
        return None

    @staticmethod
    def _mapped(p, bias, mappings, prot):
        at = bias + (p.vaddr & ~(PAGE - 1))
        want = p.offset & ~(PAGE - 1)
        if not any(s <= at < e and off + (at - s) == want for s, e, off in mappings):
            return False
        return prot is None or not p.flags & PF_X or bool(prot(at) & PF_X)


class CoreFile(Elf):
    """A core file: its memory segments, the files mapped (NT_FILE) and the threads' registers.

    `read(addr, n)` serves memory straight from the file, the same bytes gdb would give without a
    round trip through gdb per read.  Addresses the core does not hold, such as read-only pages
    of mapped files that were left out of the dump, give None, so the caller can ask gdb, which
    finds them in the files themselves.
    """

    def __init__(self, data, path="<memory>"):
        super().__init__(data, path)
        if self.type != ET_CORE:
            raise ElfError("%s is not an ELF core file" % path)
        self.loads = sorted((p for p in self.phdrs if p.type == PT_LOAD), key=lambda p: p.vaddr)
        # The segments the file holds bytes for: (start, end, file offset), by address.
        self.segments = [(p.vaddr, p.vaddr + p.filesz, p.offset) for p in self.loads
                         if p.filesz and p.offset + p.filesz <= len(data)]
        self._starts = [s[0] for s in self.segments]
        self._view = memoryview(data)
        self.mappings = []
        self.threads = []
        for kind, name, desc in self.notes():
            if name != "CORE":
                continue
            if kind == NT_PRSTATUS and len(desc) >= PRSTATUS_REG_OFF + 8 * len(PRSTATUS_REGS):
                tid = struct.unpack_from("<I", desc, PRSTATUS_PID)[0]
                vals = struct.unpack_from("<%dQ" % len(PRSTATUS_REGS), desc, PRSTATUS_REG_OFF)
                self.threads.append(Thread(tid, dict(zip(PRSTATUS_REGS, vals))))
            elif kind == NT_FILE and len(desc) >= 16:
                count, page = struct.unpack_from("<QQ", desc, 0)
                if 16 + 24 * count > len(desc):
                    continue
                names = bytes(desc[16 + 24 * count:]).split(b"\0")
                for i in range(count):
                    s, e, off = struct.unpack_from("<QQQ", desc, 16 + 24 * i)
                    path_i = names[i].decode("utf-8", "replace") if i < len(names) else ""
                    self.mappings.append(Mapping(s, e, off * page, path_i))

    def read(self, addr, n):
        """A memoryview of [addr, addr + n) if one segment holds it all, else None."""
        i = bisect.bisect_right(self._starts, addr) - 1
        if i < 0:
            return None
        start, end, off = self.segments[i]
        if addr + n > end:
            return None
        at = off + addr - start
        return self._view[at:at + n]
