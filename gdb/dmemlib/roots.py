"""The roots of a reachability scan, and the loaded objects they come from.

Roots are each thread's registers and its stack from its stack pointer up to the end of that
mapping, each thread's static TLS around its thread pointer, and the writable segments (.data,
.bss, .got, TLS images) of every loaded object except libdmem, whose list heads point at every
block.
"""

import collections
import os

from .elf import ET_DYN, ET_EXEC, PF_W, PF_X, PT_LOAD, PT_TLS, Elf
from .errors import DmemError

# Beyond the objects' own TLS images, glibc reserves a little static TLS for libraries loaded
# later and puts its thread descriptor (struct pthread) above the thread pointer; these bound the
# window scanned around each thread's fs_base.
TLS_SURPLUS = 4096
TCB_SIZE = 4096

# Register names worth scanning: the general-purpose ones (segment registers and flags cannot
# hold a pointer).
POINTER_REGS = ("rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rbp", "rsp", "r8", "r9", "r10", "r11",
                "r12", "r13", "r14", "r15", "rip", "orig_rax", "fs_base", "gs_base")

Root = collections.namedtuple("Root", "kind where start end value")


class LoadedObject:
    def __init__(self, path, elf, bias, mappings):
        self.path = path
        self.name = os.path.basename(path)
        self.elf = elf
        self.bias = bias
        self.mappings = mappings

    def contains(self, addr):
        return any(s <= addr < e for s, e, _ in self.mappings)

    def writable(self):
        """[bias + p_vaddr, + p_memsz) of each writable PT_LOAD, as dl_iterate_phdr shows it."""
        return [(self.bias + p.vaddr, self.bias + p.vaddr + p.memsz) for p in self.elf.phdrs
                if p.type == PT_LOAD and p.flags & PF_W and p.memsz]

    def tls_size(self):
        return sum(p.memsz + 64 for p in self.elf.phdrs if p.type == PT_TLS)


def loaded_objects(mappings, open_elf=Elf.open, space=None):
    """The ELF objects among the mapped files, with their load bias.  Files that are not ELF
    (locale archives, fonts) or cannot be opened are left out."""
    by_path = collections.OrderedDict()
    for m in mappings:
        if m.path:
            by_path.setdefault(m.path, []).append((m.start, m.end, m.offset))
    out = []
    for path, maps in by_path.items():
        try:
            elf = open_elf(path)
        except (DmemError, OSError):
            continue
        if elf is None or elf.type not in (ET_EXEC, ET_DYN):
            continue
        bias = elf.bias(maps, space.prot if space is not None else None)
        if bias is None:
            continue
        out.append(LoadedObject(path, elf, bias, maps))
    return out


def unmatched_objects(mappings, objects, space, exclude=None):
    """Paths of mapped files with executable code (so, programs or libraries) that are not
    among `objects`: their file could not be opened or no longer matches the mapping, and their
    data is not scanned.  The one holding `exclude` (libdmem) does not matter and is left out."""
    known = {o.path for o in objects}
    out = []
    for m in mappings:
        if m.path and m.path not in known and m.path not in out and space.prot(m.start) & PF_X:
            if exclude is not None and any(x.path == m.path and x.start <= exclude < x.end
                                           for x in mappings):
                continue
            out.append(m.path)
    return out


def gather_roots(objects, threads, space, exclude=None):
    """The roots, in scan order, and the objects left out (libdmem, found by the address
    `exclude`, its layout descriptor)."""
    roots = []
    skipped = []
    tls = 0
    for obj in objects:
        tls += obj.tls_size()
        if exclude is not None and obj.contains(exclude):
            skipped.append(obj)
            continue
        for s, e in obj.writable():
            roots.append(Root("data", "writable data of %s" % obj.name, s, e, None))
    for t in threads:
        sp = t.regs.get("rsp")
        piece = space.piece_of(sp) if sp else None
        if piece is not None:
            roots.append(Root("stack", "stack of thread %d" % t.tid, sp, piece[1], None))
        fs = t.regs.get("fs_base")
        piece = space.piece_of(fs) if fs else None
        if piece is not None:
            lo = max(piece[0], fs - tls - TLS_SURPLUS)
            hi = min(piece[1], fs + TCB_SIZE)
            roots.append(Root("tls", "TLS of thread %d" % t.tid, lo, hi, None))
        for name in POINTER_REGS:
            v = t.regs.get(name)
            if v:
                roots.append(Root("register", "register %s of thread %d" % (name, t.tid),
                                  None, None, v))
    return roots, skipped


class Target:
    """What a scan needs besides the lists: bulk memory, the roots, the loaded objects (for
    vtables), the objects left out of the roots, and two optional name services:
    symbol_at(addr) -> text for a data or code address, demangle([names]) -> {name: text}."""

    def __init__(self, space, roots, objects=(), skipped=(), symbol_at=None, demangle=None,
                 notes=()):
        self.space = space
        self.roots = roots
        self.objects = list(objects)
        self.skipped = list(skipped)
        self.symbol_at = symbol_at
        self.demangle = demangle
        self.notes = list(notes)
