//! Just enough ELF to tell a core file from a program, and a program LD_PRELOAD can reach from
//! one it cannot, so mistakes are caught with a clear message before gdb or the program runs.

use std::io::Read;
use std::path::Path;

#[derive(Debug, PartialEq, Eq)]
pub enum Kind {
    NotElf,
    Core,
    /// An executable or a position-independent one; `dynamic` when it names a program
    /// interpreter (the dynamic loader), which is what honours LD_PRELOAD.
    Program {
        dynamic: bool,
    },
    Other,
}

const ET_EXEC: u16 = 2;
const ET_DYN: u16 = 3;
const ET_CORE: u16 = 4;
const PT_INTERP: u32 = 3;

pub fn kind(path: &Path) -> std::io::Result<Kind> {
    let mut f = std::fs::File::open(path)?;
    let mut head = Vec::with_capacity(4096);
    f.by_ref().take(4096).read_to_end(&mut head)?;
    Ok(classify(&head))
}

fn classify(d: &[u8]) -> Kind {
    // 64-bit little-endian only: the library exists for x86_64 Linux.
    if d.len() < 64 || d[..4] != *b"\x7fELF" || d[4] != 2 || d[5] != 1 {
        return Kind::NotElf;
    }
    let u16_at = |o: usize| u16::from_le_bytes([d[o], d[o + 1]]);
    let u32_at = |o: usize| d.get(o..o + 4).map(|b| u32::from_le_bytes(b.try_into().unwrap()));
    let u64_at = |o: usize| d.get(o..o + 8).map(|b| u64::from_le_bytes(b.try_into().unwrap()));
    match u16_at(16) {
        ET_CORE => Kind::Core,
        ET_EXEC | ET_DYN => {
            let (phoff, phentsize, phnum) =
                (u64_at(32).unwrap_or(0) as usize, u16_at(54) as usize, u16_at(56));
            let dynamic = (0..phnum as usize).any(|i| u32_at(phoff + i * phentsize) == Some(PT_INTERP));
            Kind::Program { dynamic }
        }
        _ => Kind::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_launcher_itself_is_a_dynamic_program() {
        let me = std::env::current_exe().unwrap();
        assert_eq!(kind(&me).unwrap(), Kind::Program { dynamic: true });
    }

    #[test]
    fn text_is_not_elf() {
        assert_eq!(classify(b"#!/bin/sh\necho hello\n"), Kind::NotElf);
    }
}
