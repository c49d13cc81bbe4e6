"""gdb commands over libdmem's live-block lists, in a core file or a live process.

    (gdb) source gdb/dmem.py
    (gdb) dmem summary

This file is the gdb adapter only: it registers every command (one gdb.Command class each),
splits its arguments with gdb.string_to_argv, says what gdb has open (the core file and the
program, or the process it holds stopped and its threads' registers), evaluates the address
expressions of `whatis` and `why`, and prints what the dmem binary answers.  The plain module
beside it, `dmemlib/engine.py`, builds the command line and turns the binary's errors into one
line, which becomes a gdb.GdbError here.
"""

import os
import re
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

from dmemlib import engine  # noqa: E402
from dmemlib.errors import DmemError, UsageError  # noqa: E402

_CORE_TARGET = re.compile(r"core dump file:\s*`(.*)', file type")


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


def _core_file():
    """The core file gdb has open, if any (from `info target`)."""
    try:
        text = gdb.execute("info target", to_string=True)
    except gdb.error:
        return None
    m = _CORE_TARGET.search(text)
    return m.group(1) if m else None


def _threads():
    """(tid, {register: value}) of every thread of the selected inferior, as gdb sees them."""
    selected = gdb.selected_thread()
    out = []
    try:
        for t in sorted(gdb.selected_inferior().threads(), key=lambda t: t.num):
            t.switch()
            frame = gdb.newest_frame()
            regs = {}
            for name in engine.REGISTERS:
                try:
                    regs[name] = int(frame.read_register(name)) & (2 ** 64 - 1)
                except (gdb.error, ValueError):
                    regs[name] = None
            out.append((t.ptid[1] or t.ptid[0], regs))
    finally:
        if selected is not None and selected.is_valid():
            selected.switch()
    return out


def _answer(command, words, address=None):
    """Runs the engine on what gdb has open and returns what it printed."""
    binary = engine.find_binary(_here)
    inferior = gdb.selected_inferior()
    core = _core_file()
    program = gdb.current_progspace().filename
    if core:
        image = engine.image_args(core=core, program=program)
        out, err = engine.run(engine.command_line(binary, command, words, image, address))
    elif inferior.pid:
        threads = _threads()

        def run_with(path):
            image = engine.image_args(pid=inferior.pid, registers_file=path)
            return engine.run(engine.command_line(binary, command, words, image, address))

        out, err = engine.with_registers_file(threads, run_with)
    else:
        image = engine.image_args()
        out, err = "", ""
    # What the engine says on the side (a file written, a note) comes first.
    return err + out


class DmemCommand(gdb.Command):
    """Heap analysis of a process or core running with libdmem.so preloaded.

libdmem keeps every live block on lists in the process's memory, with the
allocating thread and stack; these commands read those lists in the core gdb
has open, or in the process it holds stopped.  The answers come from the dmem
binary (beside this script when installed, the source tree's build, $DMEM_BIN
or the PATH), the same engine as 'dmem summary PROG CORE' and the like.

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
    """One `dmem` subcommand, answered by the engine's subcommand of the same name."""

    name = None
    command = None
    usage = ""
    extra = ()

    def __init__(self, name=None):
        super().__init__(name or "dmem " + self.name, gdb.COMMAND_DATA, gdb.COMPLETE_NONE)

    def words(self, arg):
        try:
            return list(self.extra) + gdb.string_to_argv(arg or "")
        except (gdb.error, ValueError) as e:
            raise UsageError("%s (usage: %s)" % (e, self.usage)) from None

    def invoke(self, arg, from_tty):
        # Pressing return again would repeat a scan that may take seconds, for the same answer.
        self.dont_repeat()
        try:
            _write(self.answer(arg))
        except DmemError as e:
            raise gdb.GdbError("dmem: %s" % e) from None

    def answer(self, arg):
        return _answer(self.command or self.name, self.words(arg))


class _AddressSub(_Sub):
    """A subcommand whose last argument is a gdb expression for an address."""

    def answer(self, arg):
        opts, expr = engine.split_address((arg or "").split(" "), self.usage)
        return _answer(self.name, opts, address="0x%x" % _address(expr))


