//! The layout descriptor's format: the one definition the library writes (`layout.rs`) and
//! every reader looks up (the launcher's walk, the tests).
//!
//! From version 3 the descriptor describes itself: three words (magic, version, the number of
//! fields) and then one entry per field, a NUL-padded name of `NAME_LEN` bytes and a 64-bit
//! value, an offset, a width, a constant or an address. A reader asks for fields by name, so a
//! field added later costs old readers nothing; `VERSION` goes up only when the meaning of an
//! existing field changes, and a reader refuses a version it does not know in one line.
//! Versions 1 and 2 were bare words in a fixed order, `OLD_ORDER`, which a reader turns into
//! the same named fields.
//!
//! From version 5 the descriptor checks itself: its field `checks` holds the address of words
//! the library writes once at start-up (`layout::seal`), a check of the head (version and
//! count) and one of each entry (its index, name and value, addresses as the loader relocated
//! them). A reader recomputes them (`verify`) before it believes a field, so a descriptor a
//! wild write or a tampered core changed is one error naming the field, never numbers taken
//! for true. The checks are separate from the descriptor, which the loader makes read-only
//! after relocating it.

/// "DMEMLAYT" read as a little-endian word.
pub const MAGIC: u64 = u64::from_le_bytes(*b"DMEMLAYT");
/// The version the library writes. Version 4: a block on a list may be handed (freed by another
/// thread, not yet unlinked by the list's owner), and the live counters include such blocks.
/// Version 5: the descriptor carries its checks (`field::CHECKS`), and a reader refuses one
/// without them, so a descriptor whose version byte was overwritten cannot pass for an older
/// one that had none.
/// Version 6: each thread records the operation in flight on it (`field::TLS_OFFSET`,
/// `field::INFLIGHT_OFF`, `carried`), and an allocation in progress is told from that record
/// alone; a reader of an older descriptor has no record to read and spares no block for it.
/// Version 7: a header's magic is stored sealed, xored with `header_tag` of the header's address
/// and the process's secret (`field::MAGIC_KEY`); the magic fields name what a reader finds once
/// it has taken the tag off.
pub const VERSION: u64 = 7;
/// Bytes of a field's name, NUL included.
pub const NAME_LEN: usize = 24;
/// Bytes before the first entry: magic, version and count.
pub const HEAD_LEN: usize = 24;
/// Bytes of one entry: the name, then the value.
pub const ENTRY_LEN: usize = NAME_LEN + 8;
/// Beyond this many fields a descriptor is corrupt, whatever it says.
const MAX_FIELDS: u64 = 256;

