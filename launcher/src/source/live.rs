//! A running process opened for reading its heap: its memory, its mappings and the layout
//! descriptor of the libdmem.so it has loaded, with one clear line for each way that can fail
//! (no such process, no library, recording off, and above all permission refused, saying why
//! and what to do).

use crate::source::heapwalk::{self, Layout, LocateError, FLAG_RECORDING};
use crate::source::mappings::Mappings;
use crate::source::memory::{LiveMemory, ReadError};
use crate::{failed, Fail, Result};
use std::io;

pub struct LiveProcess {
    pub pid: i32,
    /// The program's name (`comm`), for messages.
    pub name: String,
    pub mem: LiveMemory,
    pub maps: Mappings,
    pub layout: Layout,
}

impl LiveProcess {
    /// The library's counters summed over its lists, read without walking them.
    pub fn counters(&self) -> Result<heapwalk::Counters> {
        heapwalk::counters(&self.mem, &self.layout).map_err(|e| match e {
            ReadError::Denied(e) => refused(self.pid, &e),
            ReadError::Unmapped => failed(format!(
                "process {} ({}): its lists cannot be read",
                self.pid, self.name
            )),
        })
    }
}

/// Opens process `pid` for reading. Nothing here stops or attaches to it.
pub fn open(pid: i32) -> Result<LiveProcess> {
    let name = std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim_end().to_owned())
        .map_err(|_| failed(format!("there is no process {pid}")))?;
    // A zombie has no memory left, so no mapping and no library: said as what it is, not as a
    // process started without the library.
    if !alive(pid) && std::path::Path::new(&format!("/proc/{pid}")).exists() {
        return Err(failed(format!(
            "process {pid} ({}) has exited (a zombie its parent has not reaped), so there is no \
             memory left to read",
            crate::analysis::escape::show(&name)
        )));
    }
    let maps = Mappings::of_process(pid).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => failed(format!("process {pid} ended")),
        _ => refused(pid, &e),
    })?;
    let mem = LiveMemory::new(pid);
    let (layout, lib) = match heapwalk::locate(&mem, &maps) {
        Ok(found) => found,
        Err(LocateError::Denied(e)) => return Err(refused(pid, &e)),
        Err(LocateError::NotLoaded) => {
            return Err(failed(format!(
            "process {pid} ({name}) has no libdmem.so loaded, so there are no lists to read: start it with \
                 LD_PRELOAD=/abs/path/libdmem.so (or 'dmem run -- PROG')"
        )))
        }
        Err(LocateError::Unreadable { lib, why }) => {
            return Err(failed(format!(
                "process {pid} ({name}) has {} loaded, but its layout descriptor cannot be used: {why}",
                lib.display()
            )))
        }
    };
    if let Some(line) = layout.unsealed_warning(&lib) {
        eprintln!("{line}");
    }
    if layout.list_off_changes.is_none() {
        eprintln!(
            "dmem: note: {} in process {pid} is an older build (layout version {}) without the lists' \
             change counters, so a list that changes while it is read may come out torn",
            lib.display(),
            layout.version
        );
    }
    match layout.flags(&mem) {
        Ok(f) if f & FLAG_RECORDING == 0 => {
            return Err(failed(format!(
                "process {pid} ({name}) runs libdmem.so with recording off (DMEM_OPTS has no-log-allocs), so \
                 its blocks are on no list; restart it without that option"
            )))
        }
        Err(ReadError::Denied(e)) => return Err(refused(pid, &e)),
        _ => {}
    }
    Ok(LiveProcess {
        pid,
        name,
        mem,
        maps,
        layout,
    })
}

