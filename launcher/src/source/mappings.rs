//! Which file is mapped where in a process: from `/proc/PID/maps` for a running one. A core
//! file's NT_FILE note gives the same list, so everything downstream (finding the layout
//! descriptor, symbolising) takes a `Mappings` and does not care where it came from.

use crate::analysis::maps::MapsLine;
use crate::source::elf::ElfObject;
use std::collections::HashMap;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// What stands for one mapped file.
#[derive(Clone, Debug, Default)]
pub struct Local {
    /// The file to read the object from (its headers, symbols and bytes): one whose build id
    /// is the target's. None when nothing matched: its addresses are shown as `file+offset`.
    pub exe: Option<PathBuf>,
    /// A detached debug file of the same build, when one was found up front.
    pub debug: Option<PathBuf>,
    /// The build id the target recorded for the file, in hex.
    pub build_id: Option<String>,
    /// The object's segments as the target's own copy of its ELF headers gives them: where no
    /// file matched, enough to lay out its data (roots) and translate its addresses.
    pub headers: Option<ElfObject>,
    /// Whether the file is left unread because the user on whose behalf the process is read
    /// may not read it (see `Mappings::of_process`): its frames are `file+offset`.
    pub withheld: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    /// Offset in the file of the byte mapped at `start`.
    pub offset: u64,
    /// The mapped file; `None` for anonymous memory, the heap, stacks and the like.
    pub path: Option<PathBuf>,
    /// `r`, `w`, `x` as in `/proc/PID/maps`, when known.
    pub readable: bool,
    pub writable: bool,
    pub executable: bool,
    /// The kernel's name of a region that is no file: `[heap]`, `[stack]`, `[vdso]`.
    pub special: Option<String>,
    /// The file's GNU build id in hex, once `fill_build_ids` has looked.
    pub build_id: Option<String>,
}

#[derive(Clone, Debug, Default)]
pub struct Mappings {
    /// Sorted by start address, not overlapping.
    pub list: Vec<Mapping>,
    /// The file on this machine that stands for each mapped file, by the path the target gave
    /// it (see `files`). A file not listed is read at its path.
    pub local: HashMap<PathBuf, Local>,
}

impl Mappings {
    /// What to add to a link-time address of this object to get its address in the process:
    /// taken from its executable mapping (else its first), whose offset says which part of the
    /// file sits there. The loader maps an object segment by segment, but a reader of the file
    /// may map it again whole and read-only (the exit report's symboliser does, and its mapping
    /// stays in the core), at an address that says nothing of where the object was loaded.
    pub fn bias(&self, obj: &ElfObject) -> Option<u64> {
        let m = self
            .of_file(&obj.path)
            .find(|m| m.executable)
            .or_else(|| self.of_file(&obj.path).next())?;
        Some(m.start.wrapping_sub(obj.vaddr_of_offset(m.offset)?))
    }

    /// Reads the build id of every mapped file (each file once) into its mappings: for output
    /// that names objects by build id (heap profiles' mappings). The target's own record of it
    /// where there is one (a core's), else the mapped file's.
    pub fn fill_build_ids(&mut self) {
        let maps = self;
        let mut ids: std::collections::HashMap<PathBuf, Option<String>> = Default::default();
        for i in 0..maps.list.len() {
            let Some(p) = maps.list[i].path.clone() else {
                continue;
            };
            let id = ids
                .entry(p.clone())
                .or_insert_with(|| match maps.local.get(&p).and_then(|l| l.build_id.clone()) {
                    Some(id) => Some(id),
                    None => maps
                        .local_file(&p)
                        .and_then(|f| ElfObject::open(f).ok())
                        .and_then(|o| o.build_id_hex()),
                })
                .clone();
            maps.list[i].build_id = id;
        }
    }

    pub fn new(mut list: Vec<Mapping>) -> Mappings {
        list.sort_by_key(|m| m.start);
        Mappings {
            list,
            local: HashMap::new(),
        }
    }