/// The fields' names, shared by the writer and the readers so that a misspelt one is a
/// compile error, not a field that is silently absent.
pub mod field {
    /// Bytes in a header, before the user's block.
    pub const HEADER_SIZE: &str = "header_size";
    /// Return addresses a header holds.
    pub const NFRAMES: &str = "nframes";
    /// Offsets in a header of its list links, frames, size word, thread id and magic.
    pub const OFF_NEXT: &str = "off_next";
    pub const OFF_PREV: &str = "off_prev";
    pub const OFF_FRAMES: &str = "off_frames";
    pub const OFF_SIZE: &str = "off_size";
    pub const OFF_TID: &str = "off_tid";
    pub const OFF_MAGIC: &str = "off_magic";
    /// Low bits of the size word that hold the block's size.
    pub const SIZE_BITS: &str = "size_bits";
    /// The 32-bit magic of a live header, and of one freed.
    pub const MAGIC_LIVE: &str = "magic_live";
    pub const MAGIC_FREED: &str = "magic_freed";
    /// Address of the first list, their number and the bytes from one to the next.
    pub const LISTS: &str = "lists";
    pub const NLISTS: &str = "nlists";
    pub const LIST_STRIDE: &str = "list_stride";
    /// Offsets in a list of its head and its counters.
    pub const LIST_OFF_HEAD: &str = "list_off_head";
    pub const LIST_OFF_LIVE_BLOCKS: &str = "list_off_live_blocks";
    pub const LIST_OFF_LIVE_BYTES: &str = "list_off_live_bytes";
    pub const LIST_OFF_ALLOCS: &str = "list_off_allocs";
    pub const LIST_OFF_FREES: &str = "list_off_frees";
    /// The bounds of the bootstrap arena that serves allocations made before `dlsym` works.
    pub const ARENA_START: &str = "arena_start";
    pub const ARENA_END: &str = "arena_end";
    /// Address of the word of flags describing how the process ran.
    pub const FLAGS: &str = "flags";
    /// The size word's list index and alignment fields: `(word >> shift) & ((1 << bits) - 1)`.
    pub const SIZE_LIST_SHIFT: &str = "size_list_shift";
    pub const SIZE_LIST_BITS: &str = "size_list_bits";
    pub const SIZE_ALIGN_SHIFT: &str = "size_align_shift";
    pub const SIZE_ALIGN_BITS: &str = "size_align_bits";
    /// Offset in a list of its sequence counter, odd while a link or unlink is under way.
    pub const LIST_OFF_CHANGES: &str = "list_off_changes";
    /// From version 4: the magic of a header on a list whose block another thread freed; it
    /// counts as freed.
    pub const MAGIC_HANDED: &str = "magic_handed";
    /// Offsets in a list of the owning thread's id (0 for none) and of the counters of blocks
    /// handed over ever and unlinked since, with their bytes: `handed - drained` of the live
    /// counters are freed blocks.
    pub const LIST_OFF_OWNER: &str = "list_off_owner";
    pub const LIST_OFF_HANDED_BLOCKS: &str = "list_off_handed_blocks";
    pub const LIST_OFF_HANDED_BYTES: &str = "list_off_handed_bytes";
    pub const LIST_OFF_DRAINED_BLOCKS: &str = "list_off_drained_blocks";
    pub const LIST_OFF_DRAINED_BYTES: &str = "list_off_drained_bytes";
    /// The free history (`history=N`): the address of an array of `history_nrings` pointers
    /// to rings (null where none was mapped); in a ring, the offsets of the count of events ever
    /// written, of the capacity, and of the first event; an event's size and its fields'
    /// offsets. Slot `k % capacity` holds event `k`, believed when its `seq` is `k + 1`.
    pub const HISTORY_RINGS: &str = "history_rings";
    pub const HISTORY_NRINGS: &str = "history_nrings";
    pub const RING_OFF_COUNT: &str = "ring_off_count";
    pub const RING_OFF_CAPACITY: &str = "ring_off_capacity";
    pub const RING_OFF_EVENTS: &str = "ring_off_events";
    pub const EVENT_SIZE: &str = "event_size";
    pub const EVENT_OFF_SEQ: &str = "event_off_seq";
    pub const EVENT_OFF_ADDR: &str = "event_off_addr";
    pub const EVENT_OFF_SIZE: &str = "event_off_size";
    pub const EVENT_OFF_TIME: &str = "event_off_time";
    pub const EVENT_OFF_TID: &str = "event_off_tid";
    pub const EVENT_OFF_ALLOC_TID: &str = "event_off_alloc_tid";
    pub const EVENT_OFF_KIND: &str = "event_off_kind";
    pub const EVENT_OFF_ALLOC_FRAMES: &str = "event_off_alloc_frames";
    pub const EVENT_OFF_FREE_FRAMES: &str = "event_off_free_frames";
    /// An event's kinds.
    pub const EVENT_KIND_FREE: &str = "event_kind_free";
    pub const EVENT_KIND_ALLOC: &str = "event_kind_alloc";
    /// From version 5: the address of the checks written at start-up, one word for the head
    /// and one per entry (see `verify`).
    pub const CHECKS: &str = "checks";
    /// Where the program entered the exit path: the address of `2 + EXIT_ENTRY_REGS` words, the
    /// id of the thread that did (0 until one has), the program's stack pointer there, and its
    /// callee-saved registers as it left them (x86-64: rbx, rbp, r12, r13, r14, r15). A reader
    /// scans that thread's stack from that stack pointer, with those registers as roots instead
    /// of the ones the thread holds: what lies below, and what its registers hold at the end
    /// (in a core of `abort-shutdown`, at the abort), is libdmem's and the exit path's.
    pub const EXIT_ENTRY: &str = "exit_entry";
    /// The per-stack counts: the address of an array of `stack_ntables` pointers to tables (null
    /// where none was mapped); in a table, the offsets of its capacity (in entries), of the
    /// count of entries handed out (entries past it are empty; it may pass the capacity), of
    /// the entry that counts the stacks it had no room for, and of the first entry; an entry's size
    /// and its fields' offsets: its key (odd once the entry holds a stack), the blocks and bytes
    /// allocated from the stack ever, how many of those blocks their thread freed before it
    /// allocated again, and the stack's frames.
    pub const STACK_TABLES: &str = "stack_tables";
    pub const STACK_NTABLES: &str = "stack_ntables";
    pub const STAB_OFF_CAPACITY: &str = "stab_off_capacity";
    pub const STAB_OFF_USED: &str = "stab_off_used";
    pub const STAB_OFF_OVERFLOW: &str = "stab_off_overflow";
    pub const STAB_OFF_ENTRIES: &str = "stab_off_entries";
    pub const SENT_SIZE: &str = "sent_size";
    pub const SENT_OFF_KEY: &str = "sent_off_key";
    pub const SENT_OFF_ALLOCS: &str = "sent_off_allocs";
    pub const SENT_OFF_BYTES: &str = "sent_off_bytes";
    pub const SENT_OFF_TEMPORARY: &str = "sent_off_temporary";
    pub const SENT_OFF_FRAMES: &str = "sent_off_frames";
    /// From version 6: the operation in flight on each thread (`carried`). The address of a
    /// word holding the offset from a thread's pointer (x86-64: `fs_base`) to its area of
    /// libdmem state (0 until the first thread found its area), and the offset in that area of
    /// the record's `carried::WORDS` words: the operation (`carried::op`), then the address of
    /// the header it works on.
    pub const TLS_OFFSET: &str = "tls_offset";
    pub const INFLIGHT_OFF: &str = "inflight_off";
    /// From version 7: the address of the word holding the process's secret, chosen at start-up,
    /// that a header's magic is sealed with (`header_tag`).
    pub const MAGIC_KEY: &str = "magic_key";
}

