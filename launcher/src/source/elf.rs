//! What the launcher reads from ELF files, through the `object` crate: whether a file is a core,
//! a program LD_PRELOAD can reach or neither (so mistakes are caught with a clear message before
//! gdb or the program runs); and of a mapped object its loadable segments, build id and dynamic
//! symbols, to turn its addresses into the process's and back.
//!
//! Files are read through `object`'s read cache, so only the parts looked at are read: a program
//! with hundreds of megabytes of debug info costs its headers, not its size.

use dmem_analysis::blockfile::BlockFile;
use object::read::elf::{FileHeader, ProgramHeader};
use object::read::ReadCache;
use object::{Object, ObjectSection, ObjectSymbol};
use std::path::{Path, PathBuf};

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

type Header = object::elf::FileHeader64<object::Endianness>;

pub fn kind(path: &Path) -> std::io::Result<Kind> {
    let cache = ReadCache::new(BlockFile::new(crate::sys::open_regular(path)?)?);
    // 64-bit only: the library exists for 64-bit Linux.
    let Ok(header) = Header::parse(&cache) else {
        return Ok(Kind::NotElf);
    };
    let Ok(endian) = header.endian() else {
        return Ok(Kind::NotElf);
    };
    Ok(match header.e_type(endian) {
        object::elf::ET_CORE => Kind::Core,
        object::elf::ET_EXEC | object::elf::ET_DYN => {
            let dynamic = header
                .program_headers(endian, &cache)
                .is_ok_and(|ph| ph.iter().any(|p| p.p_type(endian) == object::elf::PT_INTERP));
            Kind::Program { dynamic }
        }
        _ => Kind::Other,
    })
}

/// A PT_LOAD segment.
#[derive(Clone, Copy, Debug)]
pub struct Segment {
    pub vaddr: u64,
    pub offset: u64,
    pub filesz: u64,
    pub memsz: u64,
    pub writable: bool,
}

/// The parts of a mapped object the launcher needs.
#[derive(Clone, Debug)]
pub struct ElfObject {
    pub path: PathBuf,
    pub loads: Vec<Segment>,
    /// The size of its thread-local storage image (PT_TLS), 0 without one.
    pub tls_memsz: u64,
    /// The GNU build id note, if the object has one.
    pub build_id: Option<Vec<u8>>,
}

impl ElfObject {
    pub fn open(path: &Path) -> Result<ElfObject, String> {
        ElfObject::open_as(path, path)
    }

    /// The object in the file at `file` (the one that matched), named `path` as the target
    /// mapped it: its addresses are found through the target's mappings of `path`.
    pub fn open_as(path: &Path, file: &Path) -> Result<ElfObject, String> {
        let file = crate::sys::open_regular(file).map_err(|e| e.to_string())?;
        let cache = ReadCache::new(BlockFile::new(file).map_err(|e| e.to_string())?);
        let obj = object::read::File::parse(&cache).map_err(|e| e.to_string())?;
        let (loads, tls_memsz) = match &obj {
            object::read::File::Elf64(elf) => {
                let endian = elf.endian();
                let phdrs = elf.elf_program_headers();
                let loads = phdrs
                    .iter()
                    .filter(|p| p.p_type(endian) == object::elf::PT_LOAD)
                    .map(|p| Segment {
                        vaddr: p.p_vaddr(endian),
                        offset: p.p_offset(endian),
                        filesz: p.p_filesz(endian),
                        memsz: p.p_memsz(endian),
                        writable: p.p_flags(endian).0 & object::elf::PF_W.0 != 0,
                    })
                    .collect();
                let tls = phdrs
                    .iter()
                    .filter(|p| p.p_type(endian) == object::elf::PT_TLS)
                    .map(|p| p.p_memsz(endian))
                    .sum();
                (loads, tls)
            }
            _ => return Err("not a 64-bit ELF file".into()),
        };
        let build_id = obj.build_id().ok().flatten().map(<[u8]>::to_vec);
        Ok(ElfObject {
            path: path.to_path_buf(),
            loads,
            tls_memsz,
            build_id,
        })
    }

