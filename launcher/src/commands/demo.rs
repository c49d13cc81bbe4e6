//! `dmem demo`: `dmem run` and `dmem report` on the example program, shown as the commands a
//! user would type, so the first thing a newcomer sees is a real leak report and how to get one.

use crate::analysis::escape::show;
use crate::cli;
use crate::commands::run::{self, Spec};
use crate::{failed, last_line, locate, Result};
use std::path::Path;
use std::process::Command;

/// The example's source, the driver program of the original libdmem post. The tests run the
/// same file as a fixture; the demo compiles its own copy, so the launcher needs nothing from
/// the build tree to show it.
const DRIVER_C: &str = include_str!("../../../c-fixtures/driver.c");
/// How the demo compiles it, shown to the user as it runs.
const CC_ARGS: [&str; 5] = ["-g", "-O2", "-o", "driver", "driver.c"];

pub fn main(args: cli::DemoArgs) -> Result<i32> {
    cli::no_words(args.unexpected, "see 'dmem demo --help'")?;
    let dir = args.dir;
    // One fixed place by default, so running the demo again replaces its core instead of adding
    // another.
    let dir = dir.unwrap_or_else(|| std::env::temp_dir().join("dmem-demo"));
    std::fs::create_dir_all(&dir).map_err(|e| failed(format!("cannot create {}: {e}", show(&dir))))?;
    let dir = dir.canonicalize().unwrap_or(dir);
    // Everything it needs, before it starts telling the story.
    locate::library()?;
    let cc = locate::c_compiler()?;
    // Built beside the core, so the commands shown are short enough to read and retype.
    let driver = compile_example(&cc, &dir)?;

    println!("The example program frees a 512-byte block and leaks a 2048-byte one. Run it with");
    println!("libdmem.so preloaded, aborting at exit so that the core holds every unfreed block:");
    println!();
    println!("$ cd {}", show(&dir));
    println!("$ cc {}", CC_ARGS.join(" "));
    println!("$ dmem run -o abort-shutdown -- ./driver");
    let spec = Spec {
        prog: driver.clone().into_os_string(),
        opts: Some("abort-shutdown".into()),
        cwd: Some(dir.clone()),
        capture_stdout: true,
        ..Spec::default()
    };
    let out = run::execute(&spec)?;
    print!("{}", abridged(&out.stdout));
    for note in &out.notes {
        println!("dmem: {note}");
    }
    let Some(core) = out.core else {
        return Err(failed(format!(
            "the example left no core in {}, so there is nothing to report; see the lines above",
            show(&dir)
        )));
    };
    // The same name every time, so the directory holds one core however often the demo runs.
    let kept = dir.join("core");
    let core = if core != kept && std::fs::rename(&core, &kept).is_ok() {
        kept
    } else {
        core
    };
    let core_name = core.strip_prefix(&dir).map(show).unwrap_or_else(|_| show(&core));
    println!("dmem: core file: {}", show(&core));
    println!();
    println!("Then see which allocation stacks hold the memory that was never freed:");
    println!();
    println!("$ dmem report ./driver {core_name}");
    let summary = crate::commands::heap::summary(cli::ListArgs {
        image: cli::ImageArgs {
            heuristics: None,
            image: vec![driver.clone().into_os_string(), core.clone().into_os_string()],
            registers: None,
        },
        filters: cli::Filters::default(),
    })?;
    print!("{summary}");
    println!();
    println!("Next, in {}:", show(&dir));
    println!("  dmem report ./driver {core_name} stacks            every block with its stack");
    println!("  dmem report ./driver {core_name} leaks             the blocks nothing points to");
    println!("  dmem flamegraph ./driver {core_name} -o demo.svg   the same as a flame graph");
    Ok(0)
}

/// Writes the example's source into `dir` and compiles it there; returns the program.
fn compile_example(cc: &Path, dir: &Path) -> Result<std::path::PathBuf> {
    let source = dir.join("driver.c");
    let driver = dir.join("driver");
    let _ = std::fs::remove_file(&driver);
    std::fs::write(&source, DRIVER_C).map_err(|e| failed(format!("cannot write {}: {e}", show(&source))))?;
    let out = Command::new(cc)
        .args(CC_ARGS)
        .current_dir(dir)
        .output()
        .map_err(|e| failed(format!("cannot run the C compiler {}: {e}", show(cc))))?;
    if !out.status.success() || !driver.is_file() {
        return Err(failed(format!(
            "compiling the example program in {} failed: {}",
            show(dir),
            last_line(&out.stderr)
        )));
    }
    Ok(driver)
}

/// The example prints two long lines of letters; show their start and length only.
fn abridged(out: &[u8]) -> String {
    String::from_utf8_lossy(out)
        .lines()
        .map(|l| match l.char_indices().nth(40) {
            Some((cut, _)) => format!("{}... ({} characters)\n", &l[..cut], l.chars().count()),
            None => format!("{l}\n"),
        })
        .collect()
}