/// What a header's stored magic is xored with, from version 7: a mix of the header's address and
/// the process's secret, so that a header written anywhere else, or by someone who does not know
/// the secret, does not pass for one of the library's (glibc's pointer mangling and safe-linking
/// bind their words to a secret and an address the same way). One multiply by a constant that
/// fits an instruction's immediate, and the product's high half: it runs on every allocation
/// and free.
#[inline(always)]
pub const fn header_tag(addr: u64, key: u64) -> u32 {
    ((addr ^ key).wrapping_mul(0x7f4a_7c15) >> 32) as u32
}

/// Callee-saved registers in the `exit_entry` record.
pub const EXIT_ENTRY_REGS: usize = 6;

/// The bytes of each thread's area of libdmem state in static TLS (`src/tls_area.c`), which
/// starts at the offset `field::TLS_OFFSET` holds from the thread pointer: libdmem's own memory,
/// never a root (under `count-allocs` it keeps the thread's newest block).
pub const TLS_AREA_BYTES: usize = 4096;

/// The words of versions 1 and 2 after magic and version, in order; version 1 ended before
/// `SIZE_LIST_SHIFT`.
pub const OLD_ORDER: [&str; 27] = [
    field::HEADER_SIZE,
    field::NFRAMES,
    field::OFF_NEXT,
    field::OFF_PREV,
    field::OFF_FRAMES,
    field::OFF_SIZE,
    field::SIZE_BITS,
    field::OFF_TID,
    field::OFF_MAGIC,
    field::MAGIC_LIVE,
    field::MAGIC_FREED,
    field::LISTS,
    field::NLISTS,
    field::LIST_STRIDE,
    field::LIST_OFF_HEAD,
    field::LIST_OFF_LIVE_BLOCKS,
    field::LIST_OFF_LIVE_BYTES,
    field::LIST_OFF_ALLOCS,
    field::LIST_OFF_FREES,
    field::ARENA_START,
    field::ARENA_END,
    field::FLAGS,
    field::SIZE_LIST_SHIFT,
    field::SIZE_LIST_BITS,
    field::SIZE_ALIGN_SHIFT,
    field::SIZE_ALIGN_BITS,
    field::LIST_OFF_CHANGES,
];
const V1_WORDS: usize = 22;

/// One entry as the library lays it out. The value is a pointer so that an address can be
/// written in a static and relocated by the loader; numbers are stored as pointers without
/// provenance, never dereferenced.
#[repr(C)]
pub struct Entry {
    pub name: [u8; NAME_LEN],
    pub value: *const u8,
}

impl Entry {
    /// An entry holding a number.
    pub const fn number(name: &str, value: u64) -> Entry {
        Entry {
            name: padded(name),
            value: core::ptr::without_provenance(value as usize),
        }
    }

