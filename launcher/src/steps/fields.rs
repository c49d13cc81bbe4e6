//! The words of blocks read back from the image: a field at an offset, every 8-byte word, and the
//! C++ type a block's first word names by pointing into a vtable (types and words use them).

use crate::model::names::Names;
use crate::steps::inspect::Inspect;
use std::collections::BTreeMap;

/// The `width`-byte little-endian field at `offset` of a block, if the block holds it.
pub fn field(ins: &Inspect, i: usize, offset: u64, width: u64) -> Option<u64> {
    let b = &ins.heap.blocks[i];
    if b.size < offset + width {
        return None;
    }
    let mut buf = [0u8; 8];
    ins.image
        .mem
        .read(b.addr + offset, &mut buf[..width as usize])
        .ok()?;
    Some(u64::from_le_bytes(buf))
}

/// {type name: blocks} of the blocks in `pool` whose first word points into a vtable.
pub fn typed(ins: &Inspect, names: &Names, pool: &[usize]) -> (BTreeMap<String, Vec<usize>>, usize) {
    let vt = names.vtables();
    let mut by: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    let mut type_of: std::collections::HashMap<usize, String> = Default::default();
    for &i in pool {
        let Some(first) = field(ins, i, 0, 8) else {
            continue;
        };
        let Some(k) = vt.lookup(first) else {
            continue;
        };
        let name = type_of.entry(k).or_insert_with(|| vt.type_name(k)).clone();
        by.entry(name).or_default().push(i);
    }
    (by, vt.len())
}

/// Every 8-byte word of the blocks `sel`.
pub fn all_words(ins: &Inspect, sel: &[usize]) -> Vec<u64> {
    let mut vals = Vec::new();
    for &i in sel {
        let b = ins.heap.blocks[i];
        crate::model::leaks::scan_words(&*ins.image.mem, b.addr, b.addr + b.size, &mut |_, ws| {
            vals.extend(ws.iter().map(|&w| w as u64))
        });
    }
    vals
}
