"""gdb commands over libdmem's live-block lists, in a core file or a live process.

    (gdb) source gdb/dmem.py
    (gdb) dmem summary

This file is the gdb adapter only: it registers every command (one gdb.Command class each),
splits its arguments with gdb.string_to_argv, and turns the package's one-line errors into
gdb.GdbError.  The work is done by the `dmemlib` package beside it; `dmemlib/session.py` is
where gdb is asked for memory, names and threads.  No debug info of libdmem is needed: the
exported `dmem_layout` descriptor and raw memory are enough.
"""

import os
import sys

import gdb

_here = os.path.dirname(os.path.abspath(os.path.expanduser(__file__)))
if sys.path[:1] != [_here]:
    if _here in sys.path:
        sys.path.remove(_here)
    sys.path.insert(0, _here)

# Sourcing the script again picks up edited modules too.
for _name in [m for m in sys.modules if m == "dmemlib" or m.startswith("dmemlib.")]:
    del sys.modules[_name]

from dmemlib import output, session  # noqa: E402
from dmemlib.errors import DmemError, UsageError  # noqa: E402
from dmemlib.output import FILTERS, LISTING  # noqa: E402


def _write(text):
    if text:
        gdb.write(text)
        gdb.flush()


def _address(expr):
    """The value of a gdb expression as an address: how `whatis` and `why` read ADDR."""
    try:
        return int(gdb.parse_and_eval(expr).cast(gdb.lookup_type("unsigned long")))
    except gdb.error as e:
        raise UsageError("cannot evaluate %r: %s" % (expr, e)) from None


class DmemCommand(gdb.Command):
    """Heap analysis of a process or core running with libdmem.so preloaded.

libdmem keeps every live block on lists in the process's memory, with the
allocating thread and stack; these commands walk those lists.

The listing commands (stacks, summary, walk, folded) take filters:
  --min-size N    only blocks of at least N bytes
  --thread TID    only blocks allocated by the thread with kernel id TID
  --match REGEX   only blocks with a frame whose symbolized text matches REGEX
  --limit N       show at most N entries (summary: stacks, default 20; 0 = all)
and --json prints a JSON document instead of text.

The names of the original libdmem script are kept as aliases:
show_alloc_stacks (= dmem stacks), walk_alloc_bufs (= dmem walk) and
walk_alloc_entries (= dmem walk --headers)."""

    def __init__(self):
        super().__init__("dmem", gdb.COMMAND_DATA, gdb.COMPLETE_NONE, True)

    def invoke(self, arg, from_tty):
        self.dont_repeat()
        if arg.strip():
            raise gdb.GdbError("dmem: unknown subcommand %r; see 'help dmem'" % arg.split()[0])
        gdb.execute("help dmem", from_tty)


class _Sub(gdb.Command):
    """One `dmem` subcommand: `allowed` options, up to `positional` other words."""

    name = None
    allowed = LISTING
    positional = 0
    usage = ""

    def __init__(self, name=None):
        super().__init__(name or "dmem " + self.name, gdb.COMMAND_DATA, gdb.COMPLETE_NONE)

    def parse(self, arg):
        try:
            argv = gdb.string_to_argv(arg or "")
        except (gdb.error, ValueError) as e:
            raise UsageError("%s (usage: %s)" % (e, self.usage)) from None
        return output.parse_args(argv, self.allowed, self.positional, self.usage)

    def invoke(self, arg, from_tty):
        # Pressing return again would repeat a scan that may take seconds, for the same answer.
        self.dont_repeat()
        try:
            self.run(arg)
        except DmemError as e:
            raise gdb.GdbError("dmem: %s" % e) from None
        except gdb.MemoryError as e:
            raise gdb.GdbError("dmem: cannot read memory: %s" % e) from None

    def run(self, arg):
        raise NotImplementedError


class StacksCommand(_Sub):
    """Every live block with its size, allocating thread and stack.

Usage: dmem stacks [--json] [--min-size N] [--thread TID] [--match REGEX] [--limit N]

Blocks are listed by address.  Frames read `function+0xoff (file:line) in lib`
as far as gdb knows them, else the raw address."""

    name = "stacks"
    usage = "dmem stacks [--json] [--min-size N] [--thread TID] [--match REGEX] [--limit N]"

    def run(self, arg):
        _write(session.analysis().stacks(self.parse(arg)))


class SummaryCommand(_Sub):
    """Live blocks grouped by allocation stack, most bytes first.

Usage: dmem summary [--json] [--min-size N] [--thread TID] [--match REGEX] [--limit N]

Shows the top 20 stacks (--limit N, 0 for all), each with its block count and
bytes, and a total line over every block that passed the filters."""

    name = "summary"
    usage = "dmem summary [--json] [--min-size N] [--thread TID] [--match REGEX] [--limit N]"

    def run(self, arg):
        _write(session.analysis().summary(self.parse(arg)))


