//! What the tests read from ELF files, through the `object` crate (the launcher's ELF reader
//! too): a core file's PT_LOAD segments, its NT_FILE note (which file is mapped where) and
//! NT_PRSTATUS notes (thread ids), and symbols of the mapped files, to turn a symbol into an
//! address in the process.
#![allow(dead_code)]

use object::elf::{FileHeader64, ProgramHeader64, NT_FILE, NT_PRSTATUS, PT_LOAD, PT_NOTE};
use object::read::elf::{FileHeader, ProgramHeader};
use object::{Endianness, Object, ObjectSymbol, ObjectSymbolTable};
use std::path::{Path, PathBuf};

pub const SHT_SYMTAB: u32 = object::elf::SHT_SYMTAB.0;
pub const SHT_DYNSYM: u32 = object::elf::SHT_DYNSYM.0;

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
        let elf = Elf { data };
        elf.header()
            .unwrap_or_else(|e| panic!("{} is not a 64-bit ELF file: {e}", path.display()));
        elf
    }

    fn header(&self) -> object::Result<(&FileHeader64<Endianness>, Endianness)> {
        let h = FileHeader64::<Endianness>::parse(&*self.data)?;
        let endian = h.endian()?;
        Ok((h, endian))
    }

    pub fn kind(&self) -> u16 {
        let (h, e) = self.header().expect("parsed in open");
        h.e_type(e).0
    }

    fn program_headers(&self) -> (&[ProgramHeader64<Endianness>], Endianness) {
        let (h, e) = self.header().expect("parsed in open");
        (h.program_headers(e, &*self.data).expect("program headers"), e)
    }

    pub fn segments(&self) -> Vec<Segment> {
        let (phs, e) = self.program_headers();
        phs.iter()
            .map(|p| Segment {
                kind: p.p_type(e).0,
                offset: p.p_offset(e),
                vaddr: p.p_vaddr(e),
                filesz: p.p_filesz(e),
                memsz: p.p_memsz(e),
            })
            .collect()
    }

    /// `(value, size)` of the first symbol called `name` in the symbol table of type `table`
    /// (`SHT_DYNSYM` or `SHT_SYMTAB`).
    pub fn symbol(&self, table: u32, name: &str) -> Option<(u64, u64)> {
        let file = object::File::parse(&*self.data).ok()?;
        let symbols = if table == SHT_DYNSYM {
            file.dynamic_symbol_table()?
        } else {
            file.symbol_table()?
        };
        symbols
            .symbols()
            .find(|s| s.name_bytes().is_ok_and(|n| n == name.as_bytes()))
            .map(|s| (s.address(), s.size()))
    }

    /// Every note in the PT_NOTE segments: (type, name, descriptor).
    pub fn notes(&self) -> Vec<(u32, String, &[u8])> {
        let (phs, e) = self.program_headers();
        let mut out = Vec::new();
        for p in phs.iter().filter(|p| p.p_type(e) == PT_NOTE) {
            let Ok(Some(mut notes)) = p.notes(e, &*self.data) else {
                continue;
            };
            while let Ok(Some(n)) = notes.next() {
                let name = String::from_utf8_lossy(n.name()).into_owned();
                out.push((n.n_type(e).0, name, n.desc()));
            }
        }
        out
    }
}

fn u32_at(d: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(d[o..o + 4].try_into().unwrap())
}
fn u64_at(d: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(d[o..o + 8].try_into().unwrap())
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
        assert_eq!(
            elf.kind(),
            object::elf::ET_CORE.0,
            "{} is not a core file",
            path.display()
        );
        let loads = elf
            .segments()
            .into_iter()
            .filter(|s| s.kind == PT_LOAD.0)
            .collect();
        let mut mappings = Vec::new();
        let mut threads = Vec::new();
        for (kind, name, desc) in elf.notes() {
            if name != "CORE" {
                continue;
            }
            if kind == NT_PRSTATUS.0 {
                // struct elf_prstatus: siginfo (12), cursig (2) + pad, sigpend, sighold, pid.
                threads.push(u32_at(desc, 32));
            } else if kind == NT_FILE.0 {
                // The note's layout (count, page size, then start/end/page-offset triples and the
                // names) is the kernel's; `object` hands over the descriptor as bytes.
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

    /// Where `file` (whose ELF is `elf`) was loaded: what to add to its symbol values.
    pub fn load_bias(&self, file: &Path, elf: &Elf) -> Option<u64> {
        let want = std::fs::canonicalize(file).ok()?;
        let maps: Vec<(u64, u64)> = self
            .mappings
            .iter()
            .filter(|m| std::fs::canonicalize(&m.path).is_ok_and(|p| p == want))
            .map(|m| (m.start, m.file_offset))
            .collect();
        load_bias(elf, &maps)
    }
}

/// The load bias of an object from where its file was mapped, `(start, file offset)` pairs (a
/// core's NT_FILE note, a process's /proc/PID/maps): its first PT_LOAD is mapped from the
/// page-rounded file offset of that segment, at the page-rounded virtual address plus the bias.
pub fn load_bias(elf: &Elf, maps: &[(u64, u64)]) -> Option<u64> {
    let first = elf
        .segments()
        .into_iter()
        .filter(|s| s.kind == PT_LOAD.0)
        .min_by_key(|s| s.vaddr)?;
    let page = 4096;
    let (start, _) = maps.iter().find(|(_, off)| *off == first.offset & !(page - 1))?;
    Some(start - (first.vaddr & !(page - 1)))
}
