//! Aborting on a header the program overwrote: the one line that names it, then SIGABRT, as
//! glibc's malloc does on a chunk it finds corrupt ("free(): invalid pointer", exit status 134).
//!
//! Called from the list and free paths at the moment a check fails, before anything is written
//! through what the header says; it imports only the output, so the lists can use it.

use crate::out::Out;
use crate::sink;

/// What was found wrong with a header.
#[derive(Clone, Copy)]
pub enum Damage {
    /// Its list links do not lead back to it: the neighbour's `prev`, the one before's `next` (or
    /// the list's head) name another header, or a link is no address a header can have.
    Links,
    /// An aligned block's word that locates the backend's block does not decode to a place the
    /// library could have put it.
    BaseWord,
}

/// Reports the header at `hdr` as overwritten and aborts. Never returns.
#[cold]
#[inline(never)]
pub fn abort(hdr: *const u8, damage: Damage) -> ! {
    let mut out: Out = sink::stderr();
    out.str("dmem: heap corruption: the header at ")
        .ptr(hdr)
        .str(" (block ")
        .ptr(hdr.wrapping_add(crate::header::HEADER_SIZE))
        .str(") ");
    out.str(match damage {
        Damage::Links => "has list links that do not lead back to it",
        Damage::BaseWord => "has a word locating its aligned block that the library did not write",
    });
    out.str(": something wrote past the end of a block or through a stale pointer; aborting\n");
    out.flush();
    // SAFETY: abort never returns; SIGABRT is what glibc raises on a corrupt heap, so a core
    // exists for the post-mortem and nothing is written through the damaged header.
    unsafe { libc::abort() }
}
