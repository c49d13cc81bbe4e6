//! libdmem: a malloc interposer that keeps every live block, with the thread and stack that
//! allocated it, on lists a debugger can walk in a core file. Preload it with `LD_PRELOAD`.
// The unit-test build leaves out the exports, so much of the crate is unused there.
#![cfg_attr(test, allow(dead_code))]

mod bootstrap;
mod diag;
mod engine;
mod header;
mod layout;
mod lifecycle;
mod lists;
mod options;
mod thread;
mod unwind;

// A unit-test binary must not replace its own allocator: the exports and the global heap exist
// only in the shared library.
#[cfg(not(test))]
mod exports;
#[cfg(not(test))]
mod heap;

#[cfg(not(test))]
#[global_allocator]
static HEAP: heap::RealHeap = heap::RealHeap;
