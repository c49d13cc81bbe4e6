//! `dmem install`: lays out a prefix the launcher finds its way around in.
//!
//! ```text
//! PREFIX/bin/dmem
//! PREFIX/lib/libdmem.so
//! PREFIX/lib/libdmem.so-gdb.py        gdb runs it when it loads PREFIX/lib/libdmem.so
//! PREFIX/share/dmem/dmem.py           the gdb script
//! PREFIX/share/dmem/dmemlib/*.py       the package of modules it imports
//! PREFIX/share/man/man1/dmem.1         the manual: dmem.1, and dmem-COMMAND.1 for each command
//! ```

use crate::analysis::escape::show;
use crate::cli;
use crate::{failed, locate, usage, Result};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

pub const AUTOLOAD_NAME: &str = "libdmem.so-gdb.py";

pub fn main(args: cli::InstallArgs) -> Result<i32> {
    cli::no_words(args.unexpected, "give the directory with --prefix DIR")?;
    let prefix = args.prefix;
    let prefix = match prefix {
        Some(p) => p,
        None => match std::env::var_os("HOME") {
            Some(home) => Path::new(&home).join(".local"),
            None => {
                return Err(usage(
                    "HOME is not set, so there is no default prefix; give one with --prefix DIR",
                ))
            }
        },
    };
    let cwd = std::env::current_dir().unwrap_or_default();
    let prefix = cwd.join(prefix);
    let installed = install(&prefix)?;

    println!("installed into {}:", show(&prefix));
    for f in &installed {
        println!("  {}", show(f.strip_prefix(&prefix).unwrap_or(f)));
    }
    let bin = prefix.join("bin");
    let on_path = std::env::var_os("PATH").is_some_and(|p| {
        std::env::split_paths(&p).any(|d| d == bin || d.canonicalize().ok() == bin.canonicalize().ok())
    });
    if !on_path {
        println!(
            "{} is not on PATH; add it, e.g.: export PATH=\"{}:$PATH\"",
            show(&bin),
            show(&bin)
        );
    }
    if let Some(hint) = hint_for(&prefix.join("lib")) {
        println!("{hint}");
    }
    println!("try it: {} demo", show(bin.join("dmem")));
    Ok(0)
}

/// Copies everything into place and returns the files installed.
fn install(prefix: &Path) -> Result<Vec<PathBuf>> {
    let exe =
        std::env::current_exe().map_err(|e| failed(format!("cannot tell where dmem itself is: {e}")))?;
    let lib = locate::library()?;
    let script = locate::script()?;
    let script_dir = script.parent().map(Path::to_path_buf).unwrap_or_default();
    // The script and the package of modules beside it that it imports.
    let package = script_dir.join(locate::PACKAGE_NAME);
    let mut modules: Vec<PathBuf> = std::fs::read_dir(&package)
        .map_err(|e| failed(format!("cannot list {}: {e}", show(&package))))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "py") && p.is_file())
        .collect();
    modules.sort();

    let share = prefix.join("share").join("dmem");
    let mut done = Vec::new();
    let mut put = |src: &Path, dest: PathBuf, mode: u32| -> Result<()> {
        copy(src, &dest, mode)?;
        done.push(dest);
        Ok(())
    };
    put(&exe, prefix.join("bin").join("dmem"), 0o755)?;
    put(&lib, prefix.join("lib").join(locate::LIB_NAME), 0o755)?;
    put(&script, share.join(locate::SCRIPT_NAME), 0o644)?;
    for m in &modules {
        put(
            m,
            share
                .join(locate::PACKAGE_NAME)
                .join(m.file_name().unwrap_or_default()),
            0o644,
        )?;
    }
    let autoload = prefix.join("lib").join(AUTOLOAD_NAME);
    write_file(
        &autoload,
        autoload_script(&share.join(locate::SCRIPT_NAME)).as_bytes(),
        0o644,
    )?;
    done.push(autoload);
    let man = prefix.join("share").join("man").join("man1");
    for (name, page) in man_pages()? {
        let dest = man.join(format!("{name}.1"));
        write_file(&dest, &page, 0o644)?;
        done.push(dest);
    }
    Ok(done)
}

/// The manual pages, rendered from the command line's declarations (the ones `--help` shows):
/// `dmem` with the list of commands, and `dmem-COMMAND` for each command, as git names its pages.
fn man_pages() -> Result<Vec<(String, Vec<u8>)>> {
    // Built, so that each command carries the global options (--sysroot) as its --help shows.
    let mut cmd = cli::command();
    cmd.build();
    let render = |name: String, c: clap::Command| -> Result<(String, Vec<u8>)> {
        let mut page = Vec::new();
        clap_mangen::Man::new(c.name(name.clone()))
            .render(&mut page)
            .map_err(|e| failed(format!("cannot render the manual page {name}: {e}")))?;
        Ok((name, page))
    };
    let mut pages = vec![render("dmem".to_string(), cmd.clone())?];
    for sub in cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
    {
        pages.push(render(format!("dmem-{}", sub.get_name()), sub.clone())?);
    }
    Ok(pages)
}

/// Copies a file by writing a temporary one beside the destination and renaming it over, so a
/// running program (the installed dmem itself, say) is replaced rather than overwritten.
fn copy(src: &Path, dest: &Path, mode: u32) -> Result<()> {
    let data = std::fs::read(src).map_err(|e| failed(format!("cannot read {}: {e}", show(src))))?;
    write_file(dest, &data, mode)
}

