//! A core file as the memory of the process it was taken from, read directly, without gdb.
//!
//! The kernel (or gdb's `gcore`) writes each mapping of the process as a PT_LOAD segment, and
//! names the file behind every file-backed mapping in the NT_FILE note. Memory comes from the
//! segments; what a segment left out (the text of a program, which the kernel does not dump by
//! default) is read from the mapped file itself, as a debugger does. The ELF structure is read
//! with the `object` crate.

use crate::analysis::escape::show;
use crate::source::mappings::{Mapping, Mappings};
use crate::source::memory::{Memory, ReadError};
use crate::source::threads::{self, Thread};
use object::elf::{FileHeader64, NT_FILE, NT_PRSTATUS, PT_LOAD, PT_NOTE};
use object::read::elf::{FileHeader, ProgramHeader};
use object::LittleEndian as LE;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// One PT_LOAD segment: `filesz` bytes at `offset` in the core hold the start of the process's
/// memory at `vaddr` (the rest of the segment's memory was left out of the core).
#[derive(Clone, Copy, Debug)]
struct Load {
    vaddr: u64,
    offset: u64,
    filesz: u64,
    /// The mapping's size in the process.
    memsz: u64,
    /// PF_R, PF_W, PF_X.
    flags: u32,
}

/// One file-backed mapping of the process, from NT_FILE.
#[derive(Clone, Debug, PartialEq)]
struct FileMapping {
    start: u64,
    end: u64,
    /// Offset in the file of `start`, in bytes.
    offset: u64,
    path: PathBuf,
}

pub struct CoreDump {
    data: memmap2::Mmap,
    /// Sorted by address.
    loads: Vec<Load>,
    files: Vec<FileMapping>,
    /// When the core was written.
    pub mtime: SystemTime,
    /// Every thread of the process, the one that dumped it first, from the NT_PRSTATUS notes.
    pub threads: Vec<Thread>,
    /// Bytes the segments say the core holds beyond its end, when it was cut short (a size
    /// limit, a full disk).
    pub missing: u64,
    /// The last answer of `loads_upto`: a scan asks for one segment many times in a row.
    last_load: Cell<usize>,
    /// Files mapped into the process, opened on first need (None: unreadable).
    opened: RefCell<HashMap<PathBuf, Option<memmap2::Mmap>>>,
    /// The file on this machine to read each mapped file's left-out bytes from, once its build
    /// id was checked (None: no file of its build, so those bytes are not known).
    files_here: HashMap<PathBuf, Option<PathBuf>>,
}

/// Maps a whole file read-only.
fn map_file(file: &File) -> std::io::Result<memmap2::Mmap> {
    // SAFETY: the map is read-only and private to this process; the only hazard is another
    // process truncating the file while it is mapped, which would fault a read (SIGBUS), as it
    // would for gdb. A core or a program being analysed is not rewritten in place.
    // Populated up front: a scan touches every page, and faulting them in one call is cheaper
    // than one fault per page.
    unsafe { memmap2::MmapOptions::new().populate().map(file) }
}

impl CoreDump {
    pub fn open(path: &Path) -> Result<CoreDump, String> {
        let file = crate::sys::open_regular(path)
            .map_err(|e| format!("cannot open the core {}: {e}", show(path)))?;
        let mtime = file
            .metadata()
            .and_then(|m| m.modified())
            .unwrap_or_else(|_| SystemTime::now());
        let data = map_file(&file).map_err(|e| format!("cannot read the core {}: {e}", show(path)))?;
        let bad = |what: &str| format!("{} is not a usable core file: {what}", show(path));
        let header =
            FileHeader64::<LE>::parse(&*data).map_err(|_| bad("not a 64-bit little-endian ELF file"))?;
        let endian = header.endian().map_err(|_| bad("not a little-endian ELF file"))?;
        if header.e_type.get(endian) != object::elf::ET_CORE {
            return Err(bad("it is an ELF file, but not a core"));
        }
        let phdrs = header
            .program_headers(endian, &*data)
            .map_err(|_| bad("its program headers are cut off"))?;
        let mut loads = Vec::new();
        let mut files = Vec::new();
        let mut thread_list = Vec::new();
        let mut missing = 0u64;
        for ph in phdrs {
            match ph.p_type(endian) {
                PT_LOAD => {
                    let end = ph.p_offset(endian).saturating_add(ph.p_filesz(endian));
                    missing += end.saturating_sub((data.len() as u64).max(ph.p_offset(endian)));
                    loads.push(Load {
                        vaddr: ph.p_vaddr(endian),
                        offset: ph.p_offset(endian),
                        // A core cut short (a size limit, a full disk) keeps what it has.
                        filesz: ph
                            .p_filesz(endian)
                            .min((data.len() as u64).saturating_sub(ph.p_offset(endian))),
                        memsz: ph.p_memsz(endian),
                        flags: ph.p_flags(endian).0,
                    })
                }
                PT_NOTE => {
                    let Ok(Some(mut notes)) = ph.notes(endian, &*data) else {
                        continue;
                    };
                    while let Ok(Some(note)) = notes.next() {
                        if note.name() == b"CORE" && note.n_type(endian) == NT_FILE {
                            files = parse_nt_file(note.desc())
                                .ok_or_else(|| bad("its NT_FILE note is malformed"))?;
                        }
                        if note.name() == b"CORE" && note.n_type(endian) == NT_PRSTATUS {
                            thread_list.extend(threads::from_prstatus(note.desc()));
                        }
                    }
                }
                _ => {}
            }
        }
        if loads.is_empty() {
            return Err(bad("it holds no memory (no PT_LOAD segments)"));
        }
        loads.sort_by_key(|l| l.vaddr);
        Ok(CoreDump {
            data,
            loads,
            files,
            mtime,
            threads: thread_list,
            missing,
            last_load: Cell::new(0),
            opened: RefCell::new(HashMap::new()),
            files_here: HashMap::new(),
        })
    }

