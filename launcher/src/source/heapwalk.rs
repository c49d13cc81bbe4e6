//! The list walk: from the layout descriptor's address and any `Memory`, every live block with
//! its size, thread and stack, plus how far each list could be trusted.
//!
//! Only the descriptor and raw memory are read, never debug info, so a stripped library will do.
//! The lists may change while they are read (a running process goes on allocating), so each list is
//! read between two loads of its sequence counter (layout version 2): the same even value on
//! both sides means the list was whole. A list whose counter was odd or moved is read again, a
//! bounded number of times, and counted as inconsistent if it never came out whole; its blocks
//! from the attempt that read the most are still returned. Every header is checked before it is
//! believed (alignment, magic, list index, back link, a step cap), so a torn read is read again
//! or stepped over (see `walk_headers`) instead of leading the walk into a loop or off into the
//! weeds.
//!
//! Use: `locate(&mem, &maps)` finds the descriptor through the mapped objects' dynamic symbols,
//! then `walk(&mem, &layout, WalkOptions::default())` gives the blocks, the distinct stacks they
//! point into, and how each list was read; `stacks::group` sums them by stack. `mem` is any
//! `Memory`: a running process (`LiveMemory`), or a core file's segments, which never change, so
//! every list comes out whole on the first attempt (unless the core was taken mid-update).

use super::history::HistoryLayout;
use crate::analysis::carried::{self, InFlight};
use crate::analysis::descriptor::{self, field, Fields, Sealed};
use crate::analysis::fit::{self, Misfit};
use crate::source::elf::{self, ElfObject};
use crate::source::mappings::Mappings;
use crate::source::memory::{AddrHash, Memory, ReadError};
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

/// Most lists a descriptor may claim, and most frames a header may hold: beyond these a
/// descriptor is corrupt, whatever it says.
const MAX_LISTS: u64 = 4096;
const MAX_FRAMES: u64 = 64;
const MAX_HEADER: u64 = 4096;

/// The layout descriptor's fields as the walk uses them, looked up by name in what the library
/// exported (`analysis::descriptor` defines the format).
#[derive(Clone, Debug)]
pub struct Layout {
    pub version: u64,
    pub header_size: u64,
    pub nframes: u64,
    pub off_next: u64,
    pub off_prev: u64,
    pub off_frames: u64,
    pub off_size: u64,
    pub size_bits: u64,
    pub off_tid: u64,
    pub off_magic: u64,
    pub magic_live: u32,
    pub lists: u64,
    pub nlists: u64,
    pub list_stride: u64,
    pub list_off_head: u64,
    pub list_off_live_blocks: u64,
    pub list_off_live_bytes: u64,
    pub list_off_allocs: u64,
    pub list_off_frees: u64,
    pub flags_addr: u64,
    pub size_list_shift: u64,
    pub size_list_bits: u64,
    pub size_align_shift: u64,
    pub size_align_bits: u64,
    pub magic_freed: u32,
    pub arena_start: u64,
    pub arena_end: u64,
    /// Where the descriptor itself is.
    pub addr: u64,
    /// Version 1 has no sequence counters.
    pub list_off_changes: Option<u64>,
    /// From version 4: the magic of a handed block (freed by another thread, still on the list
    /// until its owner unlinks it), and the offsets in a list of the handed and drained blocks
    /// and bytes, whose differences the live counters still include.
    pub magic_handed: Option<u32>,
    pub list_off_hand: Option<[u64; 4]>,
    /// The free history's rings and events, in a library that has them.
    pub history: Option<HistoryLayout>,
    /// Whether the descriptor's checks held (from version 5), or why there were none to hold.
    pub sealed: Sealed,
    /// Where the record of the program's entry into the exit path is (`field::EXIT_ENTRY`), in
    /// a library that keeps one.
    pub exit_entry: Option<u64>,
    /// From version 6: where each thread's record of the operation in flight is (see
    /// `analysis::carried`): the address of the word holding the offset from a thread pointer
    /// to the thread's area, and the record's offset in the area.
    pub inflight: Option<(u64, u64)>,
    /// From version 7: the process's secret a header's stored magic is sealed with
    /// (`descriptor::header_tag`); None before, when magics were stored as they are.
    pub magic_key: Option<u64>,
}

/// Recording was on in the process: blocks carry stacks and sit on the lists.
pub const FLAG_RECORDING: u64 = 1;

#[derive(Debug)]
pub enum LayoutError {
    Read(ReadError),
    /// The words there are not a descriptor this reader understands; says why.
    Invalid(String),
}

impl From<ReadError> for LayoutError {
    fn from(e: ReadError) -> Self {
        LayoutError::Read(e)
    }
}

impl Layout {
    /// Reads and checks the descriptor at `addr`, looking its fields up by name.
    pub fn read(mem: &dyn Memory, addr: u64) -> Result<Layout, LayoutError> {
        let mut head = [0u8; descriptor::HEAD_LEN];
        mem.read(addr, &mut head)?;
        if head[..8] != descriptor::MAGIC.to_le_bytes() {
            return Err(LayoutError::Invalid(format!("no descriptor magic at {addr:#x}")));
        }
        let len = descriptor::size(&head).map_err(LayoutError::Invalid)?;
        let mut raw = vec![0u8; len];
        mem.read(addr, &mut raw)?;
        // Nothing of it is believed before its checks held: a changed field is named here,
        // not taken for true.
        let sealed = descriptor::verify(&raw, &mut |at, buf| mem.read(at, buf).is_ok())
            .map_err(LayoutError::Invalid)?;
        let f = Fields::parse(&raw).map_err(LayoutError::Invalid)?;
        let w = |name: &str| f.need(name).map_err(LayoutError::Invalid);
        // Version 1 did not publish the size word's fields; its writer put them right above
        // the size.
        let size_bits = w(field::SIZE_BITS)?;
        let old = f.version == 1;
        let or_v1 = |name: &str, v1: u64| if old { Ok(v1) } else { w(name) };
        let l = Layout {
            version: f.version,
            header_size: w(field::HEADER_SIZE)?,
            nframes: w(field::NFRAMES)?,
            off_next: w(field::OFF_NEXT)?,
            off_prev: w(field::OFF_PREV)?,
            off_frames: w(field::OFF_FRAMES)?,
            off_size: w(field::OFF_SIZE)?,
            size_bits,
            off_tid: w(field::OFF_TID)?,
            off_magic: w(field::OFF_MAGIC)?,
            magic_live: w(field::MAGIC_LIVE)? as u32,
            lists: w(field::LISTS)?,
            nlists: w(field::NLISTS)?,
            list_stride: w(field::LIST_STRIDE)?,
            list_off_head: w(field::LIST_OFF_HEAD)?,
            list_off_live_blocks: w(field::LIST_OFF_LIVE_BLOCKS)?,
            list_off_live_bytes: w(field::LIST_OFF_LIVE_BYTES)?,
            list_off_allocs: w(field::LIST_OFF_ALLOCS)?,
            list_off_frees: w(field::LIST_OFF_FREES)?,
            flags_addr: w(field::FLAGS)?,
            size_list_shift: or_v1(field::SIZE_LIST_SHIFT, size_bits)?,
            size_list_bits: or_v1(field::SIZE_LIST_BITS, 8)?,
            size_align_shift: or_v1(field::SIZE_ALIGN_SHIFT, size_bits + 8)?,
            size_align_bits: or_v1(field::SIZE_ALIGN_BITS, 8)?,
            magic_freed: w(field::MAGIC_FREED)? as u32,
            arena_start: w(field::ARENA_START)?,
            arena_end: w(field::ARENA_END)?,
            addr,
            list_off_changes: if old {
                None
            } else {
                Some(w(field::LIST_OFF_CHANGES)?)
            },
            magic_handed: if f.version >= 4 {
                Some(w(field::MAGIC_HANDED)? as u32)
            } else {
                None
            },
            list_off_hand: if f.version >= 4 {
                Some([
                    w(field::LIST_OFF_HANDED_BLOCKS)?,
                    w(field::LIST_OFF_HANDED_BYTES)?,
                    w(field::LIST_OFF_DRAINED_BLOCKS)?,
                    w(field::LIST_OFF_DRAINED_BYTES)?,
                ])
            } else {
                None
            },
            history: HistoryLayout::read(&f).map_err(LayoutError::Invalid)?,
            sealed,
            exit_entry: f.get(field::EXIT_ENTRY),
            inflight: if f.version >= 6 {
                Some((w(field::TLS_OFFSET)?, w(field::INFLIGHT_OFF)?))
            } else {
                None
            },
            magic_key: if f.version >= 7 {
                let mut key = [0u8; 8];
                mem.read(w(field::MAGIC_KEY)?, &mut key)?;
                Some(u64::from_le_bytes(key))
            } else {
                None
            },
        };
        l.check().map_err(LayoutError::Invalid)?;
        Ok(l)
    }