    /// An entry holding an address in the library.
    pub const fn address<T>(name: &str, at: *const T) -> Entry {
        Entry {
            name: padded(name),
            value: at.cast(),
        }
    }
}

/// `name` NUL-padded to `NAME_LEN` bytes; a name too long to keep its NUL fails the build.
const fn padded(name: &str) -> [u8; NAME_LEN] {
    let b = name.as_bytes();
    assert!(b.len() < NAME_LEN, "descriptor field name too long");
    let mut out = [0u8; NAME_LEN];
    let mut i = 0;
    while i < b.len() {
        out[i] = b[i];
        i += 1;
    }
    out
}

fn word(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

/// The descriptor's size in bytes from its first `HEAD_LEN` bytes, so that a reader can read
/// the rest; refuses what is not a descriptor or is of a version this reader does not know.
pub fn size(head: &[u8]) -> Result<usize, String> {
    if head.len() < HEAD_LEN || word(head, 0) != MAGIC {
        return Err("no descriptor magic".into());
    }
    match word(head, 8) {
        1 => Ok(8 * (2 + V1_WORDS)),
        2 => Ok(8 * (2 + OLD_ORDER.len())),
        3..=VERSION => {
            let n = word(head, 16);
            if n > MAX_FIELDS {
                return Err(format!("the descriptor claims {n} fields"));
            }
            Ok(HEAD_LEN + n as usize * ENTRY_LEN)
        }
        v => Err(format!(
            "the descriptor is version {v}; this dmem reads versions 1 to {VERSION}"
        )),
    }
}

/// A descriptor's fields by name.
#[derive(Clone, Debug)]
pub struct Fields {
    pub version: u64,
    named: Vec<(String, u64)>,
}

impl Fields {
    /// Reads the whole descriptor, `size(bytes)` bytes of it.
    pub fn parse(bytes: &[u8]) -> Result<Fields, String> {
        let len = size(bytes)?;
        if bytes.len() < len {
            return Err(format!("the descriptor needs {len} bytes, {} given", bytes.len()));
        }
        let version = word(bytes, 8);
        let named = if version < 3 {
            let n = if version == 1 { V1_WORDS } else { OLD_ORDER.len() };
            (0..n)
                .map(|i| (OLD_ORDER[i].to_string(), word(bytes, 16 + 8 * i)))
                .collect()
        } else {
            let mut named = Vec::new();
            for e in bytes[HEAD_LEN..len].chunks_exact(ENTRY_LEN) {
                let name = &e[..NAME_LEN];
                let end = name
                    .iter()
                    .position(|&b| b == 0)
                    .ok_or("a field name has no end")?;
                let name = core::str::from_utf8(&name[..end]).map_err(|_| "a field name is not text")?;
                named.push((name.to_string(), word(e, NAME_LEN)));
            }
            named
        };
        Ok(Fields { version, named })
    }

    /// The value of a field, if the descriptor has it.
    pub fn get(&self, name: &str) -> Option<u64> {
        self.named.iter().find(|(n, _)| n == name).map(|&(_, v)| v)
    }

    /// The value of a field every reader needs, or why not.
    pub fn need(&self, name: &str) -> Result<u64, String> {
        self.get(name)
            .ok_or_else(|| format!("the descriptor has no field {name}"))
    }

    /// The fields in the descriptor's order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, u64)> {
        self.named.iter().map(|(n, v)| (n.as_str(), *v))
    }
}

/// A descriptor's bytes for `fields`, as the library lays it out, and the checks it writes at
/// start-up for them (to be found at the address the `checks` field holds): for readers' tests.
pub fn encode(fields: &[(&str, u64)]) -> (Vec<u8>, Vec<u8>) {
    let mut out = Vec::with_capacity(HEAD_LEN + fields.len() * ENTRY_LEN);
    let n = fields.len() as u64;
    for w in [MAGIC, VERSION, n] {
        out.extend_from_slice(&w.to_le_bytes());
    }
    let mut checks = head_check(VERSION, n).to_le_bytes().to_vec();
    for (i, (name, value)) in fields.iter().enumerate() {
        let name = padded(name);
        out.extend_from_slice(&name);
        out.extend_from_slice(&value.to_le_bytes());
        checks.extend_from_slice(&entry_check(i as u64, &name, *value).to_le_bytes());
    }
    (out, checks)
}

