//! The analysis both sides of dmem run: the library's exit report (in the process, at exit) and
//! the launcher (over a core file or a running process). Each definition lives here once.
//!
//! The library mounts this folder as `crate::analysis`, the launcher as a module of its own with
//! `#[path]`, so neither links the other: the library stays free of the launcher's dependencies
//! and the launcher never carries the library's malloc exports. Code here therefore uses only
//! `core` and `alloc`/`std` collections and no crate of either side but two that both link:
//! `aho-corasick` for suppression patterns and `cpp_demangle` for valgrind's names of inlined
//! functions; and it never allocates where its comments say it runs
//! while the process's other threads are stopped.

pub mod allocfn;
pub mod arena;
// The library writes the descriptor and parses it only in its tests; the readers are the
// launcher and the integration tests.
#[cfg_attr(not(test), allow(dead_code))]
pub mod descriptor;
pub mod escape;
pub mod fit;
pub mod frame;
pub mod maps;
pub mod reach;
pub mod roots;
pub mod suppressions;
pub mod vgxml;
pub mod words;