    /// The magic stored in the header at `h`, as the state it names.
    pub fn magic_state(&self, h: u64, stored: u32) -> u32 {
        stored ^ self.magic_key.map_or(0, |k| descriptor::header_tag(h, k))
    }

    /// Whether the words make sense, so a corrupt descriptor cannot send the walk astray.
    fn check(&self) -> Result<(), String> {
        let hs = self.header_size;
        if !(16..=MAX_HEADER).contains(&hs) || !(1..=MAX_FRAMES).contains(&self.nframes) {
            return Err(format!("header of {hs} bytes with {} frames", self.nframes));
        }
        let fields = [
            ("next", self.off_next, 8),
            ("prev", self.off_prev, 8),
            ("frames", self.off_frames, 8 * self.nframes),
            ("size", self.off_size, 8),
            ("tid", self.off_tid, 4),
            ("magic", self.off_magic, 4),
        ];
        if let Some((name, ..)) = fields.iter().find(|(_, off, width)| off + width > hs) {
            return Err(format!("the {name} field overruns the header"));
        }
        if !(8..=56).contains(&self.size_bits)
            || self.size_list_bits == 0
            || self.size_list_shift + self.size_list_bits > 64
        {
            return Err("the size word's fields do not fit".into());
        }
        if !(1..=MAX_LISTS).contains(&self.nlists) || !(8..=MAX_HEADER).contains(&self.list_stride) {
            return Err(format!("{} lists of {} bytes", self.nlists, self.list_stride));
        }
        let list_fields = [
            self.list_off_head,
            self.list_off_live_blocks,
            self.list_off_live_bytes,
            self.list_off_allocs,
            self.list_off_frees,
        ];
        if list_fields
            .iter()
            .chain(self.list_off_changes.iter())
            .chain(self.list_off_hand.iter().flatten())
            .any(|off| off + 8 > self.list_stride)
        {
            return Err("a list field lies beyond the list stride".into());
        }
        if self.lists == 0 || self.flags_addr == 0 {
            // The library file's own copy, before the loader relocated it.
            return Err("its pointers are null (an unrelocated copy from the library file)".into());
        }
        Ok(())
    }

    /// The line to print when the descriptor's checks could not be verified because they were
    /// never written: a process read while it was starting, or checks zeroed by a write.
    pub fn unsealed_warning(&self, lib: &std::path::Path) -> Option<String> {
        (self.sealed == Sealed::Unwritten).then(|| {
            format!(
                "dmem: warning: the layout descriptor of {} holds no checks (read before the library's \
                 start-up wrote them, or overwritten since): its fields are believed unverified",
                crate::cli::show(lib)
            )
        })
    }

    /// The operation in flight on the thread whose thread pointer (`fs_base`) is `tp`, from
    /// the record the library keeps in the thread's area; None when none is, or the descriptor
    /// is older than the record, or the thread's area cannot be read.
    pub fn inflight(&self, mem: &dyn Memory, tp: u64) -> Option<InFlight> {
        let (offset_at, off) = self.inflight?;
        let offset = mem.u64_at(offset_at).ok().filter(|&o| o != 0)?;
        // The area lies below the thread pointer on x86-64: the word holds a negative distance,
        // added modulo 2^64 as the library adds it.
        let at = tp.wrapping_add(offset).wrapping_add(off);
        let mut words = [0u64; carried::WORDS];
        for (i, w) in words.iter_mut().enumerate() {
            *w = mem.u64_at(at + 8 * i as u64).ok()?;
        }
        InFlight::from_words(words)
    }

    /// The descriptor's flag word (`FLAG_RECORDING`...).
    pub fn flags(&self, mem: &dyn Memory) -> Result<u64, ReadError> {
        mem.u64_at(self.flags_addr)
    }

    pub fn list_addr(&self, i: u64) -> u64 {
        self.lists + i * self.list_stride
    }
}

/// Why no descriptor was found in a process.
#[derive(Debug)]
pub enum LocateError {
    /// No mapped object exports `dmem_layout`: the library is not loaded.
    NotLoaded,
    /// An object exports it, but what is at its address is not a descriptor we can read.
    Unreadable { lib: PathBuf, why: String },
    /// The system refused the read.
    Denied(std::io::Error),
}

/// Finds the descriptor through the mapped objects' dynamic symbols (`dmem_layout` is in
/// `.dynsym`, which `strip` leaves): objects whose name mentions dmem are tried first, then
/// every other, so a renamed copy of the library is found too. Returns the descriptor and the
/// library's path.
pub fn locate(mem: &dyn Memory, maps: &Mappings) -> Result<(Layout, PathBuf), LocateError> {
    let mut files = maps.files();
    files.sort_by_key(|p| !p.to_string_lossy().contains("dmem"));
    let mut unreadable = None;
    for path in files {
        // Only a file of the build the target mapped (else the magic finds the descriptor).
        let Some(file) = maps.local_file(path) else {
            continue;
        };
        let Some(sym) = elf::dynamic_symbol(file, "dmem_layout") else {
            continue;
        };
        let Some(bias) = ElfObject::open_as(path, file).ok().and_then(|o| maps.bias(&o)) else {
            continue;
        };
        match Layout::read(mem, bias.wrapping_add(sym)) {
            Ok(l) => return Ok((l, path.to_path_buf())),
            Err(LayoutError::Read(ReadError::Denied(e))) => return Err(LocateError::Denied(e)),
            Err(e) => {
                let why = match e {
                    LayoutError::Invalid(why) => why,
                    LayoutError::Read(_) => "its address is not readable".into(),
                };
                unreadable.get_or_insert(LocateError::Unreadable {
                    lib: path.to_path_buf(),
                    why,
                });
            }
        }
    }
    Err(unreadable.unwrap_or(LocateError::NotLoaded))
}

/// Finds the descriptor by its magic in the memory of a mapped file that looks like the library
/// (its name mentions dmem) or is not there any more: a core from another machine, or a library
/// rebuilt or removed since, has no file to read `.dynsym` from, but its descriptor is still in
/// the core, among the library's data.
pub fn locate_by_magic(mem: &dyn Memory, maps: &Mappings) -> Option<(Layout, PathBuf)> {
    let magic = descriptor::MAGIC.to_le_bytes();
    for path in maps.files() {
        if maps.local_file(path).is_some_and(|p| p.exists()) && !path.to_string_lossy().contains("dmem") {
            continue;
        }
        let mut found = Vec::new();
        for m in maps.of_file(path) {
            mem.pieces(m.start, m.end, &mut |at, bytes| {
                let skip = ((8 - at % 8) % 8) as usize;
                for (i, w) in bytes.get(skip..).unwrap_or(&[]).chunks_exact(8).enumerate() {
                    if w == magic {
                        found.push(at + skip as u64 + 8 * i as u64);
                    }
                }
            });
        }
        if let Some(l) = found.into_iter().find_map(|a| Layout::read(mem, a).ok()) {
            return Some((l, path.to_path_buf()));
        }
    }
    None
}

/// A list's own counters, as the library keeps them under the list's lock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    pub live_blocks: u64,
    pub live_bytes: u64,
    pub allocs: u64,
    pub frees: u64,
}

impl Counters {
    /// The counters of one list from its bytes, `list_stride` of them, with the blocks handed
    /// over but not yet unlinked counted as freed.
    fn of_list(l: &Layout, raw: &[u8]) -> Counters {
        Counters::of_walked_list(l, raw, Counters::handed(l, raw))
    }