    /// The mappings of a running process, each file read through the process's own mapping
    /// of it (`/proc/PID/map_files/START-END`), which stays the file it mapped when a package
    /// upgrade replaces or removes the one at its path. Where those links cannot be read (a
    /// kernel that keeps them to CAP_SYS_ADMIN), files are read at their paths.
    pub fn of_process(pid: i32) -> std::io::Result<Mappings> {
        // Read as bytes: a path need not be UTF-8, and a program run from such a directory is
        // as readable as any other.
        let bytes = std::fs::read(format!("/proc/{pid}/maps"))?;
        let mut maps = Mappings::new(bytes.split(|&b| b == b'\n').filter_map(parse_raw_line).collect());
        let link = |m: &Mapping| PathBuf::from(format!("/proc/{pid}/map_files/{:x}-{:x}", m.start, m.end));
        let reachable = maps
            .list
            .iter()
            .find(|m| m.path.is_some())
            .is_some_and(|m| std::fs::metadata(link(m)).is_ok());
        if reachable {
            for m in &maps.list {
                if let Some(p) = &m.path {
                    maps.local.entry(p.clone()).or_insert_with(|| Local {
                        exe: Some(link(m)),
                        ..Local::default()
                    });
                }
            }
        }
        if crate::sys::acting_for().is_some() {
            maps.withhold_unreadable();
        }
        Ok(maps)
    }

    /// Read on a user's behalf (`sys::with_file_rights_of`): leaves out every mapped file that
    /// user may not read, so that it is shown as `file+offset` rather than named from a file
    /// the user could not have opened. The user must be able to look the path up (a file in a
    /// directory closed to it is refused even if the file itself is not), and to open the very
    /// file mapped (through `map_files`, whose open the kernel checks against the file's own
    /// permissions for this thread's file system user), or the file at the path where the links
    /// cannot be followed. A file deleted since it was mapped has no path to look up: its own
    /// permissions decide.
    fn withhold_unreadable(&mut self) {
        let denied =
            |r: std::io::Result<()>| r.is_err_and(|e| e.kind() == std::io::ErrorKind::PermissionDenied);
        for path in self
            .files()
            .into_iter()
            .map(Path::to_path_buf)
            .collect::<Vec<_>>()
        {
            let file = match self.local.get(&path) {
                Some(l) => l.exe.clone(),
                None => Some(path.clone()),
            };
            let Some(file) = file else { continue };
            let refused = denied(std::fs::metadata(&path).map(drop))
                || denied(crate::sys::open_regular(&file).map(drop));
            if refused {
                self.local.insert(
                    path,
                    Local {
                        withheld: true,
                        ..Local::default()
                    },
                );
            }
        }
    }

    /// The file to read the object mapped as `path` from: the one that matched its build id,
    /// the process's own mapping of it, or the path itself when nothing was looked up. None
    /// when no file of its build was found.
    pub fn local_file<'a>(&'a self, path: &'a Path) -> Option<&'a Path> {
        match self.local.get(path) {
            Some(l) => l.exe.as_deref(),
            None => Some(path),
        }
    }

    /// The mapping that holds `addr`.
    /// The mappings as the rule of roots in `analysis::roots` sees them.
    pub fn regions(&self) -> Vec<crate::analysis::maps::Mapping> {
        self.list
            .iter()
            .map(|m| crate::analysis::maps::Mapping {
                start: m.start as usize,
                end: m.end as usize,
                readable: m.readable,
                writable: m.writable,
                special: m.special.is_some(),
                file: m.path.is_some(),
                executable: m.executable,
            })
            .collect()
    }

    pub fn find(&self, addr: u64) -> Option<&Mapping> {
        let i = self.list.partition_point(|m| m.start <= addr);
        let m = self.list.get(i.checked_sub(1)?)?;
        (addr < m.end).then_some(m)
    }

    /// Every mapped file once, in the order of its first mapping.
    pub fn files(&self) -> Vec<&Path> {
        let mut seen: Vec<&Path> = Vec::new();
        for m in &self.list {
            if let Some(p) = m.path.as_deref() {
                if !seen.contains(&p) {
                    seen.push(p);
                }
            }
        }
        seen
    }

    /// The mappings of one file.
    pub fn of_file<'a>(&'a self, path: &'a Path) -> impl Iterator<Item = &'a Mapping> + 'a {
        self.list.iter().filter(move |m| m.path.as_deref() == Some(path))
    }
}