    /// The process's file mappings (NT_FILE), with the permissions of the segments that dumped
    /// them: what the symboliser and the search for the layout descriptor work from.
    pub fn mappings(&self) -> Mappings {
        Mappings::new(
            self.files
                .iter()
                .map(|f| {
                    let flags = self
                        .loads
                        .iter()
                        .find(|l| l.vaddr == f.start)
                        .map_or(0, |l| l.flags);
                    Mapping {
                        start: f.start,
                        end: f.end,
                        offset: f.offset,
                        path: Some(f.path.clone()),
                        readable: flags & object::elf::PF_R.0 != 0,
                        writable: flags & object::elf::PF_W.0 != 0,
                        executable: flags & object::elf::PF_X.0 != 0,
                        special: None,
                        build_id: None,
                    }
                })
                .collect(),
        )
    }

    /// How many segments start at or below `addr` (the one that may hold it is the last of
    /// them): the last answer when it still holds, else a binary search.
    fn loads_upto(&self, addr: u64) -> usize {
        let i = self.last_load.get();
        let fits = i > 0
            && i <= self.loads.len()
            && self.loads[i - 1].vaddr <= addr
            && self.loads.get(i).is_none_or(|l| l.vaddr > addr);
        if fits {
            return i;
        }
        let i = self.loads.partition_point(|l| l.vaddr <= addr);
        self.last_load.set(i);
        i
    }

    /// Fills `buf` with the process's memory at `addr`: from the core's segments, or, where
    /// they left it out, from the file mapped there. False if some byte is in neither.
    fn fill(&self, mut addr: u64, mut buf: &mut [u8]) -> bool {
        while !buf.is_empty() {
            let n = self.read_some(addr, buf);
            if n == 0 {
                return false;
            }
            buf = &mut buf[n..];
            addr += n as u64;
        }
        true
    }

    /// Reads what one segment or one mapped file holds from `addr` on, up to `buf.len()` bytes;
    /// returns how many.
    fn read_some(&self, addr: u64, buf: &mut [u8]) -> usize {
        let i = self.loads_upto(addr);
        if let Some(l) = i.checked_sub(1).map(|i| &self.loads[i]) {
            let rel = addr - l.vaddr;
            if rel < l.filesz {
                let n = ((l.filesz - rel) as usize).min(buf.len());
                let at = (l.offset + rel) as usize;
                buf[..n].copy_from_slice(&self.data[at..at + n]);
                return n;
            }
        }
        // Not dumped: the bytes are the mapped file's, if a file is mapped there.
        let Some(m) = self.files.iter().find(|m| m.start <= addr && addr < m.end) else {
            return 0;
        };
        let here = match self.files_here.get(&m.path) {
            Some(None) => return 0,
            Some(Some(p)) => p,
            None => &m.path,
        };
        let mut opened = self.opened.borrow_mut();
        let file = opened
            .entry(m.path.clone())
            .or_insert_with(|| crate::sys::open_regular(here).and_then(|f| map_file(&f)).ok());
        let Some(file) = file else {
            return 0;
        };
        let at = m.offset + (addr - m.start);
        let avail = (m.end - addr).min((file.len() as u64).saturating_sub(at));
        let n = (avail as usize).min(buf.len());
        if n > 0 {
            buf[..n].copy_from_slice(&file[at as usize..at as usize + n]);
        }
        n
    }
}

impl CoreDump {
    /// The bytes the core itself holds from `addr` to the end of its segment there (never a
    /// mapped file's): where a file's first page is, its ELF headers as the process had them.
    pub fn dumped(&self, addr: u64) -> Option<&[u8]> {
        let (start, end) = self.extent(addr)?;
        let i = self.loads_upto(addr) - 1;
        let at = (self.loads[i].offset + (addr - start)) as usize;
        self.data.get(at..at + (end - addr) as usize)
    }

