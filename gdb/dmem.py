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


def _sysroot():
    """gdb's `set sysroot`, where the core's files are looked up first."""
    try:
        return gdb.parameter("sysroot") or None
    except (gdb.error, RuntimeError):
        return None


def _threads():
    """(tid, {register: value}) of every thread of the selected inferior, as gdb sees them."""
    selected = gdb.selected_thread()
    out = []
    try:
        for t in sorted(gdb.selected_inferior().threads(), key=lambda t: t.num):
            t.switch()
            frame = gdb.newest_frame()
            regs = {}
            for name in _REGISTERS:
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
        image = engine.image_args(core=core, program=program, sysroot=_sysroot())
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
or the PATH), the same engine as 'dmem summary PROG CORE' and the like, which
also says what the commands are: 'help dmem COMMAND' shows one's options."""

    def __init__(self, unavailable=None):
        super().__init__("dmem", gdb.COMMAND_DATA, gdb.COMPLETE_NONE, True)
        self.unavailable = unavailable

    def invoke(self, arg, from_tty):
        self.dont_repeat()
        if self.unavailable:
            raise gdb.GdbError("dmem: %s" % self.unavailable)
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
    value_options = ()

    def answer(self, arg):
        return _answer(self.name, engine.folded_words(self.words(arg), self.usage,
                                                      self.value_options))


def _usage(doc):
    for line in doc.splitlines():
        if line.startswith("Usage: "):
            return line[len("Usage: "):]
    return ""


_BASES = {"address": _AddressSub, "file": _FoldedSub}


def _register(catalog):
    """One gdb command per analysis command the binary lists, its help the binary's; one per
    alias, whose help says what it stands for."""
    global _REGISTERS
    _REGISTERS = tuple(catalog["registers"])
    classes = {}
    for entry in catalog["commands"]:
        name = entry["name"]
        cls = type(name.capitalize() + "Command", (_BASES.get(entry["operand"], _Sub),),
                   {"__doc__": entry["help"], "name": name, "usage": _usage(entry["help"]),
                    "value_options": tuple(catalog["value_options"])})
        classes[name] = cls
        cls()
    for alias in catalog["aliases"]:
        # gdb takes a command's help from its class docstring, so each alias gets its own class.
        target = alias["words"]
        cls = type(alias["name"], (classes[target[0]],), {
            "__doc__": "Same as 'dmem %s' (a name kept from the original libdmem script)."
                       % " ".join(target),
            "command": target[0], "extra": tuple(target[1:])})
        cls(alias["name"])


_REGISTERS = ()
try:
    _catalog = engine.catalog(engine.find_binary(_here))
except DmemError as _e:
    # Without the binary there is nothing to answer with: `dmem` says why.
    DmemCommand(unavailable=str(_e))
    gdb.write("dmem: %s\n" % _e, gdb.STDERR)
else:
    DmemCommand()
    _register(_catalog)