    /// The counters of one list whose walk passed `handed` blocks (and bytes) handed over and
    /// not yet unlinked: those count as freed.
    fn of_walked_list(l: &Layout, raw: &[u8], handed: (u64, u64)) -> Counters {
        Counters {
            live_blocks: word_at(raw, l.list_off_live_blocks).saturating_sub(handed.0),
            live_bytes: word_at(raw, l.list_off_live_bytes).saturating_sub(handed.1),
            allocs: word_at(raw, l.list_off_allocs),
            frees: word_at(raw, l.list_off_frees) + handed.0,
        }
    }

    /// Blocks and bytes of a list handed over and not yet unlinked (version 4).
    fn handed(l: &Layout, raw: &[u8]) -> (u64, u64) {
        match l.list_off_hand {
            Some([hb, hy, db, dy]) => (
                word_at(raw, hb).saturating_sub(word_at(raw, db)),
                word_at(raw, hy).saturating_sub(word_at(raw, dy)),
            ),
            None => (0, 0),
        }
    }

    fn add(&mut self, o: &Counters) {
        self.live_blocks += o.live_blocks;
        self.live_bytes += o.live_bytes;
        self.allocs += o.allocs;
        self.frees += o.frees;
    }
}

fn word_at(raw: &[u8], off: u64) -> u64 {
    u64::from_le_bytes(raw[off as usize..off as usize + 8].try_into().unwrap())
}

/// Every list's counters summed, without walking a list: what a metric or a poll for a new peak
/// needs, read in one copy of the list heads. Each list's words are as its lock left them, but
/// the lists are not read at one instant.
pub fn counters(mem: &dyn Memory, l: &Layout) -> Result<Counters, ReadError> {
    let mut raw = vec![0u8; (l.nlists * l.list_stride) as usize];
    mem.read_fresh(l.lists, &mut raw)?;
    let mut sum = Counters::default();
    for list in raw.chunks_exact(l.list_stride as usize) {
        sum.add(&Counters::of_list(l, list));
    }
    Ok(sum)
}

/// One live block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block {
    /// The address the program was given.
    pub addr: u64,
    pub size: u64,
    pub tid: u32,
    /// Index into `Walk::stacks`.
    pub stack: u32,
    /// The list the block was found on, and the one its header names: they differ only in a
    /// corrupt heap, which a strict walk keeps and `dmem verify` reports.
    pub list: u16,
    pub named_list: u16,
    /// log2 of the alignment asked for; 0 for an ordinary block.
    pub align_log2: u8,
}

/// Something wrong found in the lists: which list, which header (or list), and what.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Problem {
    pub list: Option<u64>,
    pub addr: Option<u64>,
    pub text: String,
    /// The header a write must have changed, when one can be named: the readers name the
    /// block in front of it, whose end an overflow runs past.
    pub header: Option<u64>,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.list {
            Some(i) => write!(f, "list {i}: {}", self.text),
            None => write!(f, "lists: {}", self.text),
        }
    }
}

/// How one list was read.
#[derive(Clone, Debug, Default)]
pub struct ListRead {
    /// Where the list is.
    pub addr: u64,
    /// The list's counters as read in the last attempt.
    pub counters: Counters,
    /// Attempts made (1 when the first was whole).
    pub attempts: u32,
    /// Whether an attempt saw the list whole: the same even sequence value before and after,
    /// and every header sound. A version 1 descriptor has no counter, so only the headers
    /// decide.
    pub consistent: bool,
    /// Blocks read in the last attempt.
    pub blocks: u64,
    /// What ended the last attempt early, if something did.
    pub problem: Option<Problem>,
    /// The image was taken while a change of the list was under way (its sequence counter is
    /// odd in a core): its counters may be a block apart from its links.
    pub mid_change: bool,
    /// The sequence value the list held throughout the attempt kept, if it held one.
    pub seq: Option<u64>,
}

/// Everything one walk found.
#[derive(Debug, Default)]
pub struct Walk {
    /// Sorted by address.
    pub blocks: Vec<Block>,
    /// Distinct stacks, each its return addresses innermost first, without trailing zeros.
    pub stacks: Vec<Box<[u64]>>,
    pub lists: Vec<ListRead>,
    /// The sum of the lists' counters (each from the attempt whose blocks were kept).
    pub counters: Counters,
    /// Sound headers whose size cannot be believed (their blocks are left out of `blocks`),
    /// and lists read whole whose blocks do not add up to their counters.
    pub size_problems: Vec<Problem>,
}

impl Walk {
    /// Lists that no attempt saw whole, broken or moving.
    #[cfg(test)]
    pub fn inconsistent(&self) -> usize {
        self.lists.iter().filter(|l| !l.consistent).count()
    }

    pub fn moving(&self) -> usize {
        moving(&self.lists)
    }

    pub fn problems(&self) -> Vec<&Problem> {
        problems(&self.lists, &self.size_problems)
    }

    pub fn live_bytes(&self) -> u64 {
        self.blocks.iter().map(|b| b.size).sum()
    }
}

/// Lists a running process changed throughout the walk: not broken, but never read whole.
pub fn moving(lists: &[ListRead]) -> usize {
    lists
        .iter()
        .filter(|l| !l.consistent && l.problem.is_none())
        .count()
}

/// Everything wrong that a walk met: where lists broke, then sizes not believed.
pub fn problems<'a>(lists: &'a [ListRead], size_problems: &'a [Problem]) -> Vec<&'a Problem> {
    lists
        .iter()
        .filter_map(|l| l.problem.as_ref())
        .chain(size_problems)
        .collect()
}

#[derive(Clone, Copy, Debug)]
pub struct WalkOptions {
    /// Attempts per list before it counts as inconsistent.
    pub attempts: u32,
    /// Memory that cannot change while it is read (a core, a stopped process): one attempt per
    /// list, and a header whose back link does not name the header before it ends the list as
    /// a problem, instead of being taken for a list that moved under the walk.
    pub strict: bool,
}

impl Default for WalkOptions {
    fn default() -> Self {
        WalkOptions {
            attempts: 4,
            strict: false,
        }
    }
}

impl WalkOptions {
    /// For memory that does not change while it is read.
    pub fn still() -> WalkOptions {
        WalkOptions {
            attempts: 1,
            strict: true,
        }
    }
}

/// Fatal: the walk cannot go on at all (permission refused, the process gone).
#[derive(Debug)]
pub struct Denied(pub std::io::Error);

/// Walks every list. Only a refusal from the system stops it; bad headers end one attempt.
pub fn walk(mem: &dyn Memory, layout: &Layout, opts: WalkOptions) -> Result<Walk, Denied> {
    let mut out = Walk::default();
    let mut interned: HashMap<Box<[u64]>, u32, AddrHash> = HashMap::default();
    let (mut scratch, mut best) = (ListScratch::default(), ListScratch::default());
    // A list's own count says how long it is, but a count is a word of the image like any
    // other: no list is longer than the image has room for headers.
    let room = mem.bound() / layout.header_size.max(1) + 1;
    for i in 0..layout.nlists {
        let mut read = ListRead {
            addr: layout.list_addr(i),
            ..ListRead::default()
        };
        best.clear();
        let attempts = if opts.strict { 1 } else { opts.attempts.max(1) };
        for attempt in 1..=attempts {
            read.attempts = attempt;
            scratch.clear();
            let r = read_list(mem, layout, i, &mut scratch, opts.strict, room)?;
            // Of attempts that were not whole, the one that read the most blocks is kept: an
            // attempt is cut short where the list changed under it.
            if r.whole || attempt == 1 || scratch.blocks.len() > best.blocks.len() {
                std::mem::swap(&mut scratch, &mut best);
                read.counters = r.counters;
                read.problem = r.problem;
                read.consistent = r.whole;
                read.mid_change = r.mid_change;
                read.seq = r.seq;
                read.blocks = best.blocks.len() as u64;
            }
            if r.whole {
                break;
            }
        }
        let scratch = &mut best;
        if !read.consistent {
            scratch.drop_repeats(layout.nframes as usize);
        }
        for (b, frames) in scratch
            .blocks
            .iter_mut()
            .zip(scratch.frames.chunks(layout.nframes as usize))
        {
            let used = frames.iter().rposition(|&f| f != 0).map_or(0, |p| p + 1);
            let frames = &frames[..used];
            b.stack = match interned.get(frames) {
                Some(&id) => id,
                None => {
                    let id = out.stacks.len() as u32;
                    out.stacks.push(frames.into());
                    interned.insert(frames.into(), id);
                    id
                }
            };
        }
        out.blocks.extend_from_slice(&scratch.blocks);
        out.counters.add(&read.counters);
        out.lists.push(read);
    }
    check_sizes(mem, layout, &mut out, opts.strict)?;
    Ok(out)
}

