//! Groups for a heap without stacks (a program that ran without libdmem, read through glibc's
//! heap): where every command groups blocks by the stack that allocated them, such a heap's
//! blocks are grouped by C++ type (the vtable their first word points into) and size, each
//! group standing in for a stack with a line that says what it is. The answers say "group"
//! where they would say "stack" (`GROUP`), and the note on glibc's heap says why once.

use crate::model::heap::Heap;
use crate::model::names::Names;
use crate::model::roots::Loaded;
use crate::source::memory::{AddrHash, Memory};
use std::collections::HashMap;

/// What the answers call a group of blocks: the stack that allocated them, or, without
/// libdmem's stacks, their type and size.
pub fn group_word(bare: bool) -> &'static str {
    if bare {
        "group"
    } else {
        "stack"
    }
}

/// Gives every block of `heap` the group of its type and size, and the heap one label per
/// group in place of a stack.
pub fn group_by_type_and_size(heap: &mut Heap, mem: &dyn Memory, objects: &[Loaded]) {
    let vt = Names::new(objects).vtables();
    // Keyed by the vtable's index (plus one; 0 for none) above the size.
    let mut ids: HashMap<(u64, u64), u32, AddrHash> = HashMap::default();
    let mut labels = Vec::new();
    let mut type_names: HashMap<usize, String> = HashMap::new();
    for b in &mut heap.blocks {
        let ty = if b.size >= 8 {
            mem.u64_at(b.addr).ok().and_then(|w| vt.lookup(w))
        } else {
            None
        };
        let key = (ty.map_or(0, |k| k as u64 + 1), b.size);
        let id = *ids.entry(key).or_insert_with(|| {
            let what = match ty {
                Some(k) => {
                    let name = type_names.entry(k).or_insert_with(|| vt.type_name(k));
                    format!("{name} objects of {} usable bytes", b.size)
                }
                None => format!("blocks of {} usable bytes", b.size),
            };
            labels.push(what);
            labels.len() as u32 - 1
        });
        b.stack = id;
    }
    heap.stacks = labels.iter().map(|_| Box::<[u64]>::default()).collect();
    heap.labels = labels;
}
