//! Where the pieces are. The launcher finds everything relative to itself, so the same binary
//! works in the build tree (`target/release/dmem` beside `target/release/libdmem.so`, the script
//! in the source tree's `gdb/`) and installed (`PREFIX/bin/dmem` with `PREFIX/lib/libdmem.so`
//! and `PREFIX/share/dmem/`).

use crate::analysis::escape::show;
use crate::{failed, Result};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

pub const LIB_NAME: &str = "libdmem.so";
pub const SCRIPT_NAME: &str = "dmem.py";
/// The package of modules beside the script, which it imports.
pub const PACKAGE_NAME: &str = "dmemlib";

/// The directory the running launcher is in, symbolic links resolved.
pub fn exe_dir() -> Result<PathBuf> {
    let exe =
        std::env::current_exe().map_err(|e| failed(format!("cannot tell where dmem itself is: {e}")))?;
    let exe = exe.canonicalize().unwrap_or(exe);
    Ok(exe.parent().map(Path::to_path_buf).unwrap_or_default())
}

/// The source tree this launcher was built from, if it is still there: the folder above its
/// package's (`launcher/`), the workspace's top with the library's manifest.
fn source_tree() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).parent()?.to_path_buf();
    dir.join("Cargo.toml").is_file().then_some(dir)
}

/// libdmem.so: `$DMEM_LIB`, or next to the launcher in the build tree, or in the install's `lib`.
pub fn library() -> Result<PathBuf> {
    if let Some(lib) = std::env::var_os("DMEM_LIB") {
        let lib = PathBuf::from(lib);
        return match lib.canonicalize() {
            Ok(abs) if abs.is_file() => Ok(abs),
            _ => Err(failed(format!(
                "DMEM_LIB is {}, which is not a file; point it at libdmem.so or unset it",
                show(&lib)
            ))),
        };
    }
    let dir = exe_dir()?;
    if dir.file_name().is_some_and(|n| n != "bin") {
        build_library_under_cargo_run(&dir)?;
    }
    let candidates = [dir.join(LIB_NAME), dir.join("..").join("lib").join(LIB_NAME)];
    match candidates.into_iter().find(|p| p.is_file()) {
        Some(lib) => Ok(lib.canonicalize().unwrap_or(lib)),
        None if dir.file_name().is_some_and(|n| n != "bin") => Err(failed(format!(
            "{LIB_NAME} is not built next to dmem (in {}): run 'cargo build --release' first, or set DMEM_LIB",
            show(&dir)
        ))),
        None => Err(failed(format!(
            "{LIB_NAME} is not installed with dmem (in {}): reinstall with 'dmem install', or set DMEM_LIB",
            show(dir.join("..").join("lib"))
        ))),
    }
}

/// `cargo run --bin dmem` compiles the library too, as the launcher's dependency, but cargo
/// leaves a dependency's .so in `deps/`, not beside the launcher. When cargo ran this launcher
/// from its own source tree, have cargo put the library of the same profile there (it compiles
/// nothing, having just built it), so a fresh clone's first
/// `cargo run --release --bin dmem -- demo` works and a changed library is never used stale.
fn build_library_under_cargo_run(dir: &Path) -> Result<()> {
    // Once per run of the launcher.
    static DONE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    let Some(cargo) = std::env::var_os("CARGO") else {
        return Ok(());
    };
    if DONE.swap(true, std::sync::atomic::Ordering::Relaxed) {
        return Ok(());
    }
    let manifest_dir = env!("CARGO_MANIFEST_DIR");
    if std::env::var_os("CARGO_MANIFEST_DIR").as_deref() != Some(OsStr::new(manifest_dir)) {
        return Ok(());
    }
    let (Some(profile), Some(target_dir)) = (dir.file_name(), dir.parent()) else {
        return Ok(());
    };
    // The dev profile builds into target/debug.
    let profile = if profile == "debug" {
        OsStr::new("dev")
    } else {
        profile
    };
    let status = Command::new(cargo)
        // At the workspace's top, `--lib` selects the library (and the analysis) with the
        // dependencies' features resolved as for `cargo build` there, the launcher's package
        // among the selected: the libdmem.so `cargo run` just built, not a second variant.
        .args(["build", "--lib", "--profile"])
        .arg(profile)
        .arg("--target-dir")
        .arg(target_dir)
        .arg("--manifest-path")
        .arg(Path::new(manifest_dir).join("..").join("Cargo.toml"))
        .env_remove("LD_PRELOAD")
        // cargo's progress goes to stderr, like that of the `cargo run` that started us.
        .stdout(Stdio::null())
        .stdin(Stdio::null())
        .status()
        .map_err(|e| {
            failed(format!(
                "cannot run cargo to build {LIB_NAME}: {e}; run 'cargo build --release'"
            ))
        })?;
    if !status.success() {
        return Err(failed(format!(
            "building {LIB_NAME} failed (see cargo's messages above)"
        )));
    }
    Ok(())
}

/// The gdb script: `$DMEM_GDB_SCRIPT`, or the installed one, or the source tree's `gdb/dmem.py`.
pub fn script() -> Result<PathBuf> {
    if let Some(s) = std::env::var_os("DMEM_GDB_SCRIPT") {
        let s = PathBuf::from(s);
        return if s.is_file() {
            Ok(s)
        } else {
            Err(failed(format!(
                "DMEM_GDB_SCRIPT is {}, which is not a file; point it at dmem.py or unset it",
                show(&s)
            )))
        };
    }
    let mut candidates = vec![exe_dir()?.join("..").join("share").join("dmem").join(SCRIPT_NAME)];
    if let Some(src) = source_tree() {
        candidates.push(src.join("gdb").join(SCRIPT_NAME));
    }
    match candidates.iter().find(|p| p.is_file()) {
        Some(s) => Ok(s.canonicalize().unwrap_or_else(|_| s.clone())),
        None => Err(failed(format!(
            "the gdb script {SCRIPT_NAME} is not installed with dmem (looked in {}); reinstall with \
             'dmem install' or set DMEM_GDB_SCRIPT",
            candidates.iter().map(show).collect::<Vec<_>>().join(" and ")
        ))),
    }
}

/// The C compiler `dmem demo` builds its example with: `cc` on PATH.
pub fn c_compiler() -> Result<PathBuf> {
    program(Path::new("cc")).ok_or_else(|| {
        failed("no C compiler 'cc' on PATH to build the example program; install one (on Debian: apt-get install gcc)")
    })
}

/// A program on PATH (or a path, as given).
pub fn program(name: &Path) -> Option<PathBuf> {
    if name.components().count() > 1 || name.is_absolute() {
        return name.is_file().then(|| name.to_path_buf());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// gdb, which every analysis needs.
pub fn gdb() -> Result<PathBuf> {
    program(Path::new("gdb"))
        .ok_or_else(|| failed("gdb is not on PATH; install it (on Debian: apt-get install gdb python3)"))
}