/// Leaves out of `w.blocks` (and sorts by address) the blocks whose size cannot be believed
/// (see `analysis::fit`), each a problem naming its header; then, for every list read whole,
/// checks that its blocks add up to its counters, which a size overwritten to a plausible
/// number breaks. A running process's block that does not fit is read again first: one freed
/// and its memory reused under the walk is dropped as moved, not taken for corruption.
fn check_sizes(mem: &dyn Memory, l: &Layout, w: &mut Walk, strict: bool) -> Result<(), Denied> {
    let hs = l.header_size;
    // Each list comes newest block first, and an allocator hands out addresses mostly in
    // order, so the blocks are a few long runs: a merge sort finds them and sorts a million
    // blocks in a few passes, where a quicksort partitions them all over again.
    w.blocks.sort_by_key(|b| b.addr);
    let mut regions = mem.regions();
    regions.sort_unstable_by_key(|m| m.start);
    // Any mapping, readable or not: the walk read every header, and a block may hold a page
    // the program made unreadable (which the scan skips).
    let mut region = |a: usize| crate::analysis::maps::find(&regions, a).map(|m| (m.start, m.end));
    let mut misfits = Vec::new();
    let blocks = &w.blocks;
    fit::check_sizes(
        blocks.len(),
        hs as usize,
        &|i| (blocks[i].addr as usize, blocks[i].size as usize),
        (!regions.is_empty()).then_some(&mut region as &mut dyn FnMut(usize) -> Option<(usize, usize)>),
        &mut |i, why| misfits.push((i, why)),
    );
    let mut dropped = vec![false; if misfits.is_empty() { 0 } else { blocks.len() }];
    let mut misfit_lists = HashSet::new();
    for (i, why) in misfits {
        let b = w.blocks[i];
        if !strict {
            // The block, and the one whose header it runs into, were read from lists walked one
            // after another: only while neither list has changed since its walk are both still
            // there as read. A list that changed may have freed one and reused its memory, so
            // its block is dropped as moved, not taken for corruption.
            let next = match why {
                Misfit::NextHeader(_) => w.blocks[i + 1..]
                    .iter()
                    .position(|n| n.addr != b.addr)
                    .map(|k| i + 1 + k),
                _ => None,
            };
            let mut moved = false;
            for k in std::iter::once(i).chain(next) {
                let list = w.blocks[k].list as usize;
                let now = l
                    .list_off_changes
                    .and_then(|o| mem.u64_fresh(w.lists[list].addr + o).ok());
                if w.lists[list].seq.is_none() || now != w.lists[list].seq {
                    dropped[k] = true;
                    w.lists[list].consistent = false;
                    moved = true;
                }
            }
            if moved {
                continue;
            }
        }
        dropped[i] = true;
        misfit_lists.insert(b.list);
        let h = b.addr - hs;
        let past = match why {
            Misfit::NextHeader(n) => format!("runs past the next block's header at {n:#x}"),
            Misfit::Memory(0) => "lies in no mapped memory".to_owned(),
            Misfit::Memory(end) => format!("runs past the mapped memory around it, which ends at {end:#x}"),
            Misfit::Overflow => "runs past the end of the address space".to_owned(),
        };
        w.size_problems.push(Problem {
            list: Some(b.list as u64),
            addr: Some(h),
            text: format!(
                "header {h:#x} was overwritten: its size, {} bytes, {past}; the block is left out",
                b.size
            ),
            header: Some(h),
        });
    }
    if !dropped.is_empty() {
        let mut k = dropped.iter();
        w.blocks.retain(|_| !*k.next().unwrap_or(&false));
    }
    // A list read whole must add up to its own counters, which the library keeps in step with
    // every link and unlink. (Without sequence counters a running process's list may have
    // moved between the two reads.)
    if !strict && l.list_off_changes.is_none() {
        return Ok(());
    }
    let mut walked = vec![(0u64, 0u64); w.lists.len()];
    for b in &w.blocks {
        let e = &mut walked[b.list as usize];
        e.0 += 1;
        e.1 = e.1.saturating_add(b.size);
    }
    for (i, li) in w.lists.iter().enumerate() {
        let (n, bytes) = walked[i];
        let c = &li.counters;
        if !li.consistent
            || li.problem.is_some()
            || li.mid_change
            || misfit_lists.contains(&(i as u16))
            || (n, bytes) == (c.live_blocks, c.live_bytes)
        {
            continue;
        }
        w.size_problems.push(Problem {
            list: Some(i as u64),
            addr: Some(li.addr),
            text: format!(
                "its blocks add up to {bytes} bytes in {n}, but its counters say {} bytes in {}: a \
                 size or a counter was overwritten, so totals may be off by {} bytes",
                c.live_bytes,
                c.live_blocks,
                bytes.abs_diff(c.live_bytes)
            ),
            header: None,
        });
    }
    Ok(())
}

/// Buffers reused from list to list.
#[derive(Default)]
struct ListScratch {
    blocks: Vec<Block>,
    /// `nframes` words per block, in step with `blocks`.
    frames: Vec<u64>,
    header: Vec<u8>,
}

impl ListScratch {
    fn clear(&mut self) {
        self.blocks.clear();
        self.frames.clear();
    }

    /// Keeps the first of blocks read more than once (by a walk over a list that changed).
    fn drop_repeats(&mut self, nframes: usize) {
        let mut seen: HashSet<u64, AddrHash> = HashSet::default();
        let keep: Vec<bool> = self.blocks.iter().map(|b| seen.insert(b.addr)).collect();
        if keep.iter().all(|&k| k) {
            return;
        }
        let mut k = keep.iter();
        self.blocks.retain(|_| *k.next().unwrap_or(&true));
        let frames = std::mem::take(&mut self.frames);
        self.frames = frames
            .chunks(nframes)
            .zip(&keep)
            .filter(|(_, &k)| k)
            .flat_map(|(f, _)| f.iter().copied())
            .collect();
    }
}

struct ListOutcome {
    counters: Counters,
    whole: bool,
    problem: Option<Problem>,
    mid_change: bool,
    seq: Option<u64>,
}

/// How long a sequence counter may stay odd before an attempt goes ahead anyway: a writer holds
/// it odd only for a few stores under the list's lock, so a handful of re-reads sees it even
/// unless the writer was preempted.
const ODD_SPINS: u32 = 64;

