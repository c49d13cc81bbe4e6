"""The gdb side of dmem, as a package: everything `dmem.py` (the gdb adapter) calls.

Only `session.py` imports gdb.  Every other module works on a memory reader and plain data, so
it can be tested with plain Python (tests/python) and reused by other front ends:

    errors      the exceptions that become one-line gdb errors
    backend     numpy when importable, else pure Python
    elf         the one ELF and core-file parser
    memory      memory sources: chunked reads through any reader, bulk ranges of a core or a
                live process
    layout      libdmem's layout descriptor and the walk of its lists
    blocks      the decoded live blocks: filters, grouping by stack, lookup by address
    symbols     naming code addresses, once each
    roots       loaded objects and the roots of a reachability scan
    reach       the graph of pointers between blocks and the leak classes
    cxxtypes    C++ types from vtable pointers, word histograms
    output      option parsing, text and JSON shared by the commands
    heapcmds    the answers of summary, stacks, walk, whatis, verify, stats, folded
    leakcmds    the answers of leaks, types, words, why (and folded --leaks)
    session     the selected inferior seen through gdb, parsed once per session
"""
