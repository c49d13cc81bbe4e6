//! Which file on this machine stands for each file the target mapped, matched by build id.
//!
//! A core is often read where it was not made, after the program was rebuilt and the libraries
//! upgraded; a service keeps running while its package is replaced on disk. A file found by
//! its path is then another build, and its symbols name the wrong functions. So each mapped
//! file's build id is taken from the target itself: from a core, the file's first page, which
//! the kernel and gdb dump by default (its ELF headers and the NT_GNU_BUILD_ID note); from a
//! running process, the very file it maps, through `/proc/PID/map_files`. A file on disk is
//! used only when its build id is that one. Where to look, in order, as gdb and elfutils do:
//! the customer's tree given with `--sysroot` (paths from the core looked up under it), the
//! path the core names, the build-id debug tree, and the debuginfod servers of
//! `DEBUGINFOD_URLS`. A file nothing matches is shown as `file+offset`, with one warning.

use crate::analysis::escape::show;
use crate::analysis::symbolize::in_debug_tree;
use crate::source::coredump::CoreDump;
use crate::source::debuginfod::{self, Kind};
use crate::source::elf::ElfObject;
use crate::source::mappings::{Local, Mappings};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

static SYSROOT: OnceLock<PathBuf> = OnceLock::new();

/// The directory the command line's `--sysroot` names: where the target's files are looked up
/// first, under the paths the target gave them.
pub fn set_sysroot(dir: PathBuf) {
    let _ = SYSROOT.set(dir);
}

fn sysroot() -> Option<&'static Path> {
    SYSROOT.get().map(PathBuf::as_path)
}

/// `path` under `root`, as gdb's `set sysroot` reads it.
fn under(root: &Path, path: &Path) -> PathBuf {
    root.join(path.strip_prefix("/").unwrap_or(path))
}

/// A debug file for build `id`: from the sysroot's debug tree, this machine's, or a debuginfod
/// server. `name` names the object in messages.
pub fn debug_file(id: &str, name: &Path) -> Option<PathBuf> {
    local_debug_file(id).or_else(|| debuginfod::fetch(id, Kind::Debuginfo, name))
}

/// A debug file for build `id` on this machine: in the sysroot's debug tree or this machine's.
pub fn local_debug_file(id: &str) -> Option<PathBuf> {
    sysroot()
        .and_then(|r| in_debug_tree(r, id))
        .or_else(|| in_debug_tree(Path::new("/"), id))
}

/// Whether a file gone from `path` may still be found elsewhere: under the sysroot, or on a
/// debuginfod server (by the build id the core holds).
pub fn findable(path: &Path) -> bool {
    sysroot().is_some_and(|r| under(r, path).exists()) || !debuginfod::urls().is_empty()
}

/// The build id of the file at `path` on this machine, if it is an ELF file with one.
fn build_id_of(path: &Path) -> Option<String> {
    ElfObject::open(path).ok()?.build_id_hex()
}

/// Finds, for every file a core mapped, the file on this machine of the same build, records it
/// in `maps` and has the core read what it left out from that file only. Prints one warning
/// per file that nothing matches.
pub fn resolve_core(dump: &mut CoreDump, maps: &mut Mappings) {
    let files: Vec<PathBuf> = maps.files().into_iter().map(Path::to_path_buf).collect();
    let mut unknown = 0;
    for path in files {
        let headers = maps
            .of_file(&path)
            .find(|m| m.offset == 0)
            .and_then(|m| dump.dumped(m.start))
            .and_then(|page| ElfObject::from_headers(&path, page));
        let want = headers.as_ref().and_then(ElfObject::build_id_hex);
        let local = match &want {
            Some(id) => matching(&path, id),
            None => {
                let local = unchecked(&path);
                unknown += local.exe.as_deref().is_some_and(|e| ElfObject::open(e).is_ok()) as usize;
                local
            }
        };
        let local = Local {
            build_id: want,
            headers,
            ..local
        };
        dump.use_file(&path, local.exe.clone());
        maps.local.insert(path, local);
    }
    if unknown > 0 {
        eprintln!(
            "dmem: note: the core holds no build id of {unknown} mapped ELF file{} (their first pages \
             were not dumped): they are used as found, unchecked",
            if unknown == 1 { "" } else { "s" }
        );
    }
}

/// The first file of build `id` for the mapped file `path`: under the sysroot, at the path, in
/// the debug tree, from debuginfod; with one warning when there is none.
fn matching(path: &Path, id: &str) -> Local {
    let mut seen: Vec<String> = Vec::new();
    let candidates = sysroot()
        .map(|r| under(r, path))
        .into_iter()
        .chain([path.to_path_buf()]);
    for c in candidates {
        match build_id_of(&c) {
            Some(other) if other == id => {
                return Local {
                    exe: Some(c),
                    ..Local::default()
                }
            }
            Some(other) => seen.push(format!("{} has build id {other}", show(&c))),
            None if c.exists() => seen.push(format!("{} has no build id", show(&c))),
            None => {}
        }
    }
    let exe = debuginfod::fetch(id, Kind::Executable, path);
    let debug = if exe.is_none() { debug_file(id, path) } else { None };
    if exe.is_none() {
        let found = if seen.is_empty() {
            format!("{} is not there", show(path))
        } else {
            seen.join(", ")
        };
        match &debug {
            Some(d) => eprintln!(
                "dmem: note: no file of build id {id} found for {} as the target mapped it ({found}): \
                 its functions are named from its debug file {}",
                show(path),
                show(d)
            ),
            None => eprintln!(
                "dmem: warning: no file of build id {id} found for {} as the target mapped it \
                 ({found}; looked in {}): its frames show as {}+offset",
                show(path),
                places(),
                path.file_name().map(show).unwrap_or_else(|| show(path)),
            ),
        }
    }
    Local {
        exe,
        debug,
        ..Local::default()
    }
}

/// Where files are looked for, for messages.
fn places() -> String {
    let mut p = Vec::new();
    if let Some(r) = sysroot() {
        p.push(format!("--sysroot {}", show(r)));
    }
    p.push("the path itself".to_owned());
    p.push("/usr/lib/debug/.build-id".to_owned());
    if debuginfod::urls().is_empty() {
        p.push("no debuginfod server (DEBUGINFOD_URLS is not set)".to_owned());
    } else {
        p.push(format!("debuginfod at {}", debuginfod::urls().join(" ")));
    }
    p.join(", ")
}

/// A mapped file whose build id the core does not hold (its first page was not dumped): the
/// file under the sysroot, else at its path, taken as it is.
fn unchecked(path: &Path) -> Local {
    let exe = sysroot()
        .map(|r| under(r, path))
        .filter(|p| p.is_file())
        .or_else(|| path.is_file().then(|| path.to_path_buf()));
    Local {
        exe,
        ..Local::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::elf::hex;

    #[test]
    fn paths_go_under_the_sysroot() {
        assert_eq!(
            under(Path::new("/tree"), Path::new("/usr/lib/libc.so.6")),
            Path::new("/tree/usr/lib/libc.so.6")
        );
        assert_eq!(hex(&[0x0a, 0xbc]), "0abc");
    }
}
