# glibc's own view of its heap, read by gdb with glibc's debug info (Debian's libc6-dbg): the
# oracle of dmem's reader of glibc's heap (launcher/src/source/glibc). Everything here comes
# from glibc's variables by name: main_arena and the ring of arenas, mp_ (the brk heap's start,
# the count of mmapped chunks), each thread's `tcache` and each arena's fast bins and bins.
# Loaded into gdb with a core, it prints one line: GLIBC_VIEW {json}.
import json

import gdb

inf = gdb.selected_inferior()
HEAP_MAX = 64 << 20


def word(addr):
    return int.from_bytes(bytes(inf.read_memory(addr, 8)), "little")


def val(expr):
    return int(gdb.parse_and_eval(expr))


main = val("(long)&main_arena")
state_len = val("sizeof(struct malloc_state)")
info_len = val("sizeof(heap_info)")
arenas = [main]
a = val("(long)main_arena.next")
while a != main and len(arenas) < 4096:
    arenas.append(a)
    a = val("(long)((struct malloc_state *)%d)->next" % a)


def top(a):
    return val("(long)((struct malloc_state *)%d)->top" % a)


# Every heap as (first chunk, end, top of its arena).
heaps = [(val("(long)mp_.sbrk_base"), top(main) + 16, top(main))]
for a in arenas[1:]:
    t = top(a)
    h = t & ~(HEAP_MAX - 1)
    while h:
        size = val("((heap_info *)%d)->size" % h)
        ar = val("(long)((heap_info *)%d)->ar_ptr" % h)
        first = ((ar + state_len + 15) & ~15) if h <= ar < h + size else h + info_len
        heaps.append((first, h + size, t))
        h = val("(long)((heap_info *)%d)->prev" % h)

chunks = {}  # chunk address -> (size, in use by its neighbour's bit)
for first, end, t in heaps:
    p = first
    last = None
    while p < end and p != t:
        size = word(p + 8) & ~7
        if size < 32:
            break
        if last is not None:
            chunks[last] = (chunks[last][0], word(p + 8) & 1 == 1)
        chunks[p] = (size, True)
        last = p
        p += size
    if last is not None and p == t:
        chunks[last] = (chunks[last][0], word(t + 8) & 1 == 1)

# Each thread's tcache, by name, and the chunks on its lists (safe-linked since 2.32).
tcache_chunks = set()
tcaches = set()
for th in inf.threads():
    th.switch()
    tc = val("(long)tcache")
    if tc == 0:
        continue
    tcaches.add(tc - 16)
    for i in range(64):
        e = val("(long)((tcache_perthread_struct *)%d)->entries[%d]" % (tc, i))
        for _ in range(val("((tcache_perthread_struct *)%d)->counts[%d]" % (tc, i))):
            tcache_chunks.add(e - 16)
            e = (e >> 12) ^ word(e)

fast_chunks = set()
for a in arenas:
    for i in range(10):
        p = val("(long)((struct malloc_state *)%d)->fastbinsY[%d]" % (a, i))
        while p:
            fast_chunks.add(p)
            p = ((p + 16) >> 12) ^ word(p + 16)

# The regular bins: every chunk on them must be one the walk found free.
bin_chunks = 0
for a in arenas:
    for i in range(1, 127):
        b = val("(long)&((struct malloc_state *)%d)->bins[%d]" % (a, 2 * (i - 1))) - 16
        p = word(b + 16)
        while p != b:
            bin_chunks += 1
            p = word(p + 16)

in_use = [
    c
    for c, (size, used) in chunks.items()
    if used and c not in tcache_chunks and c not in fast_chunks and c not in tcaches
]
print(
    "GLIBC_VIEW "
    + json.dumps(
        {
            "arenas": len(arenas),
            "heap_chunks_in_use": len(in_use),
            "free_chunks": sum(1 for c, (s, u) in chunks.items() if not u)
            + len(tcache_chunks)
            + len(fast_chunks),
            "tcache_chunks": len(tcache_chunks),
            "fastbin_chunks": len(fast_chunks),
            "bin_chunks": bin_chunks,
            "tcaches": len(tcaches),
            "mmapped": val("mp_.n_mmaps"),
            "in_use_addresses": sorted(c + 16 for c in in_use),
        }
    )
)