/// One attempt at list `i`.
fn read_list(
    mem: &dyn Memory,
    l: &Layout,
    i: u64,
    s: &mut ListScratch,
    strict: bool,
    room: u64,
) -> Result<ListOutcome, Denied> {
    let fatal = |e: ReadError| match e {
        ReadError::Denied(e) => Some(Denied(e)),
        ReadError::Unmapped => None,
    };
    let base = l.list_addr(i);
    // The counter is read on its own, before anything of the list and again after all of it:
    // the seqlock protocol. Words copied in one read are not ordered among themselves, so the
    // counter must never share a read with what it guards.
    let seq_addr = l.list_off_changes.map(|o| base + o);
    let read_seq = || -> Result<Option<u64>, ReadError> { seq_addr.map(|a| mem.u64_fresh(a)).transpose() };
    let unreadable = |e: ReadError| match fatal(e) {
        Some(d) => Err(d),
        None => Ok(ListOutcome {
            counters: Counters::default(),
            whole: false,
            problem: Some(Problem {
                list: Some(i),
                addr: Some(base),
                text: format!("the list at {base:#x} cannot be read"),
                header: None,
            }),
            mid_change: false,
            seq: None,
        }),
    };
    let mut before = read_seq();
    let mut spins = 0;
    while !strict && matches!(before, Ok(Some(v)) if v & 1 == 1) && spins < ODD_SPINS {
        spins += 1;
        std::thread::yield_now();
        before = read_seq();
    }
    let before = match before {
        Ok(v) => v,
        Err(e) => return unreadable(e),
    };
    // Nothing read before the counter may be used after it.
    mem.forget();
    let mut raw = vec![0u8; l.list_stride as usize];
    if let Err(e) = mem.read(base, &mut raw) {
        return unreadable(e);
    }
    let walked = walk_headers(
        mem,
        l,
        i,
        base + l.list_off_head,
        word_at(&raw, l.list_off_head),
        word_at(&raw, l.list_off_live_blocks),
        s,
        strict,
        room,
    )
    .map_err(Denied)?;
    let after = match read_seq() {
        Ok(v) => v,
        Err(e) => match fatal(e) {
            Some(d) => return Err(d),
            None => None,
        },
    };
    // Memory that cannot change is whole whatever its counter says (a core taken while a
    // thread was half-way through a link shows an odd one).
    let steady = strict
        || match (before, after) {
            (Some(b), Some(a)) => b == a && b & 1 == 0,
            (None, None) => true,
            _ => false,
        };
    // The handed blocks this walk passed over are the ones to count as freed: the hand-over
    // counters may be a block ahead or behind of the list in memory caught mid-hand-over (a
    // core of a process whose threads were running).
    let counters = Counters::of_walked_list(l, &raw, walked.handed);
    Ok(ListOutcome {
        counters,
        whole: steady && walked.problem.is_none() && !walked.moved,
        // What ended a walk of a list that changed meanwhile is the change (a block freed, a
        // link rewritten under the walk), not a list the program broke: that list moved.
        problem: walked.problem.filter(|_| steady),
        mid_change: before.is_some_and(|b| b & 1 == 1),
        seq: before.filter(|_| steady && before == after),
    })
}

/// How one attempt's walk went.
struct HeaderWalk {
    /// What ended it early, if something did.
    problem: Option<Problem>,
    /// A header's back link did not name the header before it: the list changed under the walk
    /// (a block was unlinked next to where it was). The walk goes on, since the header itself
    /// is sound, but the attempt does not count as whole.
    moved: bool,
    /// Handed headers walked past (freed by another thread, still linked), and their bytes.
    handed: (u64, u64),
}

/// Why a header is not believed.
enum Bad {
    Misaligned,
    Unreadable,
    /// The state the magic named, and the word stored.
    Magic(u32, u32),
    /// A sound header that names another list: a walk of a running process met a block that
    /// was freed and allocated again since the link to it was read.
    OtherList(u64),
}

/// The problem a header that is not believed makes, worded as `dmem verify` prints it; `prev`
/// is the header the walk came from (0 for the list's head).
fn bad_link(l: &Layout, i: u64, h: u64, prev: u64, bad: &Bad) -> Problem {
    let from = if prev != 0 {
        format!("next of {prev:#x}")
    } else {
        "the list head".to_owned()
    };
    let came = if prev != 0 {
        format!("{prev:#x}")
    } else {
        "the list head".to_owned()
    };
    let text = match bad {
        Bad::Misaligned => format!("{from} points to misaligned {h:#x}; rest of the list lost"),
        Bad::Unreadable => format!("{from} points to {h:#x}, which is unreadable; rest of the list lost"),
        Bad::Magic(m, _) if *m == l.magic_freed => format!(
            "header {h:#x}, reached from {came}: freed block (magic {m:#x}) still on the list; rest of the list lost"
        ),
        Bad::Magic(_, stored) => {
            format!("header {h:#x}, reached from {came}: bad magic {stored:#010x}; rest of the list lost")
        }
        Bad::OtherList(o) => {
            format!("header {h:#x}, reached from {came}: it names list {o}; rest of the list lost")
        }
    };
    // What a write changed: the header whose `next` leads nowhere, or the one that does not
    // read as a header of this list.
    let header = match bad {
        Bad::Misaligned | Bad::Unreadable => (prev != 0).then_some(prev),
        Bad::Magic(..) | Bad::OtherList(_) => Some(h),
    };
    Problem {
        list: Some(i),
        addr: Some(h),
        text,
        header,
    }
}

/// Follows one list from `head`, appending what it finds to `s`. An `Err` only when the system
/// refused a read.
///
/// A header is believed when it is aligned, readable and carries the live magic. A strict walk
/// (memory that does not change) also wants its back link to name the header it came from; that
/// alone keeps it from looping (to reach a header twice it would have to come twice from its
/// recorded predecessor, and so on back to the head), and the first bad link ends the list as a
/// problem. A running process changes the list while it is walked, so there a header that fails
/// is read again from the process (what was read may be older than the link that led to it), and
/// if it still fails (it was freed under the walk), the walk goes on from a fresh read of the
/// header before it, whose next link now skips the freed one; a bounded number of times per
/// walk. The back link is checked but only marks the walk as moved, and a header that names
/// another list is not believed.
///
/// A walk over a list that did not move cannot meet a header twice (each back link named the
/// header before it); one that moved may (a block freed and linked again at the head while the
/// walk was past it), so a loop ends at the step cap, or sooner when it comes back to the head,
/// and the caller drops repeats. Remembering every header in a set instead would cost a cache
/// miss per block, most of the walk's time on a large heap.
/// Where a walk goes on after the header it was at was freed under it: whatever now follows the
/// header before it, read afresh, or the list's head if it was the first.
fn after_freed(
    mem: &dyn Memory,
    l: &Layout,
    i: u64,
    head_addr: u64,
    s: &mut ListScratch,
    strict: bool,
) -> Result<Option<u64>, std::io::Error> {
    let hs = l.header_size;
    Ok(match s.blocks.last() {
        Some(b) => {
            let p = b.addr - hs;
            mem.forget_range(p, hs);
            read_header(mem, l, i, p, &mut s.header, strict, None)?
                .ok()
                .map(|f| f.next)
        }
        None => mem.u64_fresh(head_addr).ok(),
    })
}

/// The problem of a header whose back link does not name the header the walk came from.
fn prev_mismatch(i: u64, h: u64, came_from: u64, its_prev: u64, seen: bool) -> Problem {
    let came = if came_from != 0 {
        format!("{came_from:#x}")
    } else {
        "the list head".to_owned()
    };
    Problem {
        list: Some(i),
        addr: Some(h),
        text: format!(
            "header {h:#x}, reached from {came}: its prev is {its_prev:#x}, not {came_from:#x}{}; rest of the list lost",
            if seen {
                " (it was walked already: the list loops back)"
            } else {
                ""
            }
        ),
        header: Some(h),
    }
}

