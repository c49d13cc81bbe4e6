//! Just enough ELF to read a process's memory out of an x86_64 Linux core file: PT_LOAD
//! segments, the NT_FILE note (which file is mapped where), NT_PRSTATUS (thread ids), and symbol
//! tables of the mapped files, to turn a symbol into an address in the process.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

const PT_LOAD: u32 = 1;
const PT_NOTE: u32 = 4;
pub const SHT_SYMTAB: u32 = 2;
pub const SHT_DYNSYM: u32 = 11;
const NT_PRSTATUS: u32 = 1;
const NT_FILE: u32 = 0x4649_4c45;

fn u16_at(d: &[u8], o: usize) -> u16 {
    u16::from_le_bytes(d[o..o + 2].try_into().unwrap())
}
fn u32_at(d: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(d[o..o + 4].try_into().unwrap())
}
fn u64_at(d: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(d[o..o + 8].try_into().unwrap())
}

#[derive(Clone, Copy, Debug)]
pub struct Segment {
    pub kind: u32,
    pub offset: u64,
    pub vaddr: u64,
    pub filesz: u64,
    pub memsz: u64,
}

pub struct Elf {
    pub data: Vec<u8>,
}

impl Elf {
    pub fn open(path: &Path) -> Elf {
        let data = std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        assert!(
            data.len() > 64 && data[..4] == *b"\x7fELF",
            "{} is not ELF",
            path.display()
        );
        assert_eq!(data[4], 2, "{} is not a 64-bit ELF", path.display());
        Elf { data }
    }

    pub fn segments(&self) -> Vec<Segment> {
        let d = &self.data;
        let (off, size, n) = (
            u64_at(d, 32) as usize,
            u16_at(d, 54) as usize,
            u16_at(d, 56) as usize,
        );
        (0..n)
            .map(|i| {
                let p = off + i * size;
                Segment {
                    kind: u32_at(d, p),
                    offset: u64_at(d, p + 8),
                    vaddr: u64_at(d, p + 16),
                    filesz: u64_at(d, p + 32),
                    memsz: u64_at(d, p + 40),
                }
            })
            .collect()
    }

    /// `(value, size)` of the first symbol called `name` in the symbol table of type `table`
    /// (`SHT_DYNSYM` or `SHT_SYMTAB`).
    pub fn symbol(&self, table: u32, name: &str) -> Option<(u64, u64)> {
        let d = &self.data;
        let (off, size, n) = (
            u64_at(d, 40) as usize,
            u16_at(d, 58) as usize,
            u16_at(d, 60) as usize,
        );
        let section = |i: usize| off + i * size;
        for i in 0..n {
            let s = section(i);
            if u32_at(d, s + 4) != table {
                continue;
            }
            let (sym_off, sym_size) = (u64_at(d, s + 24) as usize, u64_at(d, s + 32) as usize);
            let strtab = section(u32_at(d, s + 40) as usize);
            let str_off = u64_at(d, strtab + 24) as usize;
            for sym in (sym_off..sym_off + sym_size).step_by(24) {
                let name_at = str_off + u32_at(d, sym) as usize;
                let end = d[name_at..].iter().position(|&b| b == 0)? + name_at;
                if &d[name_at..end] == name.as_bytes() {
                    return Some((u64_at(d, sym + 8), u64_at(d, sym + 16)));
                }
            }
        }
        None
    }

    /// Every note in the PT_NOTE segments: (type, name, descriptor).
    pub fn notes(&self) -> Vec<(u32, String, &[u8])> {
        let d = &self.data;
        let mut notes = Vec::new();
        for seg in self.segments().into_iter().filter(|s| s.kind == PT_NOTE) {
            let (mut p, end) = (seg.offset as usize, (seg.offset + seg.filesz) as usize);
            while p + 12 <= end {
                let (namesz, descsz, kind) =
                    (u32_at(d, p) as usize, u32_at(d, p + 4) as usize, u32_at(d, p + 8));
                let name_at = p + 12;
                let desc_at = name_at + namesz.div_ceil(4) * 4;
                let name = String::from_utf8_lossy(&d[name_at..name_at + namesz])
                    .trim_end_matches('\0')
                    .to_owned();
                notes.push((kind, name, &d[desc_at..desc_at + descsz]));
                p = desc_at + descsz.div_ceil(4) * 4;
            }
        }
        notes
    }
}

