//! A process image to analyse: a core file (`PROG CORE`, or a core alone, whose program its
//! notes name) or a running process (`PID`). One parser of those words for every command, one
//! opener, and one wording for each way they can be wrong.

use crate::analysis::escape::show;
use crate::source::coredump::CoreDump;
use crate::source::elf::{self, Kind};
use crate::source::files;
use crate::source::glibc;
use crate::source::heapwalk::{self, Layout, LocateError, Walk, WalkOptions, FLAG_RECORDING};
use crate::source::live;
use crate::source::mappings::Mappings;
use crate::source::memory::{LiveMemory, Memory};
use crate::source::threads::Thread;
use crate::{failed, usage, Result};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// What the command line named.
#[derive(Clone, Debug, PartialEq)]
pub enum Target {
    Pid(i32),
    /// A core, with the program the user named (or None: the one the core's notes name).
    Core {
        prog: Option<PathBuf>,
        core: PathBuf,
    },
}

/// How the command line names a process image, for messages.
pub const SOURCE_WORDS: &str = "PROG CORE, a core file alone or a PID";

impl Target {
    /// Takes the image's words from the front of `words` (`PID`, `CORE` or `PROG CORE`) and
    /// returns it with how many words it took.
    pub fn take(words: &[OsString]) -> Result<(Target, usize)> {
        let Some(first) = words.first() else {
            return Err(usage(format!("which process image? Name {SOURCE_WORDS}")));
        };
        if let Some(s) = first
            .to_str()
            .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
        {
            return match s.parse::<i32>() {
                Ok(pid) if pid > 0 => Ok((Target::Pid(pid), 1)),
                _ => Err(usage(format!("{s} is not a process id"))),
            };
        }
        let path = PathBuf::from(first);
        match elf::kind(&path) {
            Err(e) => Err(unreadable(&path, e)),
            Ok(Kind::Core) => Ok((
                Target::Core {
                    prog: None,
                    core: path,
                },
                1,
            )),
            Ok(Kind::Program { .. }) => {
                let Some(core) = words.get(1).map(PathBuf::from) else {
                    return Err(usage(format!(
                        "{} is a program: a core file of it must follow (PROG CORE)",
                        show(&path)
                    )));
                };
                match elf::kind(&core) {
                    Ok(Kind::Core) => Ok((
                        Target::Core {
                            prog: Some(path),
                            core,
                        },
                        2,
                    )),
                    Ok(_) => Err(usage(format!(
                        "{} is not a core file (it follows the program {})",
                        show(&core),
                        show(&path)
                    ))),
                    Err(e) => Err(unreadable(&core, e)),
                }
            }
            Ok(_) => Err(usage(format!(
                "{} is neither a program, a core file nor a process id",
                show(&path)
            ))),
        }
    }

    /// The whole of `words` as one image.
    pub fn parse(words: &[OsString]) -> Result<Target> {
        let (t, used) = Target::take(words)?;
        match words.get(used) {
            None => Ok(t),
            Some(extra) => Err(usage(format!(
                "unexpected word {}: name only {SOURCE_WORDS}",
                show(extra)
            ))),
        }
    }
}

/// The one line for a file named on the command line that cannot be read.
fn unreadable(path: &Path, e: std::io::Error) -> crate::Fail {
    match e.kind() {
        std::io::ErrorKind::NotFound => usage(format!("{}: no such file", show(path))),
        std::io::ErrorKind::InvalidInput => usage(format!(
            "{}: {e}; name a core file, a program and its core, or a PID",
            show(path)
        )),
        _ => usage(format!("cannot read {}: {e}", show(path))),
    }
}

/// An opened image.
pub struct Image {
    pub mem: Box<dyn Memory>,
    pub maps: Mappings,
    pub layout: Layout,
    /// The program, when known.
    pub exe: Option<PathBuf>,
    /// How messages name the image: `pid 123 (server)`, `server (core core.123)`.
    pub name: String,
    /// When the image was taken (a core: when it was written).
    pub when: SystemTime,
    /// The threads and their registers: a core's; a process's once something stopped it.
    pub threads: Vec<Thread>,
    pub pid: Option<i32>,
    /// Whether the memory cannot change while it is read: a core, or a process someone holds
    /// stopped.
    pub still: bool,
    /// Set where the program ran without libdmem: its blocks are glibc's chunks in use, on no
    /// stack (see `source::glibc`).
    pub glibc: Option<glibc::Glibc>,
}

