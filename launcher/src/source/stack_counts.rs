//! The per-stack counts (`DMEM_OPTS=count-allocs`) read out of a core or a running process:
//! every table the library mapped, its entries summed by stack, since a stack is counted in the
//! table of each list its threads allocated from. An entry is believed once its key is odd (the
//! library writes the key after the stack).
//!
//! Frees per stack are not counted by the library: they are a stack's allocations less its live
//! blocks, which a walk of the lists gives.

use super::heapwalk::Layout;
use super::memory::{Memory, ReadError};
use crate::analysis::descriptor::{self, field, Fields};
use std::collections::HashMap;

/// Where the tables are and how their entries are laid out, from the descriptor.
#[derive(Clone, Debug)]
struct TablesLayout {
    tables: u64,
    ntables: u64,
    off_capacity: u64,
    off_used: u64,
    off_overflow: u64,
    off_entries: u64,
    entry_size: u64,
    off_key: u64,
    off_allocs: u64,
    off_bytes: u64,
    off_temporary: u64,
    off_frames: u64,
}

impl TablesLayout {
    /// The tables' fields, or None for a library that predates them.
    fn read(f: &Fields) -> Result<Option<TablesLayout>, String> {
        if f.get(field::STACK_TABLES).is_none() {
            return Ok(None);
        }
        let w = |name: &str| f.need(name);
        let t = TablesLayout {
            tables: w(field::STACK_TABLES)?,
            ntables: w(field::STACK_NTABLES)?,
            off_capacity: w(field::STAB_OFF_CAPACITY)?,
            off_used: w(field::STAB_OFF_USED)?,
            off_overflow: w(field::STAB_OFF_OVERFLOW)?,
            off_entries: w(field::STAB_OFF_ENTRIES)?,
            entry_size: w(field::SENT_SIZE)?,
            off_key: w(field::SENT_OFF_KEY)?,
            off_allocs: w(field::SENT_OFF_ALLOCS)?,
            off_bytes: w(field::SENT_OFF_BYTES)?,
            off_temporary: w(field::SENT_OFF_TEMPORARY)?,
            off_frames: w(field::SENT_OFF_FRAMES)?,
        };
        let fields = [t.off_key, t.off_allocs, t.off_bytes, t.off_temporary];
        if t.ntables > 4096
            || !(32..=4096).contains(&t.entry_size)
            || fields.iter().any(|&o| o + 8 > t.entry_size)
        {
            return Err(format!("{} tables of {}-byte entries", t.ntables, t.entry_size));
        }
        Ok(Some(t))
    }
}

/// What one stack allocated.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Count {
    /// Blocks and their bytes, ever.
    pub allocs: u64,
    pub bytes: u64,
    /// Of those blocks, freed by their thread before it allocated again.
    pub temporary: u64,
}

impl Count {
    fn add(&mut self, o: Count) {
        self.allocs += o.allocs;
        self.bytes += o.bytes;
        self.temporary += o.temporary;
    }
}

/// The counts of an image.
#[derive(Clone, Debug, Default)]
pub struct StackCounts {
    /// By stack: return addresses innermost first, without trailing zeros, as the walk gives
    /// them.
    pub stacks: HashMap<Box<[u64]>, Count>,
    /// What the tables had no room for, every stack together.
    pub overflow: Count,
    /// Everything counted.
    pub total: Count,
}

/// A read error in words.
fn why(e: ReadError) -> String {
    match e {
        ReadError::Unmapped => "a table of the per-stack counts is not in the image".into(),
        ReadError::Denied(e) => format!("its memory cannot be read: {e}"),
    }
}

/// Reads every table. None when the library has no tables (it predates them) or mapped none
/// (the process ran without `count-allocs`); an error when the memory cannot be read.
pub fn read(mem: &dyn Memory, layout: &Layout) -> Result<Option<StackCounts>, String> {
    let mut head = [0u8; descriptor::HEAD_LEN];
    mem.read(layout.addr, &mut head).map_err(why)?;
    let mut raw = vec![0u8; descriptor::size(&head)?];
    mem.read(layout.addr, &mut raw).map_err(why)?;
    let Some(t) = TablesLayout::read(&Fields::parse(&raw)?)? else {
        return Ok(None);
    };
    let mut ptrs = vec![0u8; (t.ntables * 8) as usize];
    mem.read_fresh(t.tables, &mut ptrs).map_err(why)?;
    let nframes = layout.nframes as usize;
    if t.off_frames + 8 * nframes as u64 > t.entry_size {
        return Err("an entry's frames overrun it".into());
    }
    let mut out = StackCounts::default();
    let mut any = false;
    for p in ptrs.chunks_exact(8) {
        let table = u64::from_le_bytes(p.try_into().unwrap());
        if table == 0 {
            continue;
        }
        let read = |addr: u64, len: u64| -> Result<Vec<u8>, String> {
            let mut b = vec![0u8; len as usize];
            mem.read_fresh(addr, &mut b).map_err(why)?;
            Ok(b)
        };
        let word =
            |b: &[u8], off: u64| u64::from_le_bytes(b[off as usize..off as usize + 8].try_into().unwrap());
        let capacity = mem.u64_fresh(table + t.off_capacity).map_err(why)?;
        if capacity == 0 || capacity > 1 << 22 {
            continue;
        }
        any = true;
        let used = mem.u64_fresh(table + t.off_used).map_err(why)?.min(capacity);
        let count = |e: &[u8]| Count {
            allocs: word(e, t.off_allocs),
            bytes: word(e, t.off_bytes),
            temporary: word(e, t.off_temporary),
        };
        let overflow = count(&read(table + t.off_overflow, t.entry_size)?);
        out.overflow.add(overflow);
        out.total.add(overflow);
        let entries = read(table + t.off_entries, used * t.entry_size)?;
        for e in entries.chunks_exact(t.entry_size as usize) {
            if word(e, t.off_key) & 1 == 0 {
                continue;
            }
            let mut frames: Vec<u64> = (0..nframes as u64)
                .map(|i| word(e, t.off_frames + 8 * i))
                .collect();
            while frames.last() == Some(&0) {
                frames.pop();
            }
            let c = count(e);
            out.total.add(c);
            out.stacks.entry(frames.into()).or_default().add(c);
        }
    }
    Ok(any.then_some(out))
}