#[allow(clippy::too_many_arguments)]
fn walk_headers(
    mem: &dyn Memory,
    l: &Layout,
    i: u64,
    head_addr: u64,
    head: u64,
    counted: u64,
    s: &mut ListScratch,
    strict: bool,
    room: u64,
) -> Result<HeaderWalk, std::io::Error> {
    // `room`: as many headers as the image can hold, whatever the list's count says.
    let cap = counted
        .min(room)
        .saturating_add(64 + counted.min(room) / 8)
        .min(1 << 32);
    let hs = l.header_size;
    let mut walk = HeaderWalk {
        problem: None,
        moved: false,
        handed: (0, 0),
    };
    s.header.resize(hs as usize, 0);
    let (mut h, mut prev, mut steps, mut recoveries) = (head, 0u64, 0u64, 0u32);
    while h != 0 {
        if steps >= cap {
            walk.problem = Some(Problem {
                list: Some(i),
                addr: Some(h),
                text: format!(
                    "list goes on past {cap} blocks though its live count is {counted}; stopped there"
                ),
                header: None,
            });
            break;
        }
        let mut fields = read_header(mem, l, i, h, &mut s.header, strict, Some(prev))?;
        if fields.is_err() && !strict && recoveries < MAX_RECOVERIES {
            recoveries += 1;
            walk.moved = true;
            mem.forget_range(h, hs);
            fields = read_header(mem, l, i, h, &mut s.header, strict, Some(prev))?;
            if fields.is_err() {
                if let Some(next) = after_freed(mem, l, i, head_addr, s, strict)?.filter(|&n| n != h) {
                    h = next;
                    continue;
                }
            }
        }
        let f = match fields {
            Ok(f) => f,
            Err(bad) => {
                walk.problem = Some(bad_link(l, i, h, prev, &bad));
                break;
            }
        };
        // The head's back link is whatever the last link put in front of it since the head
        // was read; further on it must name the header we came from.
        if (strict || prev != 0) && f.prev != prev {
            if strict {
                let seen = s.blocks.iter().any(|b| b.addr == h + hs);
                walk.problem = Some(prev_mismatch(i, h, prev, f.prev, seen));
                break;
            }
            walk.moved = true;
        }
        if h == head && steps > 0 {
            walk.problem = Some(Problem {
                list: Some(i),
                addr: Some(h),
                text: format!("comes back to header {h:#x}"),
                header: None,
            });
            break;
        }
        if f.handed {
            walk.handed.0 += 1;
            walk.handed.1 += f.size;
            prev = h;
            h = f.next;
            steps += 1;
            continue;
        }
        s.blocks.push(Block {
            addr: h + hs,
            size: f.size,
            tid: f.tid,
            stack: 0,
            list: i as u16,
            named_list: f.list as u16,
            align_log2: f.align_log2,
        });
        let hd = &s.header;
        let word = |off: u64| u64::from_le_bytes(hd[off as usize..off as usize + 8].try_into().unwrap());
        s.frames
            .extend((0..l.nframes).map(|k| word(l.off_frames + 8 * k)));
        prev = h;
        h = f.next;
        steps += 1;
    }
    Ok(walk)
}

/// Headers read again from the process, per walk, when one read from the cache does not hold
/// up: enough for the frees a busy process makes during a walk, and a bound on the extra reads.
const MAX_RECOVERIES: u32 = 4096;

/// A header's fields, once it has been found sound.
struct HeaderFields {
    /// Freed by another thread and not yet unlinked: walked past, not a block.
    handed: bool,
    next: u64,
    prev: u64,
    size: u64,
    tid: u32,
    list: u64,
    align_log2: u8,
}

/// Reads the header at `h` into `buf` and checks it: aligned, readable, live, and (unless
/// `strict`, which reports it later instead) on list `i`. The inner `Err` says why it is not
/// believed. A header that names another list but whose back link is `came_from` is linked
/// right here whatever its size word says (a write changed that word, which `verify` reports
/// and the size check judges), so it is believed as a strict walk believes it: the same answer
/// in a core and in a running process.
fn read_header(
    mem: &dyn Memory,
    l: &Layout,
    i: u64,
    h: u64,
    buf: &mut [u8],
    strict: bool,
    came_from: Option<u64>,
) -> Result<Result<HeaderFields, Bad>, std::io::Error> {
    // Headers are at least 8-aligned (the user pointer is 16-aligned, the header 112 bytes).
    if !h.is_multiple_of(8) {
        return Ok(Err(Bad::Misaligned));
    }
    match mem.read(h, buf) {
        Ok(()) => {}
        Err(ReadError::Unmapped) => return Ok(Err(Bad::Unreadable)),
        Err(ReadError::Denied(e)) => return Err(e),
    }
    let u64_at = |off: u64| u64::from_le_bytes(buf[off as usize..off as usize + 8].try_into().unwrap());
    let u32_at = |off: u64| u32::from_le_bytes(buf[off as usize..off as usize + 4].try_into().unwrap());
    let stored = u32_at(l.off_magic);
    let magic = l.magic_state(h, stored);
    let handed = Some(magic) == l.magic_handed;
    if magic != l.magic_live && !handed {
        return Ok(Err(Bad::Magic(magic, stored)));
    }
    let word = u64_at(l.off_size);
    let field = |shift: u64, bits: u64| {
        let mask = if bits >= 64 { u64::MAX } else { (1u64 << bits) - 1 };
        (word >> shift) & mask
    };
    let list = field(l.size_list_shift, l.size_list_bits);
    if list != i && !strict && came_from != Some(u64_at(l.off_prev)) {
        return Ok(Err(Bad::OtherList(list)));
    }
    Ok(Ok(HeaderFields {
        handed,
        next: u64_at(l.off_next),
        prev: u64_at(l.off_prev),
        size: word & ((1u64 << l.size_bits) - 1),
        tid: u32_at(l.off_tid),
        list,
        align_log2: field(l.size_align_shift, l.size_align_bits) as u8,
    }))
}

#[cfg(test)]
pub mod tests {
    use super::*;
    use std::cell::RefCell;

    type OnRead = Box<dyn FnMut(&FakeMemory)>;

    /// A fake address space: little-endian words at addresses, anything else unmapped.
    #[derive(Default)]
    pub struct FakeMemory {
        pub bytes: RefCell<HashMap<u64, u8>>,
        /// Called before each read: lets a test change memory under the walker.
        pub on_read: RefCell<Option<OnRead>>,
    }

    impl FakeMemory {
        pub fn put(&self, addr: u64, data: &[u8]) {
            let mut b = self.bytes.borrow_mut();
            for (i, v) in data.iter().enumerate() {
                b.insert(addr + i as u64, *v);
            }
        }
        pub fn put_u64(&self, addr: u64, v: u64) {
            self.put(addr, &v.to_le_bytes());
        }
    }

