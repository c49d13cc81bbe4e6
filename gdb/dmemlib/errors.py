"""The exceptions of the gdb side.  A DmemError is shown to the user as one line (the adapter
turns it into gdb.GdbError); a ReadError is an ordinary event while reading a damaged or partial
address space, caught close to where it happens."""


class DmemError(Exception):
    """A problem to show the user as one line."""


class UsageError(DmemError):
    """Bad command arguments."""


class LayoutError(DmemError):
    """No usable layout descriptor."""


class ElfError(DmemError):
    """A file that is not the ELF file it should be."""


class ReadError(Exception):
    """Memory at [addr, addr + length) cannot be read (unmapped, or not in the core)."""

    def __init__(self, addr, length):
        super().__init__("cannot read %d bytes at 0x%x" % (length, addr))
        self.addr = addr
        self.length = length
