//! Reading a process or a core: its memory, its mappings and ELF objects, the list walk.

pub mod coredump;
pub mod elf;
pub mod heapwalk;
pub mod image;
pub mod live;
pub mod mappings;
pub mod memory;
pub mod ptrace;
pub mod threads;