impl Image {
    pub fn open(target: &Target) -> Result<Image> {
        match target {
            Target::Pid(pid) => open_process(*pid),
            Target::Core { prog, core } => open_core(prog.as_deref(), core),
        }
    }

    /// Every known thread's thread pointer (`fs_base`), where glibc keeps its per-thread data.
    pub fn thread_pointers(&self) -> Vec<u64> {
        self.threads.iter().map(|t| t.fs_base()).collect()
    }

    /// Walks the lists: strictly where the memory holds still, else as `dmem top` reads a
    /// running process.
    pub fn walk(&self) -> Result<Walk> {
        if let Some(g) = &self.glibc {
            return Ok(glibc::walk(&*self.mem, &self.maps, g, &self.thread_pointers()).0);
        }
        let opts = if self.still {
            WalkOptions::still()
        } else {
            WalkOptions::default()
        };
        heapwalk::walk(&*self.mem, &self.layout, opts).map_err(|d| match self.pid {
            Some(pid) => live::refused(pid, &d.0),
            None => failed(format!("cannot read {}: {}", self.name, d.0)),
        })
    }
}

fn open_process(pid: i32) -> Result<Image> {
    let p = match live::open(pid) {
        Ok(p) => p,
        Err(e) => return glibc::open_process(pid).unwrap_or(Err(e)),
    };
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok();
    Ok(Image {
        mem: Box::new(LiveMemory::new(pid)),
        maps: p.maps,
        layout: p.layout,
        exe,
        name: format!("pid {pid} ({})", p.name),
        when: SystemTime::now(),
        threads: Vec::new(),
        pid: Some(pid),
        still: false,
        glibc: None,
    })
}

fn open_core(prog: Option<&Path>, core: &Path) -> Result<Image> {
    let mut dump = CoreDump::open(core).map_err(failed)?;
    if dump.missing > 0 {
        eprintln!(
            "dmem: warning: the core {} is cut short ({} bytes of its segments are missing, a size \
             limit or a full disk when it was written): what they held cannot be read",
            show(core),
            dump.missing
        );
    }
    let (exe, mut maps) = match prog {
        Some(prog) => {
            let main = std::fs::canonicalize(prog).unwrap_or_else(|_| prog.to_path_buf());
            let maps = program_in_core(dump.mappings(), &main, core)?;
            (main, maps)
        }
        None => {
            let Some(main) = dump.program() else {
                return Err(failed(format!(
                    "{} names no program in its notes: name it first (PROG CORE)",
                    show(core)
                )));
            };
            if !main.exists() && !files::findable(&main) {
                return Err(failed(format!(
                    "the program of {} was {}, which is not there any more: name it first (PROG CORE)",
                    show(core),
                    show(&main)
                )));
            }
            (main, dump.mappings())
        }
    };
    // Every mapped file matched by the build id the core holds, before anything reads one.
    files::resolve_core(&mut dump, &mut maps);
    let name = format!("{} (core {})", file_name(&exe), show(core));
    let found = locate_in_core(&dump, &maps);
    if let Ok((layout, lib)) = &found {
        if let Some(line) = layout.unsealed_warning(lib) {
            eprintln!("{line}");
        }
    }
    if let Err(LocateError::NotLoaded) = found {
        return glibc::open_core(dump, maps, exe, name);
    }
    let (layout, lib) = found.map_err(|e| match e {
        LocateError::NotLoaded => failed(format!(
            "{name} has no libdmem.so loaded (no mapped object exports dmem_layout): the program \
             must run with LD_PRELOAD=libdmem.so (or under 'dmem run') for its cores to hold the lists"
        )),
        LocateError::Unreadable { lib, why } => failed(format!(
            "the dmem_layout descriptor of {} in {name} cannot be read: {why}",
            show(&lib)
        )),
        LocateError::Denied(e) => failed(format!("cannot read {name}: {e}")),
    })?;
    if layout.flags(&dump).is_ok_and(|f| f & FLAG_RECORDING == 0) {
        return Err(failed(format!(
            "{name} ran {} with recording off (no-log-allocs): its blocks have no stacks and are \
             on no list",
            show(&lib)
        )));
    }
    Ok(Image {
        threads: dump.threads.clone(),
        when: dump.mtime,
        mem: Box::new(dump),
        maps,
        layout,
        exe: Some(exe),
        name,
        pid: None,
        still: true,
        glibc: None,
    })
}