/// The checks' arithmetic: a multiply and an xor-shift per word, both invertible, so a change
/// to any one word always changes the result (and so does any byte of a name or value).
fn check(words: &[u64]) -> u64 {
    let mut h: u64 = 0x6a09_e667_f3bc_c908;
    for &w in words {
        h = (h ^ w).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        h ^= h >> 32;
    }
    h
}

/// The check of the head: its version and its count of fields (a changed magic is no
/// descriptor at all).
pub fn head_check(version: u64, nfields: u64) -> u64 {
    check(&[MAGIC, version, nfields])
}

/// The check of entry `index`: its place, its name's bytes and its value.
pub fn entry_check(index: u64, name: &[u8; NAME_LEN], value: u64) -> u64 {
    let mut w = [index, 0, 0, 0, value];
    for (k, chunk) in name.chunks_exact(8).enumerate() {
        w[1 + k] = word(chunk, 0);
    }
    check(&w)
}

/// What `verify` found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sealed {
    /// Every check agrees.
    Verified,
    /// A version before 5, which had no checks.
    Older,
    /// The checks are all zero: read before the library's start-up wrote them (or zeroed by
    /// a write, which the caller should say it cannot tell apart).
    Unwritten,
}

/// Checks a whole descriptor, `size(bytes)` bytes, against the checks the library wrote at
/// start-up, which `read(addr, buf)` reads (false: unreadable). The error names what was
/// overwritten: the head, or the fields whose checks disagree.
pub fn verify(bytes: &[u8], read: &mut dyn FnMut(u64, &mut [u8]) -> bool) -> Result<Sealed, String> {
    let len = size(bytes)?;
    let bytes = bytes.get(..len).ok_or("the descriptor is cut short")?;
    let version = word(bytes, 8);
    if version < 3 {
        return Ok(Sealed::Older);
    }
    let n = word(bytes, 16);
    let entries: Vec<&[u8]> = bytes[HEAD_LEN..].chunks_exact(ENTRY_LEN).collect();
    let checks_name = padded(field::CHECKS);
    let Some(at) = entries.iter().find(|e| e[..NAME_LEN] == checks_name) else {
        return if version >= 5 {
            Err(format!(
                "it is version {version} but has no field {}: the descriptor was overwritten",
                field::CHECKS
            ))
        } else {
            Ok(Sealed::Older)
        };
    };
    let addr = word(at, NAME_LEN);
    let mut raw = vec![0u8; 8 * (entries.len() + 1)];
    if !read(addr, &mut raw) {
        return Err(format!(
            "its checks at {addr:#x} (field {}) cannot be read: the descriptor was overwritten",
            field::CHECKS
        ));
    }
    let checks: Vec<u64> = raw.chunks_exact(8).map(|c| word(c, 0)).collect();
    if checks.iter().all(|&c| c == 0) {
        return Ok(Sealed::Unwritten);
    }
    if checks[0] != head_check(version, n) {
        return Err(format!(
            "its version ({version}) or its count of fields ({n}) is not what the library wrote at \
             start: the descriptor was overwritten"
        ));
    }
    let bad: Vec<String> = entries
        .iter()
        .enumerate()
        .filter(|(i, e)| {
            let name: &[u8; NAME_LEN] = e[..NAME_LEN].try_into().unwrap();
            entry_check(*i as u64, name, word(e, NAME_LEN)) != checks[i + 1]
        })
        .map(|(i, e)| {
            let name = &e[..NAME_LEN];
            let end = name.iter().position(|&b| b == 0).unwrap_or(NAME_LEN);
            // A name the write changed may hold anything; shown printable only.
            let shown: String = name[..end]
                .iter()
                .map(|&b| if b.is_ascii_graphic() { b as char } else { '?' })
                .collect();
            format!("{shown} (field {}, holding {:#x})", i + 1, word(e, NAME_LEN))
        })
        .collect();
    match bad.as_slice() {
        [] => Ok(Sealed::Verified),
        [one] => Err(format!(
            "its field {one} is not what the library wrote at start: the descriptor was overwritten"
        )),
        [first, ..] => Err(format!(
            "{} of its fields are not what the library wrote at start, the first {first}: the \
             descriptor (or its checks, field {}) was overwritten",
            bad.len(),
            field::CHECKS
        )),
    }
}
