//! Return addresses to functions, files and lines, without gdb: from a process's mappings and
//! each mapped object's ELF symbols and DWARF, through the gimli project's `addr2line` (which
//! reads DWARF with `gimli` and ELF with `object`, and demangles C++ and Rust names).
//!
//! Each object is opened once and kept; so is the answer for each address. An object is read
//! from the file `Mappings::local_file` names: the one of the target's build (see
//! `source::files`). One without DWARF of its own is looked up in the detached debug files by its
//! build id (`/usr/lib/debug/.build-id/xx/yyyy.debug`, where Debian's `-dbg` and `-dbgsym`
//! packages put them, or a debuginfod server), and falls back to its symbol table, which gives
//! the function but no line. An address in a file of which no copy of its build was found is
//! shown as `file+offset`: never with the name of another build's function.

use crate::source::elf::ElfObject;
use crate::source::mappings::Local;
use crate::source::mappings::Mappings;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::mpsc;

pub use crate::analysis::frame::Frame;
use crate::analysis::symbolize::Debug;

/// One mapped object, opened for symbolisation.
pub struct Object {
    pub elf: ElfObject,
    path: Rc<Path>,
    /// Symbols and lines, named the one way both sides name frames (`analysis::symbolize`).
    debug: Debug,
}

impl Object {
    /// The object mapped as `path`, read from `local` (the file of its build, if one was
    /// found), with the debug file found up front (`found`), else looked up by build id when the
    /// object has no DWARF of its own.
    fn open(path: &Path, local: &Local) -> Option<Object> {
        let (elf, debug) = Object::parts(path, local, true).ok()??;
        Some(Object::of(path, elf, debug))
    }

    fn of(path: &Path, elf: ElfObject, debug: Debug) -> Object {
        Object {
            elf,
            path: Rc::from(path),
            debug,
        }
    }

    /// What `open` reads, on any thread. Without `fetch`, Err where only a debuginfod server
    /// could give the debug file: that is left to `open`, when a frame asks for it.
    fn parts(path: &Path, local: &Local, fetch: bool) -> Result<Option<(ElfObject, Debug)>, ()> {
        let elf = match local.exe.as_deref() {
            Some(f) => ElfObject::open_as(path, f).ok(),
            // No file of its build, but its debug file: laid out by the target's own headers.
            None => local.headers.clone(),
        };
        let mut unfetched = false;
        let debug = Debug::open(local.exe.as_deref(), || {
            local.debug.clone().or_else(|| {
                let id = local
                    .build_id
                    .clone()
                    .or_else(|| elf.as_ref().and_then(ElfObject::build_id_hex))?;
                if fetch {
                    return crate::source::files::debug_file(&id, path);
                }
                let found = crate::source::files::local_debug_file(&id);
                unfetched = found.is_none() && !crate::source::debuginfod::urls().is_empty();
                found
            })
        });
        if unfetched {
            return Err(());
        }
        Ok(debug.zip(elf).map(|(debug, elf)| (elf, debug)))
    }

    /// The frames at link-time address `probe` (already moved back into the call instruction).
    fn frames(&self, pc: u64, probe: u64) -> Vec<Frame> {
        self.debug.frames(pc, probe, Some(self.path.clone()))
    }
}

/// Symbolises the addresses of one process, given its mappings.
pub struct Symbolizer {
    maps: Mappings,
    objects: HashMap<PathBuf, Option<Rc<Object>>>,
    pcs: HashMap<u64, Rc<[Frame]>>,
    /// Objects being opened on other threads (`open_ahead`), a thread for each call.
    ahead: Vec<Ahead>,
}

/// The objects a thread opens ahead of their first frame, by key, and where each arrives (key,
/// path mapped): opened, or left to `Symbolizer::object` (Err) when it needs a debuginfod
/// server.
struct Ahead {
    keys: HashSet<PathBuf>,
    arrive: mpsc::Receiver<Arrived>,
}