fn write_file(dest: &Path, data: &[u8], mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let dir = dest.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| {
        failed(format!(
            "cannot create {}: {e}; choose a --prefix you can write to",
            show(dir)
        ))
    })?;
    let tmp = dir.join(format!(
        ".{}.tmp{}",
        dest.file_name().map(show).unwrap_or_default(),
        std::process::id()
    ));
    let result = std::fs::write(&tmp, data)
        .and_then(|_| std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode)))
        .and_then(|_| std::fs::rename(&tmp, dest));
    result.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        failed(format!(
            "cannot write {}: {e}; choose a --prefix you can write to",
            show(dest)
        ))
    })
}

/// gdb's auto-load file for the installed library: gdb runs `OBJFILE-gdb.py` from the
/// directory of each object file it loads, so opening a core of a program that ran with this
/// libdmem.so defines the dmem commands, once the directory is in gdb's auto-load safe path.
fn autoload_script(script: &Path) -> String {
    format!(
        r#"# gdb runs this file when it loads the libdmem.so beside it (from a core of a program that ran
# with it preloaded, or a process attached to) and this directory is in its auto-load safe path:
#     add-auto-load-safe-path {dir}
# It loads the dmem commands ('help dmem' lists them).
import os
import __main__
import gdb

_script = os.fsdecode({literal})
if os.path.isfile(_script):
    # Python keeps the outermost file's __file__ while gdb sources one script from another;
    # the dmem script looks for its modules beside its own __file__, so give it the right one.
    _saved = __main__.__dict__.get("__file__")
    __main__.__file__ = _script
    try:
        gdb.execute("source " + _script)
    finally:
        if _saved is None:
            __main__.__dict__.pop("__file__", None)
        else:
            __main__.__file__ = _saved
else:
    gdb.write("dmem: %s is missing; reinstall with 'dmem install'\n" % _script, gdb.STDERR)
"#,
        dir = script
            .parent()
            .and_then(Path::parent)
            .and_then(Path::parent)
            .unwrap_or(Path::new(""))
            .join("lib")
            .display(),
        literal = python_bytes(script),
    )
}

fn hint_for(lib: &Path) -> Option<String> {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let xdg = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| home.as_ref().map(|h| h.join(".config")))
        .map(|c| c.join("gdb").join("gdbinit"));
    let dot = home.as_ref().map(|h| h.join(".gdbinit"));
    let mut files: Vec<PathBuf> = [dot.clone(), xdg.clone(), Some("/etc/gdb/gdbinit".into())]
        .into_iter()
        .flatten()
        .collect();
    if let Ok(d) = std::fs::read_dir("/etc/gdb/gdbinit.d") {
        files.extend(d.filter_map(|e| e.ok().map(|e| e.path())));
    }
    let allowed = files.iter().any(|f| {
        let text = std::fs::read_to_string(f).unwrap_or_default();
        text.lines().any(|l| safe_path_covers(l, lib, home.as_deref()))
    });
    if allowed {
        return None;
    }
    // Suggest the init file gdb already reads, or the modern one.
    let file = [dot, xdg.clone()]
        .into_iter()
        .flatten()
        .find(|f| f.is_file())
        .or(xdg)?;
    Some(format!(
        "for gdb to load the dmem commands by itself when it opens a core, add this line to {}: \
         add-auto-load-safe-path {}",
        show(&file),
        show(lib)
    ))
}

/// Whether one line of a gdb init file puts `lib` in the auto-load safe path.
fn safe_path_covers(line: &str, lib: &Path, home: Option<&Path>) -> bool {
    let line = line.trim();
    let dirs = line
        .strip_prefix("add-auto-load-safe-path")
        .or_else(|| line.strip_prefix("set auto-load safe-path"));
    let Some(dirs) = dirs else {
        return false;
    };
    dirs.trim().split(':').any(|d| {
        let d = d.trim();
        let d = match (d.strip_prefix("~/"), home) {
            (Some(rest), Some(h)) => h.join(rest),
            _ => PathBuf::from(d),
        };
        !d.as_os_str().is_empty() && lib.starts_with(&d)
    })
}

/// A Python bytes literal for a path, exact whatever bytes it holds.
pub fn python_bytes(p: &Path) -> String {
    let mut s = String::from("b\"");
    for &b in p.as_os_str().as_bytes() {
        match b {
            b'"' | b'\\' => {
                s.push('\\');
                s.push(b as char);
            }
            0x20..=0x7e => s.push(b as char),
            _ => s.push_str(&format!("\\x{b:02x}")),
        }
    }
    s.push('"');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn init_lines_that_cover_the_library() {
        let lib = Path::new("/opt/dmem/lib");
        let home = Some(Path::new("/home/u"));
        assert!(safe_path_covers(
            "add-auto-load-safe-path /opt/dmem/lib",
            lib,
            home
        ));
        assert!(safe_path_covers("  add-auto-load-safe-path /opt", lib, home));
        assert!(safe_path_covers("set auto-load safe-path /usr:/", lib, home));
        assert!(!safe_path_covers(
            "add-auto-load-safe-path /opt/dmem/li",
            lib,
            home
        ));
        assert!(!safe_path_covers(
            "# add-auto-load-safe-path /opt/dmem/lib",
            lib,
            home
        ));
        assert!(safe_path_covers(
            "add-auto-load-safe-path ~/.local/lib",
            Path::new("/home/u/.local/lib"),
            home
        ));
    }

    #[test]
    fn python_literals_keep_every_byte() {
        assert_eq!(
            python_bytes(Path::new("/a b/\"q\"/\u{e9}")),
            "b\"/a b/\\\"q\\\"/\\xc3\\xa9\""
        );
    }
}
