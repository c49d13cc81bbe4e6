"""The gdb side of dmem, as a package: what `dmem.py` (the gdb adapter) calls.

The answers come from the `dmem` binary, the same engine the launcher's commands are: the
adapter hands it the core gdb has open (or the process gdb holds stopped, with its threads'
registers) and prints what it says.  Nothing here imports gdb, so it is tested with plain Python
(tests/python):

    errors      the exceptions that become one-line gdb errors
    engine      finding the dmem binary, the command line for it, its answer or its one-line error
"""
