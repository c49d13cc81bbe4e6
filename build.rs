//! The build script of both packages.
//!
//! For `dmem` it compiles the library's one C file, `src/tls_area.c` (the thread's state in static
//! TLS, which stable Rust cannot declare), into a static archive linked into the library alone.
//!
//! For `dmem-fixtures` (`c-fixtures/Cargo.toml`), a dev-dependency of dmem, it builds the C and
//! C++ test fixtures in `c-fixtures/` into `$OUT_DIR/fixtures/` and
//! tells `c-fixtures/lib.rs` where that is. So `cargo build` of the library and the launcher
//! compiles none of them, and `cargo test` compiles them all.
//!
//! Every `*.c` and `*.cpp` file becomes an executable named after its stem; a file whose stem
//! starts with `lib` becomes a shared library `lib….so` instead. A comment line
//! `// build: FLAGS` among the first lines of a file adds compiler flags (and `-l` libraries) for
//! that file alone. The fixtures are plain programs: the tests run them with the library
//! preloaded, so nothing here links against libdmem.

use std::fs;
use std::path::{Path, PathBuf};

fn extra_flags(src: &Path) -> Vec<String> {
    let text = fs::read_to_string(src).unwrap_or_default();
    text.lines()
        .take(10)
        .filter_map(|l| l.trim().strip_prefix("// build:"))
        .flat_map(|f| f.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
        .collect()
}

fn main() {
    if std::env::var("CARGO_PKG_NAME").as_deref() == Ok("dmem") {
        println!("cargo:rerun-if-changed=src/tls_area.c");
        println!("cargo:rerun-if-changed=build.rs");
        cc::Build::new()
            .file("src/tls_area.c")
            .opt_level(2)
            .warnings(true)
            .compile("dmem_tls_area");
        unwinder_inside();
        return;
    }
    fixtures();
}

/// Links GCC's unwinder (`libgcc_eh.a`, the static half of libgcc) into the library, so that
/// preloading it brings no `libgcc_s.so.1` into a process that had none: a library loaded only
/// because of libdmem changes what the program's later `dlopen`s allocate, and the program's link
/// map should be its own plus libdmem.so. Whole, so that the standard library's references
/// (linked after this archive) are resolved by it and the linker's `--as-needed` drops the
/// `libgcc_s` that the standard library asks for; rustc's version script keeps every one of its
/// symbols local, so the program's own unwinder is untouched.
fn unwinder_inside() {
    let compiler = cc::Build::new().get_compiler();
    let Ok(out) = std::process::Command::new(compiler.path())
        .arg("-print-file-name=libgcc_eh.a")
        .output()
    else {
        return;
    };
    let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    // A bare name back means the compiler has no such archive: keep the shared unwinder.
    let Some(dir) = path
        .parent()
        .filter(|d| path.is_absolute() && !d.as_os_str().is_empty())
    else {
        return;
    };
    println!("cargo:rustc-link-search=native={}", dir.display());
    println!("cargo:rustc-link-lib=static:+whole-archive,-bundle=gcc_eh");
}

fn fixtures() {
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR")).join("fixtures");
    fs::create_dir_all(&out).expect("create fixtures dir");
    println!("cargo:rustc-env=DMEM_FIXTURES_DIR={}", out.display());
    let here = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    println!("cargo:rerun-if-changed={}", here.display());

    let mut sources: Vec<PathBuf> = fs::read_dir(&here)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    // Libraries first, so executables can link against them with -L and -l.
    sources.sort_by_key(|p| {
        let stem = p.file_stem().unwrap_or_default().to_string_lossy().into_owned();
        (!stem.starts_with("lib"), stem)
    });

    for src in sources {
        let ext = src.extension().and_then(|e| e.to_str()).unwrap_or("");
        let cplusplus = match ext {
            "c" => false,
            "cpp" => true,
            _ => continue,
        };
        println!("cargo:rerun-if-changed={}", src.display());
        let stem = src.file_stem().unwrap().to_string_lossy().into_owned();
        let compiler = cc::Build::new()
            .cpp(cplusplus)
            .opt_level(2)
            .debug(true)
            .warnings(false)
            .cargo_metadata(false)
            .get_compiler();
        let mut cmd = compiler.to_command();
        // cc adds -ffunction-sections and the like for objects; a fixture wants a plain program.
        cmd.env_remove("CFLAGS").env_remove("CXXFLAGS");
        let target = if stem.starts_with("lib") {
            cmd.args(["-shared", "-fPIC"]);
            out.join(format!("{stem}.so"))
        } else {
            out.join(&stem)
        };
        cmd.arg(&src).arg("-o").arg(&target).arg("-pthread").arg("-ldl");
        cmd.arg(format!("-L{}", out.display()));
        cmd.arg(format!("-Wl,-rpath,{}", out.display()));
        cmd.args(extra_flags(&src));
        let status = cmd.status().expect("run the C compiler");
        assert!(status.success(), "compiling fixture {} failed", src.display());
    }
}