class _FoldedSub(_Sub):
    def answer(self, arg):
        return _answer(self.name, engine.folded_words(self.words(arg), self.usage))


def _command(name, doc, usage, base=_Sub):
    cls = type(name.capitalize() + "Command", (base,), {"__doc__": doc, "name": name,
                                                        "usage": usage})
    return cls


# Each command's help is its docstring; its first line is what `help dmem` lists.
_DOCS = {
    'stacks': 'Every live block with its size, allocating thread and stack.\n\nUsage: dmem stacks [--json] [--min-size N] [--thread TID] [--match REGEX] [--limit N]\n\nBlocks are listed by address.  Frames read `function+0xoff (file:line) in lib`\nas far as the symbol tables and DWARF tell, else the raw address.',
    'summary': 'Live blocks grouped by allocation stack, most bytes first.\n\nUsage: dmem summary [--json] [--min-size N] [--thread TID] [--match REGEX] [--limit N]\n\nShows the top 20 stacks (--limit N, 0 for all), each with its block count and\nbytes, and a total line over every block that passed the filters.',
    'walk': "Addresses of the live blocks, one per line (user addresses, as malloc returned them).\n\nUsage: dmem walk [--headers] [--json] [--min-size N] [--thread TID] [--match REGEX] [--limit N]\n\n--headers prints the address of each block's libdmem header instead.",
    'whatis': "The live block that holds an address, with its allocating thread and stack.\n\nUsage: dmem whatis [--json] ADDR\n\nADDR is any gdb expression.  Interior pointers count: the answer gives the\nblock's start, size and ADDR's offset in it.  An address in a block's libdmem\nheader or in libdmem's bootstrap arena is reported as such.  Where the process\nran with DMEM_OPTS=history=N, an address in a block freed since (or in one\nfreed before a live block reused its memory) also gets that block: who freed\nit, when, at which stack, and where it was allocated.",
    'verify': "Checks the lists: links, magic values, sizes and the counters.\n\nUsage: dmem verify [--json]\n\nWalks every list checking that each header's prev matches, that its magic says\nlive, that it is on the list its header names, that its block is readable, and\nthat the lists' block and byte counters agree with what was walked.  Each\nproblem is reported with its address; a broken list (a cycle, a pointer into\nunmapped memory) ends that list's walk, never the command.",
    'stats': "libdmem's counters and the live blocks per allocating thread.\n\nUsage: dmem stats [--json]\n\nLive blocks and bytes, allocations and frees as the lists count them, whether\nrecording was on, and a table of live blocks and bytes by thread id.",
    'folded': "Writes the live (or lost) bytes as folded stacks for flame graphs.\n\nUsage: dmem folded [--leaks [--show LIST]] FILE [--min-size N] [--thread TID] [--match REGEX]\n\nEach line of FILE is `outer;...;inner BYTES` (function names, raw addresses\nwhere unknown), the input of inferno-flamegraph and FlameGraph's flamegraph.pl.\n--leaks writes the lost blocks only (definitely, indirectly or possibly lost;\nsee 'dmem leaks'), or those of the classes --show LIST names.",
    'leaks': "Lost blocks, as valgrind's memcheck classes them, grouped by allocation stack.\n\nUsage: dmem leaks [--show LIST] [--json] [--min-size N] [--thread TID] [--match REGEX] [--limit N]\n                  [--suppressions FILE]... [--gen-suppressions] [--format text|json|xml]\n\nA conservative mark from the roots: every thread's registers and stack (from\nits stack pointer, less the red zone, up), each thread's static TLS, and the\nwritable data of the program and its libraries, less libdmem's lists and the\nallocator's own state (glibc's main_arena; all writable data of jemalloc,\ntcmalloc or mimalloc).  A word equal to a block's start is a start pointer; one\ninside it an interior pointer.  Each live block is then:\n  still reachable  start pointers lead to it from a root\n  possibly lost    a chain with an interior pointer in it leads to it\n  definitely lost  nothing leads to it from a root, and no other lost block\n                   does either (of a lost cycle, one block)\n  indirectly lost  only lost blocks lead to it\n--show LIST picks the classes listed (comma-separated: definite, indirect,\npossible, reachable, or all; default definite,indirect,possible, as valgrind's\n--show-leak-kinds).  Stacks are listed most bytes first (top 20; --limit 0 for\nall), each with its blocks per class, then a total line with all four classes.\n--suppressions FILE leaves out what a LeakSanitizer (leak:PATTERN) or valgrind\n(Memcheck:Leak) suppressions file matches, counted as suppressed in the total;\n--gen-suppressions prints valgrind's suppression after each stack; --format xml\nwrites valgrind's XML (protocol 4) for CI viewers.\nThe exit report of DMEM_OPTS=leak-report uses the same definitions.",
    'types': "C++ types of the live (or lost) blocks, from their vtable pointers.\n\nUsage: dmem types [--leaks] [--json] [--min-size N] [--thread TID] [--match REGEX] [--limit N]\n\nA block whose first word points into a `vtable for X` symbol (_ZTV...) of a\nloaded object counts as an X.  Prints a table of types with block counts and\nbytes, and the stack most of each type's blocks were allocated from.\n--leaks looks at lost blocks only (definitely, indirectly or possibly lost;\nsee 'dmem leaks'), --show LIST at the blocks of the classes listed.",
    'words': "Most frequent values in the contents of live (or lost) blocks.\n\nUsage: dmem words [--leaks] [--show LIST] [--vtable TYPE] [--offset N [--type u8|u16|u32|u64]]\n                  [--json] [--min-size N] [--thread TID] [--match REGEX] [--limit N]\n\nWithout --offset: a histogram of every aligned 8-byte word inside the blocks;\nvalues that are addresses of symbols are named.  Lost objects are often the\nmost frequent thing in a heap, and their vtable pointers and constant fields\nstand out.  --offset N histograms one field instead: the u64 (or --type) at\noffset N of each block, and --vtable TYPE restricts it to blocks of that C++\ntype (as 'dmem types' names it, or the mangled _ZTV symbol), e.g.\n  dmem words --leaks --vtable Session --offset 8 --type u32\nto see in which state lost Session objects were left.  --leaks and --show LIST\npick blocks by leak class as in 'dmem types'.  --limit N shows the top N values\n(default 20; 0 for all).",
    'history': "The free history the process kept (DMEM_OPTS=history=N), newest first.\n\nUsage: dmem history [--addr A] [--json] [--limit N]\n\nEach free with its block's address and size, the thread that freed it and how\nlong before the newest event, the stack of the free, and the thread and stack\nthat allocated the block (allocations too, with history-allocs).  --addr A\nkeeps the events of blocks that held address A (a number); --limit N shows N\n(default 20, 0 for all).",
    'why': "Why a block is in use, or lost: its leak class and one chain of references to it.\n\nUsage: dmem why [--json] ADDR\n\nADDR is any gdb expression and may point anywhere inside the block.  Names the\nblock's leak class (see 'dmem leaks').  For a block still reachable or possibly\nlost, prints the root (a global or TLS word, a stack slot, a register) and each\nblock on a short chain down to ADDR's block, with the offset of each pointer\n(and how far into the block an interior pointer points) and each block's\nallocating stack.  For an indirectly lost block, the chain from the definitely\nlost block that heads its group.",
}


def _usage(doc):
    for line in doc.splitlines():
        if line.startswith("Usage: "):
            return line[len("Usage: "):]
    return ""


_BASES = {"whatis": _AddressSub, "why": _AddressSub, "folded": _FoldedSub}
_CLASSES = {}
DmemCommand()
for _name in engine.COMMANDS:
    _CLASSES[_name] = _command(_name, _DOCS[_name], _usage(_DOCS[_name]),
                               _BASES.get(_name, _Sub))
    _CLASSES[_name]()
for _alias, _target in engine.ALIASES.items():
    # gdb takes a command's help from its class docstring, so each alias gets its own class.
    _base = _CLASSES[_target[0]]
    _cls = type(_alias, (_base,), {
        "__doc__": "Same as 'dmem %s' (a name kept from the original libdmem script)."
                   % " ".join(_target),
        "command": _target[0], "extra": tuple(_target[1:])})
    _cls(_alias)
