//! The layout descriptor the library exports, read and checked from any `Memory`; found
//! through the mapped objects' dynamic symbols or by its magic; and the lists' own counters,
//! summed without a walk.

use crate::analysis::carried::{self, InFlight};
use crate::analysis::descriptor::{self, field, Fields, Sealed};
use crate::source::elf::{self, ElfObject};
use crate::source::history::HistoryLayout;
use crate::source::mappings::Mappings;
use crate::source::memory::{Memory, ReadError};
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
                crate::analysis::escape::show(lib)
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
    pub(super) fn of_walked_list(l: &Layout, raw: &[u8], handed: (u64, u64)) -> Counters {
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

    pub(super) fn add(&mut self, o: &Counters) {
        self.live_blocks += o.live_blocks;
        self.live_bytes += o.live_bytes;
        self.allocs += o.allocs;
        self.frees += o.frees;
    }
}

pub(super) fn word_at(raw: &[u8], off: u64) -> u64 {
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
