//! The leak report printed at exit (`leak-report`), in valgrind's four classes.
//!
//! Roots are the ones the launcher reads from a core, by the one rule of `analysis::roots`:
//! every thread's saved registers, its stack from its stack pointer (less the 128-byte red zone)
//! to the top of the mapping that holds it and its TLS window, and the writable segments of
//! every loaded object except the allocator's own state (glibc's `main_arena`, or the whole
//! writable data of a preloaded backend) and libdmem itself (whose list heads point at headers,
//! never into blocks).
//!
//! The order matters, because other threads are stopped from the mark on, for good (see
//! `stopworld`): what needs the loader's lock (`dl_iterate_phdr`, the names of the loaded
//! objects) or the real allocator is done first, then every list lock is taken, so no block can
//! be freed or added, then the threads are stopped and libdmem's heap switches to pages of its
//! own (a stopped thread may hold the allocator's lock), the mark runs, and the results are
//! grouped, symbolised and printed while the threads stay parked, until the process ends.
//! Everything runs once, at exit, on libdmem's own heap.

use super::live::snapshot;
use super::memory::{plain_ranges, OwnMemory, OwnScan};
use super::roots::{in_main_heap, objects, own_extra_roots, own_memory, thread_roots, ThreadNotes};
use super::stopworld::{Seen, World};
use super::text::{write_report, Marks};
use crate::analysis::arena;
use crate::analysis::blocks::Blocks;
use crate::analysis::reach::Marker;
use crate::exit_entry::Entry;
use crate::lists;
use crate::{options, procmaps, thread};

/// Runs the report and returns how many blocks leaked (definitely, indirectly or possibly
/// lost). Never inlined: its locals (block addresses) must die with its frame, below the stack
/// that `abort-shutdown` scrubs.
#[inline(never)]
pub fn leak_report(entry: &Entry) -> usize {
    let own_sp = entry.scan_from();
    let _guard = thread::Guard::enter();

    // Everything that allocates or takes the loader's lock, before the stop.
    let mut world = World::prepare();
    let mut objs = objects();
    crate::frames::name_without_the_loader();
    lists::lock_all();
    // The process's mappings, sorted (the kernel lists them in order), read with the lists
    // locked so that every block on them is in one; empty in a report from a fatal signal, whose
    // heap must not grow for them.
    let maps = if crate::own_heap::in_emergency() {
        Vec::new()
    } else {
        procmaps::all()
    };
    let (mut live, breaks) = snapshot(&maps);
    let mut blocks = Blocks::with_capacity(live.len());
    for b in &live {
        blocks.push(b.start, b.start + b.size);
    }
    blocks.index();
    let mut marker = Marker::new(live.len());
    // libc's data does not move, so main_arena is found before the stop, while everything may
    // still allocate.
    let arena = arena::main_arena(&OwnMemory, &objs.libc_data);
    objs.own_memory = own_memory(&objs, &blocks, &live);
    let mut extra = own_extra_roots(&objs, &blocks, &live, &maps, arena);
    let room = world.capacity();
    let mut roots =
        Vec::with_capacity(objs.data.len() + 2 * objs.libc_data.len() + 6 * room + 5 + extra.len());
    let mut checked = Vec::with_capacity(room);
    let plain = plain_ranges(&maps);
    let mut notes = ThreadNotes {
        not_stopped: Vec::with_capacity(room),
        missed: 0,
    };

    world.stop();
    crate::own_heap::enter_emergency();
    roots.extend_from_slice(&objs.data);
    roots.extend(entry.registers());
    for &seg in &objs.libc_data {
        match arena {
            Some(cut) => arena::subtract(seg, cut, &mut roots),
            None => roots.push(seg),
        }
    }
    thread_roots(
        &world,
        own_sp,
        &objs,
        &blocks,
        &mut roots,
        &mut checked,
        &mut notes,
    );
    drop_stacks(&mut extra, &world, own_sp);
    roots.extend_from_slice(&extra);
    let heuristics = options::get().leak_heuristics;
    marker.classify(
        &blocks,
        &roots,
        &[],
        heuristics,
        &mut OwnScan {
            checked: &checked,
            plain: &plain,
            maps: &maps,
        },
    );
    lists::unlock_all();

    let show = options::get().leak_show;
    let marks = Marks {
        class: (0..live.len()).map(|i| marker.class(i)).collect(),
        heuristic: (0..live.len()).map(|i| marker.heuristic(i)).collect(),
        head: marker.heads(),
    };
    // Without blocks in glibc's main heap there is nothing main_arena could point to, so
    // nothing to tell.
    let lost_arena = objs.glibc_backend && arena.is_none() && in_main_heap(&live);
    let leaked = write_report(&live, &marks, show, &notes, &breaks, lost_arena);
    // The tables of block addresses made before the stop are not given back (the heap has
    // switched to its own pages, which are unmapped before a core is written): a reader of that
    // core, scanning the program's memory, must not find them there.
    for (start, end) in blocks.buffers() {
        // SAFETY: the two address buffers of `blocks`, ours, which nothing reads after this.
        unsafe { core::ptr::write_bytes(start as *mut u8, 0, end - start) };
    }
    scrub(&mut live);
    scrub(&mut roots);
    leaked
}

/// Leaves out of `extra` the ranges that hold a thread's stack pointer (ours is `own_sp`):
/// stacks are scanned from their stack pointer up only, and the memory below is no root.
fn drop_stacks(extra: &mut Vec<(usize, usize)>, world: &World, own_sp: usize) {
    extra.retain(|&(s, e)| {
        let holds = |sp: usize| s <= sp && sp < e;
        let stack = world.threads().any(|t| match t {
            Seen::Stopped { sp, .. } | Seen::NotStopped { sp: Some(sp), .. } => holds(sp),
            _ => false,
        });
        !stack && !holds(own_sp)
    });
}

/// Zeroes a vector's whole buffer and empties it (see the end of `leak_report`).
fn scrub<T>(v: &mut Vec<T>) {
    // SAFETY: the buffer is the vector's own, `capacity` elements long; with its length set to
    // zero first, no element is read or dropped afterwards, whatever the bytes are.
    unsafe {
        v.set_len(0);
        core::ptr::write_bytes(
            v.as_mut_ptr().cast::<u8>(),
            0,
            v.capacity() * core::mem::size_of::<T>(),
        );
    }
}