class WalkCommand(_Sub):
    """Addresses of the live blocks, one per line (user addresses, as malloc returned them).

Usage: dmem walk [--headers] [--json] [--min-size N] [--thread TID] [--match REGEX] [--limit N]

--headers prints the address of each block's libdmem header instead."""

    name = "walk"
    allowed = LISTING + ("--headers",)
    usage = "dmem walk [--headers] [--json] [filters]"

    def run(self, arg):
        _write(session.analysis().walk(self.parse(arg)))


class _AddressSub(_Sub):
    """A subcommand taking options, then ADDR: any gdb expression, to the end of the line."""

    allowed = ("--json",)

    def parse(self, arg):
        o = output.address_args(arg, self.allowed, self.usage)
        o.addr = _address(o.args[0])
        return o


class WhatisCommand(_AddressSub):
    """The live block that holds an address, with its allocating thread and stack.

Usage: dmem whatis [--json] ADDR

ADDR is any gdb expression.  Interior pointers count: the answer gives the
block's start, size and ADDR's offset in it.  An address in a block's libdmem
header or in libdmem's bootstrap arena is reported as such."""

    name = "whatis"
    usage = "dmem whatis [--json] ADDR"

    def run(self, arg):
        o = self.parse(arg)
        _write(session.analysis().whatis(o.addr, o))


class VerifyCommand(_Sub):
    """Checks the lists: links, magic values, sizes and the counters.

Usage: dmem verify [--json]

Walks every list checking that each header's prev matches, that its magic says
live, that it is on the list its header names, that its block is readable, and
that the lists' block and byte counters agree with what was walked.  Each
problem is reported with its address; a broken list (a cycle, a pointer into
unmapped memory) ends that list's walk, never the command."""

    name = "verify"
    allowed = ("--json",)
    usage = "dmem verify [--json]"

    def run(self, arg):
        _write(session.analysis().verify(self.parse(arg)))


class StatsCommand(_Sub):
    """libdmem's counters and the live blocks per allocating thread.

Usage: dmem stats [--json]

Live blocks and bytes, allocations and frees as the lists count them, whether
recording was on, and a table of live blocks and bytes by thread id."""

    name = "stats"
    allowed = ("--json",)
    usage = "dmem stats [--json]"

    def run(self, arg):
        _write(session.analysis().stats(self.parse(arg)))


class FoldedCommand(_Sub):
    """Writes the live (or lost) bytes as folded stacks for flame graphs.

Usage: dmem folded [--leaks [--show LIST]] FILE [--min-size N] [--thread TID] [--match REGEX]

Each line of FILE is `outer;...;inner BYTES` (function names, raw addresses
where unknown), the input of inferno-flamegraph and FlameGraph's flamegraph.pl.
--leaks writes the lost blocks only (definitely, indirectly or possibly lost;
see 'dmem leaks'), or those of the classes --show LIST names."""

    name = "folded"
    allowed = FILTERS + ("--leaks", "--show")
    positional = 1
    usage = "dmem folded [--leaks [--show LIST]] FILE [--min-size N] [--thread TID] " \
            "[--match REGEX]"

    def run(self, arg):
        o = self.parse(arg)
        if not o.args:
            raise UsageError("a file name is needed (usage: %s)" % self.usage)
        path = os.path.expanduser(o.args[0])
        source = session.leaks() if o.leaks or o.show else session.analysis()
        text, nstacks, nbytes = source.folded(o)
        try:
            with open(path, "w") as f:
                f.write(text)
        except OSError as e:
            raise DmemError("cannot write %s: %s" % (path, e.strerror)) from None
        _write("dmem: wrote %s (%d bytes) to %s\n" % (output.plural(nstacks, "stack"), nbytes,
                                                      path))