/// The processes on this host that have libdmem.so loaded and whose mappings this user may read
/// (the same rule as reading their memory), with their names, found again at each call.
/// A process has the library when a file it maps exports `dmem_layout`, whatever the file's
/// name; files named like the library are looked at first, and each file's answer is kept
/// until it changes on disk, so a call costs one read of each process's mappings.
pub fn preloaded() -> Vec<(i32, String)> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    let me = std::process::id() as i32;
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(maps) = Mappings::of_process(pid) else {
            continue;
        };
        let mut files = maps.files();
        files.sort_by_key(|p| !p.to_string_lossy().contains("dmem"));
        if files.into_iter().any(exports_layout) {
            let name = std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .map(|s| s.trim_end().to_owned())
                .unwrap_or_default();
            out.push((pid, name));
        }
    }
    out.sort_unstable();
    out
}

/// Whether the file exports `dmem_layout`, remembered by path, size and modification time.
fn exports_layout(path: &std::path::Path) -> bool {
    use std::collections::HashMap;
    use std::sync::{LazyLock, Mutex};
    type Key = (std::path::PathBuf, u64, Option<std::time::SystemTime>);
    static SEEN: LazyLock<Mutex<HashMap<Key, bool>>> = LazyLock::new(Default::default);
    let Ok(meta) = std::fs::metadata(path) else {
        return false;
    };
    let key = (path.to_path_buf(), meta.len(), meta.modified().ok());
    if let Some(&known) = SEEN.lock().unwrap().get(&key) {
        return known;
    }
    let answer = crate::source::elf::dynamic_symbol(path, "dmem_layout").is_some();
    let mut seen = SEEN.lock().unwrap();
    // Bounded: a host that maps ever new files (rebuilt libraries) starts over now and then.
    if seen.len() > 16_384 {
        seen.clear();
    }
    seen.insert(key, answer);
    answer
}

/// Whether `pid` still exists (a zombie counts as gone: its memory is).
pub fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z') && !rest.starts_with('X'))
    })
}

/// One line on a refused read: which rule refused it, and what to do.
pub fn refused(pid: i32, e: &io::Error) -> Fail {
    if e.raw_os_error() == Some(libc::ESRCH) {
        return failed(format!("process {pid} ended"));
    }
    let errno = match e.raw_os_error() {
        Some(libc::EPERM) => "EPERM".to_owned(),
        Some(libc::EACCES) => "EACCES".to_owned(),
        _ => e.to_string(),
    };
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|v| v.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
            .unwrap_or_default()
    };
    let owner: Option<u32> = field("Uid:").get(1).and_then(|u| u.parse().ok());
    let me = crate::sys::euid();
    let own_status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let can_ptrace = own_status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << 19) != 0); // CAP_SYS_PTRACE
    let yama: Option<u32> = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
        .ok()
        .and_then(|s| s.trim().parse().ok());
    let why = match (owner, yama) {
        (_, Some(3)) => "Yama's ptrace_scope is 3, which forbids reading another process's memory even as root; \
                         only a reboot lowers it"
            .to_owned(),
        (Some(o), _) if o != me && !can_ptrace => format!(
            "process {pid} belongs to user {o} and dmem runs as user {me}: run dmem as that user, or with sudo"
        ),
        (_, Some(2)) if !can_ptrace => "Yama's ptrace_scope is 2, which lets only CAP_SYS_PTRACE read another \
                                        process: run dmem with sudo"
            .to_owned(),
        (_, Some(1)) if !can_ptrace => "Yama's ptrace_scope is 1, which lets a process be read only by its \
                                        ancestors: run dmem with sudo, or set kernel.yama.ptrace_scope=0 with sysctl"
            .to_owned(),
        _ if !can_ptrace => format!(
            "process {pid} is not dumpable (it changed credentials, or called prctl(PR_SET_DUMPABLE, 0)), so only \
             CAP_SYS_PTRACE may read it: run dmem with sudo"
        ),
        _ => "run dmem as the process's user, with CAP_SYS_PTRACE (e.g. with sudo)".to_owned(),
    };
    failed(format!(
        "not allowed to read process {pid}'s memory ({errno}): {why}"
    ))
}