/// One file mapping from NT_FILE.
#[derive(Clone, Debug)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    pub file_offset: u64,
    pub path: PathBuf,
}

pub struct Core {
    pub elf: Elf,
    pub loads: Vec<Segment>,
    pub mappings: Vec<Mapping>,
    /// pr_pid of every NT_PRSTATUS note: the kernel thread ids, the crashing thread first.
    pub threads: Vec<u32>,
}

impl Core {
    pub fn open(path: &Path) -> Core {
        let elf = Elf::open(path);
        assert_eq!(u16_at(&elf.data, 16), 4, "{} is not a core file", path.display());
        let loads = elf.segments().into_iter().filter(|s| s.kind == PT_LOAD).collect();
        let mut mappings = Vec::new();
        let mut threads = Vec::new();
        for (kind, name, desc) in elf.notes() {
            if name != "CORE" {
                continue;
            }
            if kind == NT_PRSTATUS {
                // struct elf_prstatus: siginfo (12), cursig (2) + pad, sigpend, sighold, pid.
                threads.push(u32_at(desc, 32));
            } else if kind == NT_FILE {
                let (count, page) = (u64_at(desc, 0) as usize, u64_at(desc, 8));
                let mut names = desc[16 + count * 24..].split(|&b| b == 0);
                for i in 0..count {
                    let e = 16 + i * 24;
                    let path = String::from_utf8_lossy(names.next().unwrap_or_default()).into_owned();
                    mappings.push(Mapping {
                        start: u64_at(desc, e),
                        end: u64_at(desc, e + 8),
                        file_offset: u64_at(desc, e + 16) * page,
                        path: PathBuf::from(path),
                    });
                }
            }
        }
        Core {
            elf,
            loads,
            mappings,
            threads,
        }
    }

    /// `len` bytes of the process's memory at `addr`: from the core where it was dumped, else
    /// (text and read-only data the kernel leaves out) from the mapped file itself.
    pub fn read(&self, addr: u64, len: usize) -> Option<Vec<u8>> {
        let end = addr.checked_add(len as u64)?;
        if let Some(s) = self
            .loads
            .iter()
            .find(|s| s.vaddr <= addr && end <= s.vaddr + s.filesz)
        {
            let at = (s.offset + addr - s.vaddr) as usize;
            return self.elf.data.get(at..at + len).map(<[u8]>::to_vec);
        }
        let m = self.mappings.iter().find(|m| m.start <= addr && end <= m.end)?;
        let file = std::fs::read(&m.path).ok()?;
        let at = (m.file_offset + addr - m.start) as usize;
        file.get(at..at + len).map(<[u8]>::to_vec)
    }

    pub fn u64(&self, addr: u64) -> Option<u64> {
        self.read(addr, 8).map(|b| u64_at(&b, 0))
    }

    /// Where `file` (whose ELF is `elf`) was loaded: what to add to its symbol values. Its first
    /// PT_LOAD is mapped from the page-rounded file offset of that segment, at the page-rounded
    /// virtual address plus the bias.
    pub fn load_bias(&self, file: &Path, elf: &Elf) -> Option<u64> {
        let want = std::fs::canonicalize(file).ok()?;
        let first = elf
            .segments()
            .into_iter()
            .filter(|s| s.kind == PT_LOAD)
            .min_by_key(|s| s.vaddr)?;
        let page = 4096;
        let m = self.mappings.iter().find(|m| {
            m.file_offset == first.offset & !(page - 1)
                && std::fs::canonicalize(&m.path).is_ok_and(|p| p == want)
        })?;
        Some(m.start - (first.vaddr & !(page - 1)))
    }
}