type Arrived = (PathBuf, PathBuf, Result<Option<(ElfObject, Debug)>, ()>);

impl Symbolizer {
    pub fn new(maps: Mappings) -> Symbolizer {
        Symbolizer {
            maps,
            objects: HashMap::new(),
            pcs: HashMap::new(),
            ahead: Vec::new(),
        }
    }

    /// Opens, on a thread of its own, the objects the return addresses `pcs` lie in, so that
    /// their symbols and DWARF (a libc's detached debug file is tens of megabytes, compressed)
    /// are read while the heap is classified rather than when the first stack is named. An
    /// object that is withheld from the user, or whose debug file only a debuginfod server has,
    /// is opened as before, when its first frame is named.
    pub fn open_ahead(&mut self, pcs: impl IntoIterator<Item = u64>) {
        let mut seen = HashSet::new();
        let paths: Vec<PathBuf> = pcs
            .into_iter()
            .filter_map(|pc| self.maps.find(pc).and_then(|m| m.path.clone()))
            .filter(|p| seen.insert(p.clone()))
            .collect();
        self.open_paths_ahead(paths);
    }

    /// As `open_ahead`, before any stack is known: the objects nearly every allocation's stack
    /// passes through, the program itself (`exe`), its C library and C++ runtime, opened while
    /// the lists are walked.
    pub fn open_usual_ahead(&mut self, exe: Option<&Path>) {
        let usual = |p: &Path| {
            Some(p) == exe
                || p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("libc.so") || n.starts_with("libstdc++.so"))
        };
        let paths = self
            .maps
            .files()
            .into_iter()
            .filter(|p| usual(p))
            .map(Path::to_path_buf)
            .collect();
        self.open_paths_ahead(paths);
    }

    fn open_paths_ahead(&mut self, paths: Vec<PathBuf>) {
        let mut todo = Vec::new();
        for path in paths {
            let (key, local) = self.local(&path);
            let opened = self.objects.contains_key(&key);
            let opening = self.ahead.iter().any(|a| a.keys.contains(&key));
            if !local.withheld && !opened && !opening {
                todo.push((key, path, local));
            }
        }
        if todo.is_empty() {
            return;
        }
        let keys = todo.iter().map(|(k, _, _)| k.clone()).collect();
        let (send, arrive) = mpsc::channel();
        let opener = move || {
            for (key, path, local) in todo {
                let parts = Object::parts(&path, &local, false);
                if send.send((key, path, parts)).is_err() {
                    return;
                }
            }
        };
        // Without the thread, every object is opened when its first frame is named.
        if std::thread::Builder::new()
            .name("symbols".into())
            .spawn(opener)
            .is_ok()
        {
            self.ahead.push(Ahead { keys, arrive });
        }
    }

    /// Where `path` is read from, and the key its object is kept under.
    fn local(&self, path: &Path) -> (PathBuf, Local) {
        let local = self.maps.local.get(path).cloned().unwrap_or_else(|| Local {
            exe: Some(path.to_path_buf()),
            ..Local::default()
        });
        let key = local.exe.clone().unwrap_or_else(|| path.to_path_buf());
        (key, local)
    }

    /// Takes the objects opened ahead, up to the one kept under `key`, if it is being opened.
    fn arrive(&mut self, key: &Path) {
        if self.objects.contains_key(key) {
            return;
        }
        let Some(ahead) = self.ahead.iter().find(|a| a.keys.contains(key)) else {
            return;
        };
        // A thread that ended early sent what it opened: the rest are opened here.
        while let Ok((k, path, opened)) = ahead.arrive.recv() {
            if let Ok(parts) = opened {
                let obj = parts.map(|(elf, debug)| Rc::new(Object::of(&path, elf, debug)));
                self.objects.insert(k.clone(), obj);
            }
            if k == key {
                break;
            }
        }
    }

    /// Takes new mappings (a running process may have loaded or unloaded libraries), keeping
    /// the objects already opened, and the answers too unless a file's mapping changed:
    /// anonymous memory comes and goes with every large malloc and names no function.
    pub fn set_mappings(&mut self, maps: Mappings) {
        let files = |m: &Mappings| {
            m.list
                .iter()
                .filter(|m| m.path.is_some())
                .cloned()
                .collect::<Vec<_>>()
        };
        if files(&maps) != files(&self.maps) {
            self.pcs.clear();
        }
        self.maps = maps;
    }

    /// The object mapped as `path`, opened once (by the file read, which a running process
    /// may map anew at the same path).
    pub fn object(&mut self, path: &Path) -> Option<Rc<Object>> {
        let (key, local) = self.local(path);
        self.arrive(&key);
        self.objects
            .entry(key)
            .or_insert_with(|| {
                if local.withheld {
                    // Once per object, when its first frame is named.
                    eprintln!(
                        "dmem: warning: user {} may not read {}, so its frames show as {}+offset",
                        crate::sys::acting_for().map_or_else(|| "?".to_owned(), |u| u.to_string()),
                        crate::analysis::escape::show(path),
                        path.file_name().map_or_else(
                            || crate::analysis::escape::show(path),
                            crate::analysis::escape::show
                        ),
                    );
                }
                Object::open(path, &local).map(Rc::new)
            })
            .clone()
    }

    /// The frames of return address `pc`: more than one when the call was inlined.
    pub fn frames(&mut self, pc: u64) -> Rc<[Frame]> {
        if let Some(f) = self.pcs.get(&pc) {
            return f.clone();
        }
        let frames: Rc<[Frame]> = self.lookup(pc).into();
        self.pcs.insert(pc, frames.clone());
        frames
    }

    fn lookup(&mut self, pc: u64) -> Vec<Frame> {
        let Some(m) = self.maps.find(pc).cloned() else {
            return vec![Frame::bare(pc, None)];
        };
        let Some(path) = m.path.clone() else {
            return vec![Frame::bare(pc, None)];
        };
        let Some(obj) = self.object(&path) else {
            let mut f = Frame::bare(pc, Some(Rc::from(path.as_path())));
            if self.maps.local_file(&path).is_none() {
                // No file of its build: where in the file, which the user can look up in the
                // right build.
                f.offset = Some(pc - m.start + m.offset);
            }
            return vec![f];
        };
        // A return address points after the call: look up the byte before it, in the call.
        let Some(probe) = obj.elf.vaddr_of_offset(pc - m.start + m.offset) else {
            return vec![Frame::bare(pc, Some(obj.path.clone()))];
        };
        obj.frames(pc, probe.wrapping_sub(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[inline(never)]
    fn return_address_here() -> u64 {
        std::hint::black_box(7)
    }

    /// A C++ fixture, mapped (on paper) at an address of our choosing: its function comes out
    /// demangled, with its source file and line from DWARF.
    #[test]
    fn names_a_cpp_function_with_its_line() {
        let exe = std::path::Path::new(dmem_fixtures::DIR).join("leak_cxx");
        let cache = object::read::ReadCache::new(std::fs::File::open(&exe).unwrap());
        let file = object::File::parse(&cache).unwrap();
        use object::{Object, ObjectSymbol};
        let sym = file
            .symbols()
            .find(|s| {
                s.name()
                    .is_ok_and(|n| n.starts_with("_Z") && n.contains("make_a"))
            })
            .expect("make_a's mangled symbol");
        let base = 0x5555_0000_0000u64;
        let maps = Mappings::new(vec![crate::source::mappings::Mapping {
            start: base,
            end: base + 0x10_0000,
            offset: 0,
            path: Some(exe.clone()),
            readable: true,
            writable: false,
            executable: true,
            special: None,
            build_id: None,
        }]);
        let mut s = Symbolizer::new(maps);
        // The fixture's first segment maps file offset 0 at address 0, so the address in the
        // "process" is the base plus the symbol's value; 4 bytes in, as a return address.
        let frames = s.frames(base + sym.address() + 4);
        let f = frames.last().unwrap();
        let name = f.function.as_deref().unwrap_or("");
        assert!(name.contains("make_a") && !name.starts_with("_Z"), "{frames:?}");
        assert!(
            f.file.as_deref().unwrap_or("").ends_with("leak_cxx.cpp"),
            "{frames:?}"
        );
        assert!(f.line.unwrap_or(0) > 0, "{frames:?}");
        assert_eq!(f.offset, Some(4), "{frames:?}");
        assert!(
            crate::model::frames::text(f).starts_with(&format!("{name}+0x4 (")),
            "{}",
            crate::model::frames::text(f)
        );
    }

    /// This test binary symbolises itself: the function's Rust name, demangled, from DWARF
    /// (release builds keep line tables) or the symbol table.
    #[test]
    fn names_a_function_of_this_binary() {
        let maps = Mappings::of_process(std::process::id() as i32).unwrap();
        let mut s = Symbolizer::new(maps);
        // Two bytes into the function: as if a call in it returned there.
        let pc = return_address_here as *const () as u64 + 2;
        assert_eq!(return_address_here(), 7);
        let frames = s.frames(pc);
        let last = frames.last().unwrap();
        let name = last.function.as_deref().unwrap_or("");
        assert!(name.contains("return_address_here"), "{frames:?}");
        assert!(!name.starts_with("_ZN"), "demangled: {name}");
        assert_eq!(
            last.object.as_deref(),
            Some(std::env::current_exe().unwrap().as_path())
        );
        assert!(Rc::ptr_eq(&frames, &s.frames(pc)), "answers are cached");
        let nowhere = s.frames(8);
        assert_eq!((nowhere.len(), nowhere[0].function.as_deref()), (1, None));
    }

    /// Objects opened ahead on another thread name a frame as those opened at its first frame
    /// do; an address in no object asks for nothing.
    #[test]
    fn an_object_opened_ahead_names_frames_alike() {
        let maps = Mappings::of_process(std::process::id() as i32).unwrap();
        let pc = return_address_here as *const () as u64 + 2;
        let mut ahead = Symbolizer::new(maps.clone());
        ahead.open_ahead([pc, 8, pc]);
        assert_eq!(ahead.ahead.iter().map(|a| a.keys.len()).sum::<usize>(), 1);
        assert!(ahead.objects.is_empty(), "opened on the thread, not here");
        let want = Symbolizer::new(maps).frames(pc);
        assert_eq!(ahead.frames(pc), want);
        assert_eq!(ahead.objects.len(), 1);
        // Opened already: no thread for it.
        let threads = ahead.ahead.len();
        ahead.open_ahead([pc]);
        assert_eq!(ahead.ahead.len(), threads);
        let mut none = Symbolizer::new(Mappings::new(Vec::new()));
        none.open_ahead([pc]);
        assert!(none.ahead.is_empty());
    }

    /// Before any stack is known, the C library is opened ahead, and names its functions as it
    /// does when opened at its first frame.
    #[test]
    fn the_c_library_is_opened_ahead_of_any_stack() {
        let maps = Mappings::of_process(std::process::id() as i32).unwrap();
        let mut ahead = Symbolizer::new(maps.clone());
        ahead.open_usual_ahead(None);
        // Only libc: the test program is neither named nor C++. Keyed by the file read, which
        // for a running process is its own mapping of it.
        let keys: Vec<PathBuf> = ahead.ahead.iter().flat_map(|a| a.keys.iter().cloned()).collect();
        assert_eq!(keys.len(), 1, "{keys:?}");
        // Into malloc, as a return address there would be.
        let pc = libc::malloc as *const () as u64 + 4;
        let frames = ahead.frames(pc);
        assert_eq!(frames, Symbolizer::new(maps).frames(pc));
        assert!(
            frames[0]
                .function
                .as_deref()
                .is_some_and(|f| f.contains("malloc")),
            "{frames:?}"
        );
        assert!(ahead.objects.contains_key(&keys[0]));
    }
}
