//! Reading glibc's own heap where the program ran without libdmem (a core nobody prepared, a
//! bare running process): the same kind of blocks as the list walk gives, without stacks.
//!
//! No debug info is needed: `arenas` finds main_arena by its shape in libc's data and the other
//! arenas through their heaps' `heap_info`; `chunks` walks every heap chunk by chunk and finds
//! the chunks mapped on their own; `free` takes out the chunks glibc holds free although the
//! next chunk says they are in use (tcache and fast bins) and the tcaches themselves. A chunk in
//! use is a block: its address is what malloc returned, its size what `malloc_usable_size`
//! says (the size asked for is not kept by glibc). docs/glibc-heap.md describes the layout and
//! what changed between glibc versions.

pub mod arenas;
pub mod chunks;
pub mod free;
mod open;

pub use open::{open_core, open_process};

use crate::analysis::descriptor::Sealed;
use crate::model::text::plural;
use crate::source::heapwalk::{Block, Counters, Layout, Problem, Walk};
use crate::source::mappings::Mappings;
use crate::source::memory::ImageWords;
use crate::source::memory::{AddrHash, Memory};
use std::collections::HashSet;
use std::path::PathBuf;

/// The allocators other than glibc's that a program may load, by the start of their file name.
const OTHERS: [(&str, &str); 3] = [
    ("libjemalloc", "jemalloc"),
    ("libtcmalloc", "tcmalloc"),
    ("libmimalloc", "mimalloc"),
];

/// glibc's heap in an image, as found.
#[derive(Clone, Debug)]
pub struct Glibc {
    #[allow(dead_code)]
    pub libc: PathBuf,
    pub version: Option<(u32, u32)>,
    /// Where `main_arena` is.
    pub main_arena: u64,
}

impl Glibc {
    /// How the version reads in messages.
    pub fn version_text(&self) -> String {
        match self.version {
            Some((a, b)) => format!("glibc {a}.{b}"),
            None => "glibc (version unknown)".into(),
        }
    }
}