    impl Memory for FakeMemory {
        fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), ReadError> {
            if let Some(f) = self.on_read.borrow_mut().as_mut() {
                f(self);
            }
            let b = self.bytes.borrow();
            for (i, v) in buf.iter_mut().enumerate() {
                *v = *b.get(&(addr + i as u64)).ok_or(ReadError::Unmapped)?;
            }
            Ok(())
        }
    }

    pub const DESC: u64 = 0x1000;
    pub const LISTS: u64 = 0x2000;
    pub const FLAGS: u64 = 0x3000;
    pub const CHECKS: u64 = 0x4000;
    const STRIDE: u64 = 128;
    const NLISTS: u64 = 2;
    /// The word that holds the offset from a thread's pointer to its area (0: none found yet).
    const TLS_OFFSET: u64 = 0x4f00;
    /// The word holding the process's secret, and the secret: headers' magics are sealed.
    const KEY_AT: u64 = 0x4f08;
    const KEY: u64 = 0x8000_5eed_1234_abcd;

    /// The magic the library stores for `state` in the header at `h`.
    pub fn sealed(h: u64, state: u32) -> [u8; 4] {
        (state ^ descriptor::header_tag(h, KEY)).to_le_bytes()
    }

    /// The fields of a descriptor of this crate's own layout, two lists.
    const FAKE_FIELDS: [(&str, u64); 37] = [
        (field::HEADER_SIZE, 112),
        (field::NFRAMES, 10),
        (field::OFF_NEXT, 0),
        (field::OFF_PREV, 8),
        (field::OFF_FRAMES, 16),
        (field::OFF_SIZE, 96),
        (field::SIZE_BITS, 48),
        (field::OFF_TID, 104),
        (field::OFF_MAGIC, 108),
        (field::MAGIC_LIVE, 0xd3e3_a11c),
        (field::MAGIC_FREED, 0xd3e3_f4ee),
        (field::LISTS, LISTS),
        (field::NLISTS, NLISTS),
        (field::LIST_STRIDE, STRIDE),
        (field::LIST_OFF_HEAD, 0),
        (field::LIST_OFF_LIVE_BLOCKS, 8),
        (field::LIST_OFF_LIVE_BYTES, 16),
        (field::LIST_OFF_ALLOCS, 24),
        (field::LIST_OFF_FREES, 32),
        (field::LIST_OFF_CHANGES, 40),
        (field::ARENA_START, 0),
        (field::ARENA_END, 0),
        (field::FLAGS, FLAGS),
        (field::SIZE_LIST_SHIFT, 48),
        (field::SIZE_LIST_BITS, 8),
        (field::SIZE_ALIGN_SHIFT, 56),
        (field::SIZE_ALIGN_BITS, 8),
        (field::MAGIC_HANDED, 0xd3e3_f4ed),
        (field::LIST_OFF_OWNER, 56),
        (field::LIST_OFF_HANDED_BLOCKS, 72),
        (field::LIST_OFF_HANDED_BYTES, 80),
        (field::LIST_OFF_DRAINED_BLOCKS, 88),
        (field::LIST_OFF_DRAINED_BYTES, 96),
        (field::CHECKS, CHECKS),
        (field::TLS_OFFSET, TLS_OFFSET),
        (field::INFLIGHT_OFF, 64),
        (field::MAGIC_KEY, KEY_AT),
    ];

    /// A process with the descriptor at `DESC` and two empty lists.
    pub fn fake_process() -> FakeMemory {
        let m = FakeMemory::default();
        let (desc, checks) = descriptor::encode(&FAKE_FIELDS);
        m.put(DESC, &desc);
        m.put(CHECKS, &checks);
        m.put_u64(FLAGS, FLAG_RECORDING);
        m.put_u64(TLS_OFFSET, 0);
        m.put_u64(KEY_AT, KEY);
        for i in 0..NLISTS {
            m.put(LISTS + i * STRIDE, &[0u8; STRIDE as usize]);
        }
        m
    }

    /// Puts a header at `h` on list `list` (at its head), as the library's `link` does.
    pub fn link(m: &FakeMemory, list: u64, h: u64, size: u64, tid: u32, frames: &[u64]) {
        let base = LISTS + list * STRIDE;
        let head = m.u64_at(base).unwrap();
        let mut hdr = [0u8; 112];
        hdr[0..8].copy_from_slice(&head.to_le_bytes());
        for (k, f) in frames.iter().enumerate() {
            hdr[16 + 8 * k..24 + 8 * k].copy_from_slice(&f.to_le_bytes());
        }
        hdr[96..104].copy_from_slice(&(size | (list << 48)).to_le_bytes());
        hdr[104..108].copy_from_slice(&tid.to_le_bytes());
        hdr[108..112].copy_from_slice(&sealed(h, 0xd3e3_a11c));
        m.put(h, &hdr);
        if head != 0 {
            m.put_u64(head + 8, h);
        }
        m.put_u64(base, h);
        let w = |off: u64| m.u64_at(base + off).unwrap();
        m.put_u64(base + 8, w(8) + 1);
        m.put_u64(base + 16, w(16) + size);
        m.put_u64(base + 24, w(24) + 1);
        m.put_u64(base + 40, w(40) + 2);
    }

    #[test]
    fn walks_every_list_and_groups_stacks() {
        let m = fake_process();
        link(&m, 0, 0x10000, 100, 7, &[0xa, 0xb]);
        link(&m, 0, 0x10400, 200, 7, &[0xa, 0xb]);
        link(&m, 1, 0x10800, 300, 8, &[0xc]);
        let l = Layout::read(&m, DESC).unwrap();
        assert_eq!(l.version, descriptor::VERSION);
        assert_eq!(l.flags(&m).unwrap(), FLAG_RECORDING);
        let w = walk(&m, &l, WalkOptions::default()).unwrap();
        assert_eq!(w.inconsistent(), 0);
        assert_eq!(w.blocks.len(), 3);
        assert_eq!(w.live_bytes(), 600);
        assert_eq!(w.counters.live_blocks, 3);
        assert_eq!(w.counters.live_bytes, 600);
        assert_eq!(w.stacks.len(), 2, "two distinct stacks: {:?}", w.stacks);
        let b = w.blocks.iter().find(|b| b.addr == 0x10800 + 112).unwrap();
        assert_eq!(
            (b.size, b.tid, &w.stacks[b.stack as usize][..]),
            (300, 8, &[0xc][..])
        );
    }

    #[test]
    fn a_block_handed_to_its_owner_is_walked_past_and_counted_as_freed() {
        let m = fake_process();
        link(&m, 0, 0x10000, 100, 7, &[0xa]);
        link(&m, 0, 0x10400, 200, 8, &[0xb]);
        link(&m, 0, 0x10800, 300, 7, &[0xa]);
        // Another thread freed the middle block: handed, still linked, counted as live by the
        // owner's counters, and once in the handed ones.
        m.put(0x10400 + 108, &sealed(0x10400, 0xd3e3_f4ed));
        let base = LISTS;
        m.put_u64(base + 72, 1);
        m.put_u64(base + 80, 200);
        let l = Layout::read(&m, DESC).unwrap();
        for opts in [WalkOptions::default(), WalkOptions::still()] {
            let w = walk(&m, &l, opts).unwrap();
            assert_eq!(w.inconsistent(), 0, "{:?}", w.lists[0]);
            let mut addrs: Vec<_> = w.blocks.iter().map(|b| b.addr - 112).collect();
            addrs.sort_unstable();
            assert_eq!(addrs, [0x10000, 0x10800]);
            assert_eq!((w.counters.live_blocks, w.counters.live_bytes), (2, 400));
            assert_eq!(w.counters.allocs - w.counters.frees, 2);
        }
        // Once unlinked by the owner it is drained: the counters agree with the walk again.
        m.put_u64(base + 88, 1);
        m.put_u64(base + 96, 200);
        let c = counters(&m, &l).unwrap();
        assert_eq!((c.live_blocks, c.live_bytes), (3, 600));
    }

    #[test]
    fn a_loop_or_a_bad_header_ends_the_attempt_and_is_reported() {
        let m = fake_process();
        link(&m, 0, 0x10000, 100, 7, &[0xa]);
        link(&m, 0, 0x10400, 200, 7, &[0xa]);
        // Make the tail point back at the head: a torn read could show this.
        m.put_u64(0x10000, 0x10400);
        let l = Layout::read(&m, DESC).unwrap();
        let w = walk(
            &m,
            &l,
            WalkOptions {
                attempts: 3,
                strict: false,
            },
        )
        .unwrap();
        assert_eq!(w.inconsistent(), 1);
        assert_eq!(w.lists[0].attempts, 3);
        assert!(
            w.lists[0].problem.as_ref().unwrap().text.contains("comes back"),
            "{:?}",
            w.lists[0]
        );
        assert_eq!(
            w.blocks.len(),
            2,
            "the blocks before the bad link are kept, once each"
        );
        // A back link that names another header (the one before was unlinked while the walk
        // was past it) does not stop the walk, but the list is not whole.
        m.put_u64(0x10000, 0);
        m.put_u64(0x10000 + 8, 0x20000);
        let w = walk(
            &m,
            &l,
            WalkOptions {
                attempts: 2,
                strict: false,
            },
        )
        .unwrap();
        assert_eq!(
            (w.blocks.len(), w.inconsistent(), w.lists[0].problem.as_ref()),
            (2, 1, None)
        );
        // A header whose magic is gone (freed under us) ends the walk there.
        m.put_u64(0x10000, 0);
        m.put(0x10000 + 108, &sealed(0x10000, 0xd3e3_f4ee));
        let w = walk(&m, &l, WalkOptions::default()).unwrap();
        let why = &w.lists[0].problem.as_ref().unwrap().text;
        assert!(
            why.contains("freed block (magic 0xd3e3f4ee) still on the list"),
            "{why}"
        );
        assert_eq!(w.blocks.len(), 1);
    }

    /// A block freed between the read of the link to it and the read of it: the walk goes on
    /// from the header before it, whose link now skips it.
    #[test]
    fn a_block_freed_under_the_walk_is_stepped_over() {
        let m = fake_process();
        let (a, b, c) = (0x10000, 0x10400, 0x10800);
        link(&m, 0, c, 300, 7, &[0xc]);
        link(&m, 0, b, 200, 7, &[0xb]);
        link(&m, 0, a, 100, 7, &[0xa]);
        let l = Layout::read(&m, DESC).unwrap();
        // Reads: the sequence counter, the list, header a, then header b: free b just before.
        let reads = RefCell::new(0);
        *m.on_read.borrow_mut() = Some(Box::new(move |m: &FakeMemory| {
            *reads.borrow_mut() += 1;
            if *reads.borrow() == 4 {
                m.put_u64(a, c);
                m.put_u64(c + 8, a);
                m.put(b + 108, &sealed(b, 0xd3e3_f4ee));
                let seq = m.bytes.borrow()[&(LISTS + 40)];
                m.put_u64(LISTS + 40, seq as u64 + 2);
            }
        }));
        let w = walk(
            &m,
            &l,
            WalkOptions {
                attempts: 1,
                strict: false,
            },
        )
        .unwrap();
        let sizes: Vec<u64> = w.blocks.iter().map(|b| b.size).collect();
        assert_eq!(sizes, [100, 300], "{:?}", w.lists[0]);
        assert!(!w.lists[0].consistent, "the list moved");
        assert_eq!(w.lists[0].problem, None);
    }

    #[test]
    fn a_moving_counter_is_read_again_and_an_odd_one_never_counts() {
        let m = fake_process();
        link(&m, 0, 0x10000, 100, 7, &[0xa]);
        let l = Layout::read(&m, DESC).unwrap();
        // The counter moves on every read: no attempt can see the list whole.
        let n = RefCell::new(0u64);
        *m.on_read.borrow_mut() = Some(Box::new(move |m: &FakeMemory| {
            let mut n = n.borrow_mut();
            *n += 2;
            m.bytes.borrow_mut().insert(LISTS + 40, *n as u8);
        }));
        let w = walk(
            &m,
            &l,
            WalkOptions {
                attempts: 4,
                strict: false,
            },
        )
        .unwrap();
        assert_eq!((w.lists[0].consistent, w.lists[0].attempts), (false, 4));
        assert!(w.lists[1].consistent, "the other list did not change");
        *m.on_read.borrow_mut() = None;
        // Stuck odd: a writer that never finished. Counted, never trusted.
        m.put_u64(LISTS + 40, 5);
        let w = walk(
            &m,
            &l,
            WalkOptions {
                attempts: 2,
                strict: false,
            },
        )
        .unwrap();
        assert_eq!(w.inconsistent(), 1);
        m.put_u64(LISTS + 40, 6);
        let w = walk(
            &m,
            &l,
            WalkOptions {
                attempts: 2,
                strict: false,
            },
        )
        .unwrap();
        assert_eq!((w.inconsistent(), w.lists[0].attempts), (0, 1));
    }

    #[test]
    fn a_version_2_descriptor_reads_as_its_fields_in_order() {
        let m = fake_process();
        let now = Layout::read(&m, DESC).unwrap();
        let words = descriptor::OLD_ORDER.map(|name| FAKE_FIELDS.iter().find(|(n, _)| *n == name).unwrap().1);
        let old = 0x8000;
        m.put_u64(old, descriptor::MAGIC);
        m.put_u64(old + 8, 2);
        for (i, w) in words.iter().enumerate() {
            m.put_u64(old + 16 + 8 * i as u64, *w);
        }
        let v2 = Layout::read(&m, old).unwrap();
        assert_eq!(v2.version, 2);
        assert_eq!(
            format!(
                "{:?}",
                Layout {
                    addr: 0,
                    version: 0,
                    ..v2
                }
            ),
            format!(
                "{:?}",
                // Version 2 had no handed blocks.
                Layout {
                    addr: 0,
                    version: 0,
                    magic_handed: None,
                    list_off_hand: None,
                    history: None,
                    sealed: Sealed::Older,
                    inflight: None,
                    magic_key: None,
                    ..now
                }
            )
        );
    }

    #[test]
    fn a_corrupt_descriptor_is_refused() {
        let m = fake_process();
        // The value of the thirteenth entry, `nlists`.
        let nlists = DESC + (descriptor::HEAD_LEN + 12 * descriptor::ENTRY_LEN + descriptor::NAME_LEN) as u64;
        let refused = |m: &FakeMemory| match Layout::read(m, DESC) {
            Err(LayoutError::Invalid(why)) => why,
            other => panic!("a changed descriptor was not refused: {other:?}"),
        };
        // Its checks name the field that changed, even to a number that would pass for true.
        for value in [1 << 40, 3] {
            m.put_u64(nlists, value);
            let why = refused(&m);
            assert!(why.contains("field nlists (field 13, holding"), "{why}");
        }
        m.put_u64(nlists, NLISTS);
        m.put(nlists - descriptor::NAME_LEN as u64, b"nlistz");
        assert!(refused(&m).contains("field nlistz"), "{}", refused(&m));
        // Checks never written (a process read as it starts) are said to be missing, and the
        // fields are still checked one by one: a field renamed is a field missing.
        m.put(CHECKS, &[0u8; 8 * (FAKE_FIELDS.len() + 1)]);
        assert_eq!(refused(&m), "the descriptor has no field nlists");
        m.put(nlists - descriptor::NAME_LEN as u64, b"nlists");
        assert_eq!(Layout::read(&m, DESC).unwrap().sealed, Sealed::Unwritten);
        m.put_u64(DESC + 8, 9);
        let Err(LayoutError::Invalid(why)) = Layout::read(&m, DESC) else {
            panic!("version 9 accepted")
        };
        assert!(why.contains("version 9"), "{why}");
    }

    /// A size that cannot be true (it runs past the next block's header) leaves its block out,
    /// named by its header; one that could be true but does not add up to its list's counters
    /// is said of the list. In a core and in a running process alike.
    #[test]
    fn a_size_not_believed_is_left_out_and_one_that_does_not_add_up_is_said() {
        let m = fake_process();
        link(&m, 0, 0x10000, 100, 7, &[0xa]);
        link(&m, 0, 0x10400, 200, 7, &[0xa]);
        link(&m, 1, 0x10800, 300, 8, &[0xc]);
        let l = Layout::read(&m, DESC).unwrap();
        m.put_u64(0x10000 + 96, 100_000);
        for opts in [WalkOptions::still(), WalkOptions::default()] {
            let w = walk(&m, &l, opts).unwrap();
            let addrs: Vec<u64> = w.blocks.iter().map(|b| b.addr - 112).collect();
            assert_eq!(addrs, [0x10400, 0x10800], "sorted, the broken one left out");
            let p: Vec<&Problem> = w.problems();
            assert_eq!(p.len(), 1, "{p:?}");
            assert_eq!((p[0].list, p[0].header), (Some(0), Some(0x10000)));
            assert!(
                p[0].text
                    .contains("its size, 100000 bytes, runs past the next block's header at 0x10400"),
                "{}",
                p[0].text
            );
            assert_eq!(w.moving(), 0, "corruption is no list moving");
        }
        m.put_u64(0x10000 + 96, 100);
        m.put_u64(0x10800 + 96, 250 | 1 << 48);
        let w = walk(&m, &l, WalkOptions::still()).unwrap();
        assert_eq!(w.blocks.len(), 3);
        let p = w.problems();
        assert_eq!((p.len(), p[0].list, p[0].header), (1, Some(1), None));
        assert!(
            p[0].text
                .contains("its blocks add up to 250 bytes in 1, but its counters say 300 bytes in 1"),
            "{}",
            p[0].text
        );
    }

    /// Any one byte of the descriptor or of its checks changed, to any of a few values, and
    /// the descriptor is refused: never read as if nothing happened.
    #[test]
    fn no_changed_byte_of_a_descriptor_goes_unnoticed() {
        let (desc, checks) = descriptor::encode(&FAKE_FIELDS);
        let whole = fake_process();
        assert_eq!(Layout::read(&whole, DESC).unwrap().sealed, Sealed::Verified);
        for (base, bytes) in [(DESC, &desc), (CHECKS, &checks)] {
            for i in 0..bytes.len() as u64 {
                for flip in [0x01u8, 0x80, 0xff] {
                    let m = fake_process();
                    m.put(base + i, &[bytes[i as usize] ^ flip]);
                    assert!(
                        Layout::read(&m, DESC).is_err(),
                        "byte {i} of the {} xor {flip:#x} went unnoticed",
                        if base == DESC { "descriptor" } else { "checks" }
                    );
                }
            }
        }
    }
}