/// One line of `/proc/PID/maps`, read by the analysis's one reader.
/// A line of `/proc/PID/maps` as the kernel wrote it. Only the path may be other than UTF-8,
/// and it is the only field with a `/`: the fields before it are parsed as text, the path
/// kept as its bytes.
fn parse_raw_line(line: &[u8]) -> Option<Mapping> {
    if let Ok(text) = std::str::from_utf8(line) {
        return parse_line(text);
    }
    let at = line.iter().position(|&b| b == b'/')?;
    let mut m = parse_line(std::str::from_utf8(&line[..at]).ok()?)?;
    let path = &line[at..];
    let path = path.strip_suffix(b" (deleted)").unwrap_or(path);
    m.path = Some(PathBuf::from(std::ffi::OsStr::from_bytes(path)));
    Some(m)
}

fn parse_line(line: &str) -> Option<Mapping> {
    let l = MapsLine::parse(line)?;
    let path = match l.path {
        "" => None,
        _ if l.special() => None,
        // A file deleted since it was mapped (a library replaced by an upgrade): its symbols may
        // no longer match, but the name still tells the user what it was.
        p => Some(PathBuf::from(p.strip_suffix(" (deleted)").unwrap_or(p))),
    };
    Some(Mapping {
        start: l.start as u64,
        end: l.end as u64,
        offset: l.offset,
        path,
        readable: l.readable,
        writable: l.writable,
        executable: l.executable,
        special: l.special().then(|| l.path.to_owned()),
        build_id: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_that_is_not_utf8_is_kept_as_its_bytes() {
        let line = b"7f1c2a000000-7f1c2a022000 r-xp 00028000 08:01 1234    /tmp/d\xe9j\xe0/prog (deleted)";
        let m = parse_raw_line(line).unwrap();
        assert_eq!(m.start, 0x7f1c2a000000);
        assert!(m.readable && m.executable);
        let want = std::ffi::OsStr::from_bytes(b"/tmp/d\xe9j\xe0/prog");
        assert_eq!(m.path.as_deref(), Some(Path::new(want)));
        assert_eq!(m.special, None);
    }

    #[test]
    fn parses_maps_lines() {
        let m = parse_line(
            "7f1c2a000000-7f1c2a022000 r-xp 00028000 08:01 1234    /usr/lib/x86_64-linux-gnu/libc.so.6",
        )
        .unwrap();
        assert_eq!(
            (m.start, m.end, m.offset),
            (0x7f1c2a000000, 0x7f1c2a022000, 0x28000)
        );
        assert_eq!(
            m.path.as_deref(),
            Some(Path::new("/usr/lib/x86_64-linux-gnu/libc.so.6"))
        );
        assert!(m.readable && m.executable);
        let heap = parse_line("55d0c0a4e000-55d0c0a6f000 rw-p 00000000 00:00 0          [heap]").unwrap();
        assert_eq!(
            (heap.path, heap.special.as_deref(), heap.writable),
            (None, Some("[heap]"), true)
        );
        let anon = parse_line("7f1c2a022000-7f1c2a023000 ---p 00000000 00:00 0 ").unwrap();
        assert!(!anon.readable && anon.path.is_none());
        let gone = parse_line("1000-2000 r--p 00000000 08:01 9 /tmp/a b.so (deleted)").unwrap();
        assert_eq!(gone.path.as_deref(), Some(Path::new("/tmp/a b.so")));
    }

    #[test]
    fn finds_own_mappings() {
        let maps = Mappings::of_process(std::process::id() as i32).unwrap();
        let here = finds_own_mappings as *const () as u64;
        let m = maps.find(here).expect("this function's own mapping");
        assert!(m.executable);
        let exe = std::env::current_exe().unwrap();
        assert_eq!(m.path.as_deref(), Some(exe.as_path()));
        assert!(maps.files().contains(&exe.as_path()));
        assert_eq!(maps.find(0), None);
        let mut maps = maps;
        maps.fill_build_ids();
        let id = maps
            .find(here)
            .unwrap()
            .build_id
            .as_deref()
            .expect("rustc links a build id");
        assert!(
            id.len() >= 16 && id.chars().all(|c| c.is_ascii_hexdigit()),
            "{id}"
        );
    }
}
