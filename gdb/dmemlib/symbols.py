"""Naming addresses: code addresses as `function+0xoff (file:line) in lib`, data addresses as
`name + off in section S of lib`.  The lookups themselves are the debugger's (a function handed
in); this module caches them, formats them, and reads gdb's `info symbol` answer."""

import collections
import os
import re

from .output import hexa

Sym = collections.namedtuple("Sym", "function offset file line lib")
Sym.__new__.__defaults__ = (None, None, None, None, None)

# `info symbol` answers "NAME + OFF in section SEC of FILE" ("NAME in section ..." at offset 0,
# and without "of FILE" when the program is the only object file).
_INFO_SYMBOL = re.compile(
    r"^(?P<name>.*?)(?: \+ (?P<off>\d+))? in section (?P<section>\S+)(?: of (?P<file>.*))?$")

InfoSymbol = collections.namedtuple("InfoSymbol", "name offset section file")


def parse_info_symbol(text):
    """The first line of gdb's `info symbol ADDR` as an InfoSymbol, or None for "No symbol
    matches" and anything else it cannot read."""
    line = text.strip().splitlines()[0] if text and text.strip() else ""
    if not line or line.startswith("No symbol"):
        return None
    m = _INFO_SYMBOL.match(line)
    if m is None:
        return None
    return InfoSymbol(m.group("name"), int(m.group("off") or 0), m.group("section"),
                      m.group("file"))


def data_symbol_text(info):
    """`name + off in section S of lib` for an InfoSymbol, as `dmem why` and `words` name data."""
    name = info.name if not info.offset else "%s + %d" % (info.name, info.offset)
    if info.file:
        return "%s in %s of %s" % (name, info.section, os.path.basename(info.file))
    return "%s in section %s" % (name, info.section)


class Symbols:
    """Names code addresses through `resolve(pc) -> Sym or None`, once per distinct address."""

    def __init__(self, resolve=None):
        self._resolve = resolve
        self._cache = {}

    def sym(self, pc):
        s = self._cache.get(pc, False)
        if s is False:
            s = None
            if self._resolve is not None:
                try:
                    s = self._resolve(pc)
                except Exception:  # a symbolizer failure only costs us the name
                    s = None
            self._cache[pc] = s
        return s

    def text(self, pc):
        """`function+0xoff (file:line) in lib`, with whatever parts are known."""
        s = self.sym(pc)
        if s is None:
            return hexa(pc)
        if s.function:
            out = s.function if s.offset is None else "%s+0x%x" % (s.function, s.offset)
        else:
            out = hexa(pc)
        if s.file:
            out += " (%s:%s)" % (s.file, s.line) if s.line else " (%s)" % s.file
        if s.lib:
            out += " in %s" % s.lib
        return out

    def short(self, pc):
        """The frame's name for folded stacks: the function, or the raw address."""
        s = self.sym(pc)
        name = s.function if s is not None and s.function else hexa(pc)
        return name.replace(";", ":").replace("\n", " ")

    def as_json(self, pc):
        s = self.sym(pc) or Sym()
        return {"pc": hexa(pc), "function": s.function, "offset": s.offset, "file": s.file,
                "line": s.line, "lib": s.lib, "text": self.text(pc)}

    def matches(self, frames, regex):
        """Whether any frame's text matches `regex` (the --match filter)."""
        return any(regex.search(self.text(pc)) for pc in frames)