    /// The object as the first bytes of its file give it (a core's copy of its first page):
    /// its segments and build id, when the program headers and the build id note lie in
    /// `bytes`. Its symbols are not there; its layout and identity are.
    pub fn from_headers(path: &Path, bytes: &[u8]) -> Option<ElfObject> {
        let header = Header::parse(bytes).ok()?;
        let endian = header.endian().ok()?;
        let phdrs = header.program_headers(endian, bytes).ok()?;
        let mut loads = Vec::new();
        let mut tls_memsz = 0;
        let mut build_id = None;
        for p in phdrs {
            match p.p_type(endian) {
                object::elf::PT_LOAD => loads.push(Segment {
                    vaddr: p.p_vaddr(endian),
                    offset: p.p_offset(endian),
                    filesz: p.p_filesz(endian),
                    memsz: p.p_memsz(endian),
                    writable: p.p_flags(endian).0 & object::elf::PF_W.0 != 0,
                }),
                object::elf::PT_TLS => tls_memsz += p.p_memsz(endian),
                object::elf::PT_NOTE => {
                    let Ok(Some(mut notes)) = p.notes(endian, bytes) else {
                        continue;
                    };
                    while let Ok(Some(note)) = notes.next() {
                        if note.name() == b"GNU" && note.n_type(endian) == object::elf::NT_GNU_BUILD_ID {
                            build_id = Some(note.desc().to_vec());
                        }
                    }
                }
                _ => {}
            }
        }
        Some(ElfObject {
            path: path.to_path_buf(),
            loads,
            tls_memsz,
            build_id,
        })
    }

    /// The link-time address of a byte at `offset` in the file, if a loadable segment holds it.
    /// A mapping's offset is rounded down to a page, below its segment's own offset, so the
    /// segment is found by its page-rounded start; where that page also ends the segment before
    /// (the file's bytes are shared, the addresses are not), an offset exactly at a segment's
    /// page-rounded start is that segment's, as a mapping that starts there is.
    pub fn vaddr_of_offset(&self, offset: u64) -> Option<u64> {
        let page = 4096;
        let s = self
            .loads
            .iter()
            .find(|s| s.offset & !(page - 1) == offset)
            .or_else(|| {
                self.loads
                    .iter()
                    .find(|s| s.offset & !(page - 1) <= offset && offset < s.offset + s.filesz.max(1))
            })?;
        Some((s.vaddr + offset).wrapping_sub(s.offset))
    }

    /// The build id as lowercase hex.
    pub fn build_id_hex(&self) -> Option<String> {
        self.build_id.as_deref().map(hex)
    }
}

/// The build id as lowercase hex.
pub fn hex(id: &[u8]) -> String {
    id.iter().map(|x| format!("{x:02x}")).collect()
}

/// A symbol of an object's tables (`.symtab`, and `.dynsym`, which survives `strip`): its
/// link-time address and size, its name as stored (mangled), and its section's name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Symbol {
    pub addr: u64,
    pub size: u64,
    pub name: String,
    pub section: String,
}

/// Every defined data or code symbol of the object at `path`, sorted by address, each once.
pub fn symbols(path: &Path) -> Vec<Symbol> {
    let Ok(file) = crate::sys::open_regular(path).and_then(BlockFile::new) else {
        return Vec::new();
    };
    let cache = ReadCache::new(file);
    let Ok(obj) = object::read::File::parse(&cache) else {
        return Vec::new();
    };
    let mut out: Vec<Symbol> = Vec::new();
    for sym in obj.symbols().chain(obj.dynamic_symbols()) {
        if !sym.is_definition() || sym.address() == 0 {
            continue;
        }
        if !matches!(
            sym.kind(),
            object::SymbolKind::Data | object::SymbolKind::Text | object::SymbolKind::Tls
        ) {
            continue;
        }
        let (Ok(name), Some(index)) = (sym.name(), sym.section_index()) else {
            continue;
        };
        let section = obj
            .section_by_index(index)
            .ok()
            .and_then(|s| s.name().ok().map(str::to_owned))
            .unwrap_or_default();
        out.push(Symbol {
            addr: sym.address(),
            size: sym.size(),
            name: name.to_owned(),
            section,
        });
    }
    out.sort_by(|a, b| (a.addr, &a.name).cmp(&(b.addr, &b.name)));
    out.dedup_by(|a, b| a.addr == b.addr && a.name == b.name);
    out
}