    /// Has what the core left out of the mapped file `path` read from `here`, the file on this
    /// machine of the same build, or not at all (None).
    pub fn use_file(&mut self, path: &Path, here: Option<PathBuf>) {
        self.opened.get_mut().remove(path);
        self.files_here.insert(path.to_path_buf(), here);
    }

    /// The executable the core's process ran: the file its first mapping maps (the kernel
    /// lists the program first), if that file is still there.
    pub fn program(&self) -> Option<PathBuf> {
        self.files.first().map(|f| f.path.clone())
    }
}

impl Memory for CoreDump {
    /// Straight from the mapped core, no copy: the segments' bytes, and for what a segment
    /// left out, the mapped file's.
    fn regions(&self) -> Vec<crate::analysis::maps::Mapping> {
        // One segment per mapping, as the kernel and gdb write cores.
        self.loads
            .iter()
            .map(|l| crate::analysis::maps::Mapping {
                start: l.vaddr as usize,
                end: (l.vaddr + l.memsz) as usize,
                readable: l.flags & object::elf::PF_R.0 != 0,
                writable: l.flags & object::elf::PF_W.0 != 0,
                special: false,
                // NT_FILE names each file-backed mapping; a segment starts where its mapping
                // does.
                file: self.files.iter().any(|f| f.start <= l.vaddr && l.vaddr < f.end),
                executable: l.flags & object::elf::PF_X.0 != 0,
            })
            .collect()
    }

    fn pieces(&self, start: u64, end: u64, f: &mut dyn FnMut(u64, &[u8])) -> bool {
        let mut all = true;
        let mut at = start;
        while at < end {
            let i = self.loads_upto(at);
            let seg = i
                .checked_sub(1)
                .map(|i| &self.loads[i])
                .filter(|l| at - l.vaddr < l.filesz);
            match seg {
                Some(l) => {
                    let stop = end.min(l.vaddr + l.filesz);
                    let off = (l.offset + at - l.vaddr) as usize;
                    f(at, &self.data[off..off + (stop - at) as usize]);
                    at = stop;
                }
                None => {
                    // Left out of the core, or not mapped: try a page from the file, or skip to
                    // the next segment.
                    let next_seg = self.loads.get(i).map_or(end, |l| l.vaddr.min(end));
                    let page_end = ((at & !4095) + 4096).min(end);
                    let mut buf = vec![0u8; (page_end - at) as usize];
                    if self.fill(at, &mut buf) {
                        f(at, &buf);
                        at = page_end;
                    } else {
                        all = false;
                        at = next_seg.max(page_end);
                    }
                }
            }
        }
        all
    }

    fn borrow(&self, addr: u64, len: u64) -> Option<&[u8]> {
        let l = &self.loads[self.loads_upto(addr).checked_sub(1)?];
        let rel = addr - l.vaddr;
        if rel.checked_add(len)? > l.filesz {
            return None;
        }
        let at = usize::try_from(l.offset + rel).ok()?;
        self.data.get(at..at.checked_add(usize::try_from(len).ok()?)?)
    }

    fn shared(&self) -> Option<Vec<(u64, &[u8])>> {
        let run = |l: &Load| {
            let at = usize::try_from(l.offset).ok()?;
            Some((
                l.vaddr,
                self.data
                    .get(at..at.checked_add(usize::try_from(l.filesz).ok()?)?)?,
            ))
        };
        Some(self.loads.iter().filter_map(run).collect())
    }

    /// Every header a walk can believe is in the core's own bytes (a heap is never left out
    /// of a core while the files mapped beside it may be).
    fn bound(&self) -> u64 {
        self.data.len() as u64
    }

    fn extent(&self, addr: u64) -> Option<(u64, u64)> {
        let i = self.loads_upto(addr);
        let l = &self.loads[i.checked_sub(1)?];
        (addr - l.vaddr < l.filesz).then_some((l.vaddr, l.vaddr + l.filesz))
    }

    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), ReadError> {
        if self.fill(addr, buf) {
            Ok(())
        } else {
            Err(ReadError::Unmapped)
        }
    }
}

/// The NT_FILE note's descriptor: a count, the page size, `count` triples (start, end, offset
/// in pages), then `count` NUL-terminated paths.
fn parse_nt_file(desc: &[u8]) -> Option<Vec<FileMapping>> {
    use object::endian::U64;
    use std::os::unix::ffi::OsStrExt;
    let mut bytes = object::Bytes(desc);
    let count = bytes.read::<U64<LE>>().ok()?.get(LE);
    let page = bytes.read::<U64<LE>>().ok()?.get(LE);
    let triples = bytes
        .read_slice::<[U64<LE>; 3]>(usize::try_from(count).ok()?)
        .ok()?;
    let mut out = Vec::with_capacity(triples.len());
    for t in triples {
        let path = bytes.read_string().ok()?;
        out.push(FileMapping {
            start: t[0].get(LE),
            end: t[1].get(LE),
            offset: t[2].get(LE).checked_mul(page)?,
            path: PathBuf::from(std::ffi::OsStr::from_bytes(path)),
        });
    }
    Some(out)
}
