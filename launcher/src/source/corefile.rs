//! Where the kernel put a core file, and moving it where the user wants it.
//!
//! The kernel names cores after `/proc/sys/kernel/core_pattern`: a plain pattern (`core`,
//! `core.%p`, `/var/crash/core.%e.%p`) is a file relative to the dying process's working
//! directory; a pattern starting with `|` pipes the core to a program (systemd-coredump, apport)
//! and leaves no file behind.

use crate::analysis::escape::show;
use crate::{failed, Result};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

pub enum Pattern {
    /// Cores are files named after this pattern.
    File(String),
    /// Cores go to this handler program (the pattern without its `|`).
    Pipe(String),
}

pub fn pattern() -> Pattern {
    let raw = std::fs::read_to_string("/proc/sys/kernel/core_pattern").unwrap_or_else(|_| "core".into());
    let raw = raw.trim_end_matches('\n');
    match raw.strip_prefix('|') {
        Some(handler) => Pattern::Pipe(handler.trim().to_owned()),
        None => {
            let uses_pid = std::fs::read_to_string("/proc/sys/kernel/core_uses_pid")
                .map(|s| s.trim() == "1")
                .unwrap_or(false);
            let mut p = if raw.is_empty() {
                "core".to_owned()
            } else {
                raw.to_owned()
            };
            // core(5): with core_uses_pid set and no %p in the pattern, the kernel adds ".PID".
            if uses_pid && !p.contains("%p") {
                p.push_str(".%p");
            }
            Pattern::File(p)
        }
    }
}

/// The core the kernel wrote for process `pid`, which ran in `cwd` and died after `since`.
pub fn find(pattern: &str, cwd: &Path, pid: u32, since: SystemTime) -> Option<PathBuf> {
    let path = Path::new(pattern);
    let name = path.file_name()?.to_str()?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => {
            if d.to_string_lossy().contains('%') {
                return None; // a directory named per process: too rare to chase
            }
            cwd.join(d)
        }
        _ => cwd.to_path_buf(),
    };
    let glob = name_glob(name, pid);
    // mtime has coarse granularity on some filesystems; a second of slack is plenty, since only
    // names that match the pattern are considered.
    let since = since - std::time::Duration::from_secs(1);
    std::fs::read_dir(&dir)
        .ok()?
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_str().is_some_and(|n| glob_match(&glob, n)))
        .filter_map(|e| {
            let m = e.metadata().ok()?;
            let t = m.modified().ok()?;
            (m.is_file() && t >= since).then(|| (t, e.path()))
        })
        .max()
        .map(|(_, p)| p)
}

/// The file-name part of the pattern as a glob: `%p` becomes the pid, `%%` a percent sign, and
/// every other specifier (program name, time, host, signal...) matches anything.
fn name_glob(name: &str, pid: u32) -> String {
    let mut out = String::new();
    let mut chars = name.chars();
    while let Some(c) = chars.next() {
        match c {
            '%' => match chars.next() {
                Some('p') => out.push_str(&pid.to_string()),
                Some('%') => out.push('%'),
                _ => out.push('*'),
            },
            '*' => out.push('*'),
            c => out.push(c),
        }
    }
    out
}

/// `*` matches any run of characters; everything else itself.
fn glob_match(glob: &str, name: &str) -> bool {
    match glob.split_once('*') {
        None => glob == name,
        Some((head, tail)) => {
            let Some(rest) = name.strip_prefix(head) else {
                return false;
            };
            (0..=rest.len()).any(|i| rest.is_char_boundary(i) && glob_match(tail, &rest[i..]))
        }
    }
}

/// What to tell the user when cores are piped to a handler instead of written.
pub fn pipe_advice(handler: &str, pid: u32) -> String {
    let program = handler.split_whitespace().next().unwrap_or(handler);
    if program.contains("systemd-coredump") {
        format!("the kernel handed the core to systemd-coredump; get it with 'coredumpctl dump {pid} -o core.{pid}', or use 'dmem run --gcore'")
    } else if program.contains("apport") {
        "the kernel handed the core to apport, which keeps it under /var/crash (unpack with apport-unpack), or use 'dmem run --gcore'".to_owned()
    } else {
        format!("the kernel handed the core to '{program}' (core_pattern pipes cores to it); use 'dmem run --gcore' to get a core file here")
    }
}

/// Moves `core` into `dir` as `core.NAME.PID`, creating `dir` if needed.
pub fn move_into(core: &Path, dir: &Path, prog: &Path, pid: &str) -> Result<PathBuf> {
    std::fs::create_dir_all(dir)
        .map_err(|e| failed(format!("cannot create the core directory {}: {e}", show(dir))))?;
    let dest = dir.join(core_name(prog, pid));
    if std::fs::rename(core, &dest).is_err() {
        // Across filesystems a rename fails; copy, then remove the original.
        std::fs::copy(core, &dest).map_err(|e| {
            failed(format!(
                "cannot move the core {} into {}: {e}; it is still at the first place",
                show(core),
                show(dir)
            ))
        })?;
        let _ = std::fs::remove_file(core);
    }
    Ok(dest)
}

/// `core.NAME.PID`, the name a core gets in a directory chosen with `--core-dir`.
pub fn core_name(prog: &Path, pid: &str) -> String {
    let name = prog.file_name().map(show).unwrap_or_else(|| "prog".into());
    format!("core.{name}.{pid}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_become_globs() {
        assert_eq!(name_glob("core", 7), "core");
        assert_eq!(name_glob("core.%p", 7), "core.7");
        assert_eq!(name_glob("core.%e.%p.%t", 7), "core.*.7.*");
        assert_eq!(name_glob("100%%", 7), "100%");
    }

    #[test]
    fn globs_match_names() {
        assert!(glob_match("core", "core"));
        assert!(!glob_match("core", "core.1"));
        assert!(glob_match("core.*.7.*", "core.driver.7.1700000000"));
        assert!(!glob_match("core.*.7.*", "core.driver.8.1700000000"));
        assert!(glob_match("*", ""));
    }
}