/// Finds glibc's heap in an image that has no libdmem lists, or says in one line (after
/// `name`) why it cannot be read.
pub fn find(mem: &dyn Memory, maps: &Mappings, name: &str) -> Result<Glibc, String> {
    let files = maps.files();
    let file_name = |p: &std::path::Path| {
        p.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    for p in &files {
        let n = file_name(p);
        if let Some((_, what)) = OTHERS.iter().find(|(prefix, _)| n.starts_with(prefix)) {
            return Err(format!(
                "{name} ran without libdmem, and its heap is {what}'s ({n}), which dmem cannot read: \
                 without libdmem's lists only glibc's heap can be read; run it with LD_PRELOAD=libdmem.so"
            ));
        }
    }
    let Some(libc) = files
        .iter()
        .find(|p| {
            let n = file_name(p);
            n.starts_with("libc.so") || (n.starts_with("libc-2.") && n.ends_with(".so"))
        })
        .map(|p| p.to_path_buf())
    else {
        // No dynamic loader mapped either: the program is statically linked, its allocator
        // (glibc's or another) inside the executable, where nothing names it.
        let linked = if files.iter().any(|p| file_name(p).starts_with("ld-")) {
            "maps no libc.so"
        } else {
            "is statically linked (no libc.so or dynamic loader mapped)"
        };
        return Err(format!(
            "{name} ran without libdmem and {linked}: dmem reads glibc's heap only through the \
             data of a shared libc, so this heap cannot be read; build it dynamically linked \
             and run it with LD_PRELOAD=libdmem.so"
        ));
    };
    let words = ImageWords(mem);
    // libc's writable segments as the loader laid them out: from the file of its build, or
    // from the target's own copy of its headers.
    let object = match maps.local_file(&libc) {
        Some(f) => crate::source::elf::ElfObject::open_as(&libc, f).ok(),
        None => maps.local.get(&libc).and_then(|l| l.headers.clone()),
    };
    let segments: Vec<(usize, usize)> = object
        .and_then(|o| Some((maps.bias(&o)?, o)))
        .map(|(bias, o)| {
            o.loads
                .iter()
                .filter(|s| s.writable && s.memsz > 0)
                .map(|s| {
                    (
                        bias.wrapping_add(s.vaddr) as usize,
                        bias.wrapping_add(s.vaddr + s.memsz) as usize,
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let Some((main_arena, _)) = crate::analysis::arena::main_arena(&words, &segments) else {
        return Err(format!(
            "{name} ran without libdmem, and glibc's main_arena was not found in the data of {} \
             (malloc never ran, the image lacks libc's data, or this libc is not glibc)",
            crate::analysis::escape::show(&libc)
        ));
    };
    Ok(Glibc {
        version: arenas::version(Some(&libc)),
        libc,
        main_arena: main_arena as u64,
    })
}

/// A layout that describes no lists, for an image read through glibc's heap: a block's
/// "header" is its chunk's 16-byte header.
pub fn layout() -> Layout {
    Layout {
        version: 0,
        header_size: 16,
        nframes: 1,
        off_next: 0,
        off_prev: 0,
        off_frames: 0,
        off_size: 0,
        size_bits: 0,
        off_tid: 0,
        off_magic: 0,
        magic_live: 0,
        lists: 0,
        nlists: 0,
        list_stride: 0,
        list_off_head: 0,
        list_off_live_blocks: 0,
        list_off_live_bytes: 0,
        list_off_allocs: 0,
        list_off_frees: 0,
        flags_addr: 0,
        size_list_shift: 0,
        size_list_bits: 0,
        size_align_shift: 0,
        size_align_bits: 0,
        magic_freed: 0,
        arena_start: 0,
        arena_end: 0,
        addr: 0,
        list_off_changes: None,
        magic_handed: None,
        list_off_hand: None,
        history: None,
        sealed: Sealed::Older,
        exit_entry: None,
        inflight: None,
        magic_key: None,
    }
}

/// What a walk of glibc's heap found besides the blocks.
#[derive(Clone, Debug, Default)]
pub struct Census {
    pub arenas: usize,
    pub heaps: usize,
    pub chunks: u64,
    pub free_chunks: u64,
    pub free_bytes: u64,
    pub tcache_chunks: u64,
    pub fastbin_chunks: u64,
    pub tcaches: u64,
    pub mmapped: u64,
}

impl Census {
    /// What the walk found, in one line.
    pub fn line(&self, g: &Glibc) -> String {
        format!(
            "read without libdmem through {}'s heap: {} and {}, {} ({} mapped alone), of \
             which {} free ({} bytes; {} in tcaches, {} in fast bins) and {} {}; no allocation \
             stacks without libdmem, so blocks are grouped by C++ type and size",
            g.version_text(),
            plural(self.arenas as u64, "arena"),
            plural(self.heaps as u64, "heap"),
            plural(self.chunks, "chunk"),
            self.mmapped,
            self.free_chunks,
            self.free_bytes,
            self.tcache_chunks,
            self.fastbin_chunks,
            self.tcaches,
            if self.tcaches == 1 {
                "thread's tcache"
            } else {
                "threads' tcaches"
            },
        )
    }
}

/// The chunks in a tcache, and the tcaches themselves (each its chunk's address): every chunk
/// of a tcache's size that reads as one, and those the threads' `tcache` variables point to.
fn find_tcaches(
    words: &ImageWords,
    sizes: &dyn Fn(u64) -> Option<u64>,
    chunks: &[chunks::Chunk],
    found: &arenas::Arenas,
    g: &Glibc,
    tps: &[u64],
) -> (Vec<u64>, HashSet<u64, AddrHash>) {
    let rules = free::Rules::of(g.version);
    let firsts: HashSet<u64> = found.heaps.iter().map(|h| h.first).collect();
    let mut in_tcache = Vec::new();
    // Asked once for every chunk of a tcache's size or more (most of a heap of 600-byte
    // blocks), so keyed by the address hash rather than SipHash.
    let mut tcaches: HashSet<u64, AddrHash> = HashSet::default();
    for c in chunks.iter().filter(|c| c.in_use) {
        let fits = c.size == free::TCACHE_CHUNK
            || (c.size == free::TCACHE_CHUNK_OLD && g.version.is_none_or(|v| v < (2, 30)));
        if fits
            && free::tcache_at(
                words,
                sizes,
                c.at,
                c.size,
                rules,
                firsts.contains(&c.at),
                &mut in_tcache,
            )
        {
            tcaches.insert(c.at);
        }
    }
    // A tcache whose lists are all empty and that is not its heap's first chunk (a thread that
    // shares an arena made its tcache wherever the arena had room) is told from a program's
    // block of zeros by the thread's `tcache` variable pointing to it.
    for at in free::tcaches_of_threads(words, tps, &tcaches, &sizes) {
        if free::tcache_at(words, sizes, at, free::TCACHE_CHUNK, rules, true, &mut in_tcache) {
            tcaches.insert(at);
        }
    }
    (in_tcache, tcaches)
}

/// Every chunk in use in `g`'s heaps, as blocks (on no stack: `stacks` holds one empty stack,
/// thread 0), with what ended a heap's walk early as problems. `tps` are the threads' thread
/// pointers (`fs_base`), through which each thread's tcache is found wherever it is.
pub fn walk(mem: &dyn Memory, maps: &Mappings, g: &Glibc, tps: &[u64]) -> (Walk, Census) {
    let words = ImageWords(mem);
    let mut regions = mem.regions();
    if regions.is_empty() {
        regions = maps.regions();
    }
    let found = arenas::find(&words, &regions, g.main_arena);
    let mut chunks = Vec::new();
    let stops = chunks::walk(mem, &found, &mut chunks);
    chunks.sort_unstable_by_key(|c| c.at);
    let rules = free::Rules::of(g.version);
    let sizes = |at: u64| free::size_of(&chunks, at);
    let (in_tcache, tcaches) = find_tcaches(&words, &sizes, &chunks, &found, g, tps);
    let mut fast: HashSet<u64, AddrHash> = HashSet::default();
    let mut problems = Vec::new();
    for &a in &found.list {
        free::fastbins(&words, &sizes, a, rules, &mut fast, &mut problems);
    }
    let free_at = |at: u64| {
        chunks
            .binary_search_by_key(&at, |c| c.at)
            .is_ok_and(|i| !chunks[i].in_use)
    };
    for &a in &found.list {
        free::check_bins(&words, &free_at, a, chunks.len() + 1, &mut problems);
    }
    let in_tcache: HashSet<u64, AddrHash> = in_tcache.into_iter().collect();
    let mut census = Census {
        arenas: found.list.len(),
        heaps: found.heaps.len(),
        tcache_chunks: in_tcache.len() as u64,
        fastbin_chunks: fast.len() as u64,
        tcaches: tcaches.len() as u64,
        ..Census::default()
    };
    let mut mm = Vec::new();
    chunks::mmapped(&words, &regions, &found, &mut mm);
    census.mmapped = mm.len() as u64;
    census.chunks = (chunks.len() + mm.len()) as u64;
    let mut blocks = blocks_of(chunks, mm, &in_tcache, &fast, &tcaches, &mut census);
    blocks.sort_unstable_by_key(|b| b.addr);
    let counters = Counters {
        live_blocks: blocks.len() as u64,
        live_bytes: blocks.iter().map(|b| b.size).sum(),
        allocs: 0,
        frees: 0,
    };
    let mut size_problems: Vec<Problem> = stops
        .into_iter()
        .map(|s| Problem {
            list: None,
            addr: Some(s.at),
            text: format!("glibc's heap walk stopped at the chunk at {:#x}: {}", s.at, s.why),
            header: None,
        })
        .collect();
    size_problems.extend(problems.into_iter().map(|text| Problem {
        text,
        ..Problem::default()
    }));
    let walk = Walk {
        blocks,
        stacks: vec![Box::new([])],
        lists: Vec::new(),
        counters,
        size_problems,
    };
    (walk, census)
}

/// The blocks of the chunks in use (`chunks`, the heaps' in address order, then `mm`, the
/// mapped ones), counting the free ones in `census`: a chunk in a tcache or a fast bin is free
/// although its neighbour says it is in use, and a tcache is glibc's, not the program's.
fn blocks_of(
    chunks: Vec<chunks::Chunk>,
    mm: Vec<chunks::Chunk>,
    in_tcache: &HashSet<u64, AddrHash>,
    fast: &HashSet<u64, AddrHash>,
    tcaches: &HashSet<u64, AddrHash>,
    census: &mut Census,
) -> Vec<Block> {
    const {
        use std::mem::{align_of, size_of};
        assert!(size_of::<chunks::Chunk>() == size_of::<Block>());
        assert!(align_of::<chunks::Chunk>() == align_of::<Block>());
    }
    let mut block_of = |c: chunks::Chunk| {
        let free = !c.in_use
            || (!in_tcache.is_empty() && in_tcache.contains(&c.at))
            || (!fast.is_empty() && fast.contains(&c.at));
        if free {
            census.free_chunks += 1;
            census.free_bytes += c.size;
            return None;
        }
        if c.size >= free::TCACHE_CHUNK_OLD && tcaches.contains(&c.at) {
            return None;
        }
        Some(Block {
            addr: c.at + 16,
            // What malloc_usable_size says: a heap chunk lends its last 8 bytes' neighbour
            // field (the next chunk's prev_size) to its block; a mapped one has no neighbour.
            size: c.size - if c.mmapped { 16 } else { 8 },
            tid: 0,
            stack: 0,
            list: c.arena.min(u16::MAX as usize) as u16,
            named_list: c.arena.min(u16::MAX as usize) as u16,
            align_log2: 0,
        })
    };
    // Collected in place: a chunk and a block have the same size and alignment (checked above),
    // so the blocks take over the chunks' memory instead of as much again, fresh, to fault in
    // and zero: 32 MB on a heap of a million blocks.
    let mut blocks: Vec<Block> = chunks.into_iter().filter_map(&mut block_of).collect();
    blocks.extend(mm.into_iter().filter_map(&mut block_of));
    blocks
}
