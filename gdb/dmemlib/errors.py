"""The exceptions of the gdb side: a DmemError is shown to the user as one line (the adapter turns
it into gdb.GdbError)."""


class DmemError(Exception):
    """A problem to show the user as one line."""


class UsageError(DmemError):
    """Bad command arguments."""