/// The link-time value of the dynamic symbol `name` in the object at `path` (`.dynsym`, which
/// survives `strip`).
pub fn dynamic_symbol(path: &Path, name: &str) -> Option<u64> {
    let cache = ReadCache::new(BlockFile::new(crate::sys::open_regular(path).ok()?).ok()?);
    let obj = object::read::File::parse(&cache).ok()?;
    obj.dynamic_symbols()
        .find(|s| s.name_bytes().is_ok_and(|n| n == name.as_bytes()) && s.is_definition())
        .map(|s| s.address())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::mappings::Mappings;

    #[test]
    fn the_launcher_itself_is_a_dynamic_program() {
        let me = std::env::current_exe().unwrap();
        assert_eq!(kind(&me).unwrap(), Kind::Program { dynamic: true });
    }

    #[test]
    fn text_is_not_elf() {
        let p = std::env::temp_dir().join(format!("dmem-elf-test-{}", std::process::id()));
        std::fs::write(&p, b"#!/bin/sh\necho hello\n").unwrap();
        let k = kind(&p).unwrap();
        let _ = std::fs::remove_file(&p);
        assert_eq!(k, Kind::NotElf);
    }

    /// A file's first page, as a core keeps it, gives the object's segments and build id as
    /// the whole file does; a page of something else gives nothing.
    #[test]
    fn the_first_page_gives_the_layout_and_build_id() {
        let me = std::env::current_exe().unwrap();
        let whole = ElfObject::open(&me).unwrap();
        let bytes = std::fs::read(&me).unwrap();
        let page = ElfObject::from_headers(&me, &bytes[..4096]).expect("headers in the first page");
        assert!(page.build_id.is_some());
        assert_eq!(page.build_id, whole.build_id);
        assert_eq!(page.tls_memsz, whole.tls_memsz);
        let pairs = |o: &ElfObject| {
            o.loads
                .iter()
                .map(|s| (s.vaddr, s.offset, s.memsz))
                .collect::<Vec<_>>()
        };
        assert_eq!(pairs(&page), pairs(&whole));
        assert!(ElfObject::from_headers(&me, &[0u8; 4096]).is_none());
    }

    /// The libc this process has mapped.
    fn mapped_libc(maps: &Mappings) -> PathBuf {
        maps.files()
            .into_iter()
            .find(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("libc.so"))
            })
            .expect("libc mapped")
            .to_path_buf()
    }

    /// The running test binary: its own function's address maps back through its segments, and
    /// libc's malloc is found among libc's dynamic symbols where the process has it.
    #[test]
    fn addresses_translate_through_the_segments() {
        let maps = Mappings::of_process(std::process::id() as i32).unwrap();
        let me = std::env::current_exe().unwrap();
        let obj = ElfObject::open(&me).unwrap();
        assert!(obj.build_id.is_some(), "rustc links a build id");
        let bias = maps.bias(&obj).unwrap();
        let here = addresses_translate_through_the_segments as *const () as u64;
        let m = maps.find(here).unwrap();
        assert_eq!(obj.vaddr_of_offset(here - m.start + m.offset), Some(here - bias));

        let libc = mapped_libc(&maps);
        let malloc = dynamic_symbol(&libc, "malloc").expect("malloc in libc's .dynsym");
        let libc_obj = ElfObject::open(&libc).unwrap();
        let real = libc::malloc as *const () as u64;
        assert_eq!(maps.bias(&libc_obj).unwrap() + malloc, real);
    }

    /// A reader of libc that mapped the whole file once more, read-only and below the loader's
    /// mappings (the exit report's symboliser leaves such a mapping in the core), changes nothing.
    #[test]
    fn a_second_mapping_of_the_whole_file_is_not_where_it_was_loaded() {
        use crate::source::mappings::Mapping;
        let maps = Mappings::of_process(std::process::id() as i32).unwrap();
        let libc = mapped_libc(&maps);
        let obj = ElfObject::open(&libc).unwrap();
        let loaded = maps.bias(&obj).unwrap();
        let mut list = maps.list.clone();
        let len = std::fs::metadata(&libc).unwrap().len().next_multiple_of(4096);
        list.push(Mapping {
            start: 0x1000_0000,
            end: 0x1000_0000 + len,
            offset: 0,
            path: Some(libc.clone()),
            readable: true,
            writable: false,
            executable: false,
            special: None,
            build_id: None,
        });
        assert_eq!(Mappings::new(list).bias(&obj), Some(loaded));
        assert_eq!(
            loaded + dynamic_symbol(&libc, "malloc").unwrap(),
            libc::malloc as *const () as u64
        );
    }
}