/// The layout descriptor in a core, and the library it belongs to: through the library's
/// symbol, else by the descriptor's magic when the library's file is not the build the core was
/// taken with (or not there), saying so.
fn locate_in_core(dump: &CoreDump, maps: &Mappings) -> std::result::Result<(Layout, PathBuf), LocateError> {
    match heapwalk::locate(dump, maps) {
        Err(LocateError::NotLoaded) => match heapwalk::locate_by_magic(dump, maps) {
            Some((layout, lib)) => {
                // Passed over by `locate` when no file of its build was found.
                let what = if lib.exists() {
                    "is not the build the core was taken with"
                } else {
                    "is not there any more"
                };
                eprintln!(
                    "dmem: note: {} {what}; its layout descriptor was found in the core by its magic",
                    show(&lib)
                );
                Ok((layout, lib))
            }
            None => Err(LocateError::NotLoaded),
        },
        // A library rebuilt at the same path since the core was taken: its symbol points
        // elsewhere than the core's copy of the descriptor, which its magic still finds.
        Err(LocateError::Unreadable { lib, why }) => match heapwalk::locate_by_magic(dump, maps) {
            Some((layout, found)) => {
                eprintln!(
                    "dmem: note: {} is not the build the core was taken with (its dmem_layout \
                     symbol points elsewhere); the core's layout descriptor was found by its magic",
                    show(&found)
                );
                Ok((layout, found))
            }
            None => Err(LocateError::Unreadable { lib, why }),
        },
        other => other,
    }
}

fn file_name(p: &Path) -> String {
    p.file_name().map(show).unwrap_or_else(|| show(p))
}

/// Checks that `prog` is the program of the core, and has the core's mappings of it read from
/// `prog` when the path the core recorded is gone (a core taken elsewhere, a program moved since).
pub fn program_in_core(mut maps: Mappings, prog: &Path, core: &Path) -> Result<Mappings> {
    let name = prog.file_name();
    let same = |p: &Path| p == prog || std::fs::canonicalize(p).is_ok_and(|c| c == prog);
    if maps.list.iter().any(|m| m.path.as_deref().is_some_and(same)) {
        return Ok(maps);
    }
    let mut found = false;
    for m in &mut maps.list {
        if let Some(p) = &m.path {
            if p.file_name() == name && !p.exists() {
                m.path = Some(prog.to_path_buf());
                found = true;
            }
        }
    }
    if found {
        return Ok(maps);
    }
    let first = maps
        .files()
        .first()
        .map(show)
        .unwrap_or_else(|| "no file at all".into());
    Err(failed(format!(
        "{} is not a core of {}: the program it maps first is {first}",
        show(core),
        show(prog)
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(w: &[&str]) -> Vec<OsString> {
        w.iter().map(OsString::from).collect()
    }

    #[test]
    fn a_number_is_a_pid_and_the_rest_is_checked() {
        assert_eq!(Target::take(&words(&["42", "x"])).unwrap(), (Target::Pid(42), 1));
        let msg = |w: &[&str]| Target::parse(&words(w)).unwrap_err().msg;
        assert!(msg(&["0"]).contains("not a process id"));
        assert!(msg(&[]).contains("PROG CORE, a core file alone or a PID"));
        let me = std::env::current_exe().unwrap();
        let me = me.to_str().unwrap();
        assert!(
            msg(&[me]).contains("a core file of it must follow"),
            "{}",
            msg(&[me])
        );
        assert!(msg(&[me, me]).contains("is not a core file (it follows the program"));
        assert_eq!(msg(&["/nonexistent/x"]), "/nonexistent/x: no such file");
        let text = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
        assert!(msg(&[text]).contains("neither a program, a core file nor a process id"));
        assert!(msg(&["42", "43"]).contains("unexpected word 43"));
    }
}