class LeaksCommand(_Sub):
    """Lost blocks, as valgrind's memcheck classes them, grouped by allocation stack.

Usage: dmem leaks [--show LIST] [--json] [--min-size N] [--thread TID] [--match REGEX] [--limit N]

A conservative mark from the roots: every thread's registers and stack (from
its stack pointer, less the red zone, up), each thread's static TLS, and the
writable data of the program and its libraries, less libdmem's lists and the
allocator's own state (glibc's main_arena; all writable data of jemalloc,
tcmalloc or mimalloc).  A word equal to a block's start is a start pointer; one
inside it an interior pointer.  Each live block is then:
  still reachable  start pointers lead to it from a root
  possibly lost    a chain with an interior pointer in it leads to it
  definitely lost  nothing leads to it from a root, and no other lost block
                   does either (of a lost cycle, one block)
  indirectly lost  only lost blocks lead to it
--show LIST picks the classes listed (comma-separated: definite, indirect,
possible, reachable, or all; default definite,indirect,possible, as valgrind's
--show-leak-kinds).  Stacks are listed most bytes first (top 20; --limit 0 for
all), each with its blocks per class, then a total line with all four classes.
The exit report of DMEM_OPTS=leak-report uses the same definitions."""

    name = "leaks"
    allowed = LISTING + ("--show",)
    usage = "dmem leaks [--show LIST] [--json] [--min-size N] [--thread TID] [--match REGEX] " \
            "[--limit N]"

    def run(self, arg):
        _write(session.leaks().leaks(self.parse(arg)))


class TypesCommand(_Sub):
    """C++ types of the live (or lost) blocks, from their vtable pointers.

Usage: dmem types [--leaks] [--json] [--min-size N] [--thread TID] [--match REGEX] [--limit N]

A block whose first word points into a `vtable for X` symbol (_ZTV...) of a
loaded object counts as an X.  Prints a table of types with block counts and
bytes, and the stack most of each type's blocks were allocated from.
--leaks looks at lost blocks only (definitely, indirectly or possibly lost;
see 'dmem leaks'), --show LIST at the blocks of the classes listed."""

    name = "types"
    allowed = LISTING + ("--leaks", "--show")
    usage = "dmem types [--leaks] [--show LIST] [--json] [--min-size N] [--thread TID] " \
            "[--match REGEX] [--limit N]"

    def run(self, arg):
        _write(session.leaks().types(self.parse(arg)))


class WordsCommand(_Sub):
    """Most frequent values in the contents of live (or lost) blocks.

Usage: dmem words [--leaks] [--show LIST] [--vtable TYPE] [--offset N [--type u8|u16|u32|u64]]
                  [--json] [--min-size N] [--thread TID] [--match REGEX] [--limit N]

Without --offset: a histogram of every aligned 8-byte word inside the blocks;
values that are addresses of symbols are named.  Lost objects are often the
most frequent thing in a heap, and their vtable pointers and constant fields
stand out.  --offset N histograms one field instead: the u64 (or --type) at
offset N of each block, and --vtable TYPE restricts it to blocks of that C++
type (as 'dmem types' names it, or the mangled _ZTV symbol), e.g.
  dmem words --leaks --vtable Session --offset 8 --type u32
to see in which state lost Session objects were left.  --leaks and --show LIST
pick blocks by leak class as in 'dmem types'.  --limit N shows the top N values
(default 20; 0 for all)."""

    name = "words"
    allowed = LISTING + ("--leaks", "--show", "--vtable", "--offset", "--type")
    usage = "dmem words [--leaks] [--show LIST] [--vtable TYPE] [--offset N] " \
            "[--type u8|u16|u32|u64] [--json] [filters]"

    def run(self, arg):
        _write(session.leaks().words(self.parse(arg)))


class WhyCommand(_AddressSub):
    """Why a block is in use, or lost: its leak class and one chain of references to it.

Usage: dmem why [--json] ADDR

ADDR is any gdb expression and may point anywhere inside the block.  Names the
block's leak class (see 'dmem leaks').  For a block still reachable or possibly
lost, prints the root (a global or TLS word, a stack slot, a register) and each
block on a short chain down to ADDR's block, with the offset of each pointer
(and how far into the block an interior pointer points) and each block's
allocating stack.  For an indirectly lost block, the chain from the definitely
lost block that heads its group."""

    name = "why"
    usage = "dmem why [--json] ADDR"

    def run(self, arg):
        o = self.parse(arg)
        _write(session.leaks().why(o.addr, o))


def _alias(name, target, extra=""):
    # gdb takes a command's help from its class docstring, so each alias gets its own class.
    doc = "Same as 'dmem %s%s' (a name kept from the original libdmem script)." % (
        target.name, " " + extra if extra else "")
    cls = type(name, (_Sub,), {
        "__doc__": doc, "allowed": target.allowed, "usage": target.usage,
        "positional": target.positional,
        "run": lambda self, arg: target.run(self, (extra + " " + arg).strip()),
    })
    cls(name)


DmemCommand()
for _cls in (StacksCommand, SummaryCommand, WalkCommand, WhatisCommand, VerifyCommand,
             StatsCommand, FoldedCommand, LeaksCommand, TypesCommand, WordsCommand, WhyCommand):
    _cls()
_alias("show_alloc_stacks", StacksCommand)
_alias("walk_alloc_bufs", WalkCommand)
_alias("walk_alloc_entries", WalkCommand, "--headers")
