//! Reading a process or a core: its memory, its mappings and ELF objects, the list walk.
//!
//! Only three files need `unsafe`: `coredump` maps the core file, `memory` reads a process with
//! `process_vm_readv`, `ptrace` stops and resumes its threads. The rest forbid it.

pub mod coredump;
#[forbid(unsafe_code)]
pub mod corefile;
#[forbid(unsafe_code)]
pub mod debuginfod;
#[forbid(unsafe_code)]
pub mod elf;
#[forbid(unsafe_code)]
pub mod files;
#[forbid(unsafe_code)]
pub mod glibc;
#[forbid(unsafe_code)]
pub mod heapwalk;
#[forbid(unsafe_code)]
pub mod history;
#[forbid(unsafe_code)]
pub mod image;
#[forbid(unsafe_code)]
pub mod live;
#[forbid(unsafe_code)]
pub mod mappings;
pub mod memory;
pub mod ptrace;
#[forbid(unsafe_code)]
pub mod stack_counts;
#[forbid(unsafe_code)]
pub mod threads;
