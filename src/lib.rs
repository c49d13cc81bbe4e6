//! libdmem: a malloc interposer that keeps every live block, with the thread and stack that
//! allocated it, on lists a debugger can walk in a core file. Preload it with `LD_PRELOAD`.
// The unit-test build leaves out the exports, so much of the crate is unused there.
#![cfg_attr(test, allow(dead_code))]

// The analysis shared with the launcher, a crate of its own (analysis/), under its old name.
use dmem_analysis as analysis;
mod bootstrap;
mod clock;
mod corrupt;
mod deferred;
mod diag;
mod engine;
mod errno;
mod exit_entry;
mod frames;
mod header;
mod history;
mod layout;
mod lists;
mod options;
mod out;
mod procmaps;
mod sink;
mod spinlock;
mod stack_counts;
mod stack_hint;
mod table_pages;
mod thread;
mod tls;
mod unwind;

// A unit-test binary must not replace its own allocator or run our constructor: the exports, the
// global heap and the process hooks exist only in the shared library.
#[cfg(not(test))]
mod cxx;
#[cfg(all(not(test), target_arch = "x86_64"))]
mod dlhooks;
#[cfg(not(test))]
mod exit_funcs;
#[cfg(not(test))]
mod exits;
#[cfg(not(test))]
mod exports;
#[cfg(not(test))]
mod fdhooks;
#[cfg(not(test))]
mod finish;
#[cfg(not(test))]
mod leak;
#[cfg(not(test))]
mod lifecycle;
#[cfg(not(test))]
mod next;
#[cfg(not(test))]
mod own_heap;
#[cfg(not(test))]
mod sighooks;
#[cfg(not(test))]
mod signals;
#[cfg(all(not(test), target_arch = "x86_64"))]
mod unmaps;

#[cfg(not(test))]
#[global_allocator]
static HEAP: own_heap::RealHeap = own_heap::RealHeap;
