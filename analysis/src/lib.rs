//! The analysis both sides of dmem run: the library's exit report (in the process, at exit) and
//! the launcher (over a core file or a running process). Each definition lives here once.
//!
//! A crate of its own, so that neither side links the other: the library stays free of the
//! launcher's dependencies and the launcher never carries the library's malloc exports. Both
//! name it `analysis` (`use dmem_analysis as analysis;` at their roots). Code here uses only
//! `core` and `alloc`/`std` collections and crates both sides link anyway: `aho-corasick` for
//! suppression patterns, `cpp_demangle` for valgrind's names of inlined functions, `addr2line`
//! and `object` for naming frames (`symbolize`, the library's `backtrace` builds them) and for
//! every name a function has (`aliases`); and it
//! never allocates where its comments say it runs while the process's other threads are stopped.
#![forbid(unsafe_code)]

pub mod aliases;
pub mod allocfn;
pub mod arena;
pub mod blockfile;
pub mod blocks;
pub mod carried;
pub mod descriptor;
pub mod escape;
pub mod fit;
pub mod frame;
pub mod maps;
pub mod prescan;
pub mod reach;
pub mod records;
pub mod roots;
pub mod suppressions;
pub mod symbolize;
pub mod vgxml;
pub mod words;
