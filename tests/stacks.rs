//! Correctness of the recorded stacks, for both unwinders: complete through code built without
//! frame pointers (as the eBPF memory-leak tools' own example shows), through modules that are loaded,
//! unloaded and loaded again, and under every installed backend allocator. Nothing here measures
//! time; the overhead is what `bench/run.sh` is for.

mod common;

use common::{fixture, lib_path, make_core, output, preloaded, scratch_dir, text};
use std::path::Path;
use std::process::Command;

const UNWINDERS: [&str; 2] = ["fast", "backtrace"];

/// The function names of the stacks recorded for the blocks of `size` bytes, innermost first, as
/// `dmem stacks` prints them (`caller()+0xe (file:line) in lib` gives `caller()`), together with
/// the raw listing for failure messages.
fn stacks_of_blocks(prog: &Path, core: &Path, size: usize) -> (Vec<Vec<String>>, String) {
    let script = common::top().join("gdb").join("dmem.py");
    let out = output(
        Command::new("gdb")
            .args(["-batch", "-nx", "-q"])
            .arg(prog)
            .arg(core)
            .arg("-ex")
            .arg(format!("source {}", script.display()))
            .arg("-ex")
            .arg(format!("dmem stacks --min-size {size}"))
            .env_remove("LD_PRELOAD"),
    );
    let listing = text(&out.stdout);
    let header = format!(": {size} bytes allocated by thread");
    let mut stacks: Vec<Vec<String>> = Vec::new();
    let mut inside = false;
    for line in listing.lines() {
        if line.contains(&header) {
            stacks.push(Vec::new());
            inside = true;
        } else if inside && line.starts_with("    ") {
            let l = line.trim();
            let end = l
                .find("+0x")
                .or_else(|| l.find(" ("))
                .or_else(|| l.find(" in "))
                .unwrap_or(l.len());
            stacks.last_mut().unwrap().push(l[..end].to_owned());
        } else {
            inside = false;
        }
    }
    (stacks, format!("{listing}{}", text(&out.stderr)))
}

/// The one stack of a `size`-byte block.
fn stack_of_block(prog: &Path, core: &Path, size: usize) -> (Vec<String>, String) {
    let (mut stacks, listing) = stacks_of_blocks(prog, core, size);
    assert_eq!(stacks.len(), 1, "expected one block of {size} bytes:\n{listing}");
    (stacks.pop().unwrap(), listing)
}

/// Whether `names` has `run` in a row.
fn has_run(names: &[String], run: &[&str]) -> bool {
    names
        .windows(run.len())
        .any(|w| w.iter().zip(run).all(|(a, b)| a == b))
}

/// main -> caller -> nofp_leaf (a shared library) -> operator new[], all without frame pointers:
/// the leaked block's stack in the core names every one of them, starting at the caller of new.
#[test]
fn frames_without_frame_pointers_are_complete() {
    let prog = fixture("nofp_chain");
    for unwinder in UNWINDERS {
        let dir = scratch_dir(&format!("stacks-nofp-{unwinder}"));
        let core = make_core(
            &dir,
            &prog,
            &[],
            &format!("abort-shutdown,unwinder={unwinder}"),
            &lib_path(),
        );
        let (names, listing) = stack_of_block(&prog, &core, 1234 * 4);
        let at = names.iter().position(|n| n == "nofp_leaf");
        assert!(
            at.is_some_and(
                |i| names.get(i + 1..i + 3) == Some(&["caller()".to_owned(), "main".to_owned()][..])
            ),
            "unwinder={unwinder}: the stack lacks nofp_leaf, caller(), main in a row: {names:?}\n{listing}"
        );
        // libdmem exports operator new itself, so the first recorded frame is the caller of
        // `new`, not a frame inside libstdc++.
        assert_eq!(
            at,
            Some(0),
            "unwinder={unwinder}: frame 0 is not the caller of new: {names:?}\n{listing}"
        );
    }
}

/// A frame found through its frame pointer among frames without one; the same stack three
/// times, so walks after the first can reuse what the first one found.
#[test]
fn frame_pointer_frame_among_frames_without() {
    let prog = fixture("nofp_realign");
    for unwinder in UNWINDERS {
        let dir = scratch_dir(&format!("stacks-realign-{unwinder}"));
        let core = make_core(
            &dir,
            &prog,
            &[],
            &format!("abort-shutdown,unwinder={unwinder}"),
            &lib_path(),
        );
        let (stacks, listing) = stacks_of_blocks(&prog, &core, 777 * 4);
        assert_eq!(
            stacks.len(),
            3,
            "unwinder={unwinder}: three blocks expected\n{listing}"
        );
        for names in &stacks {
            assert!(
                has_run(names, &["nofp_leaf", "realigned", "main"]),
                "unwinder={unwinder}: {names:?}\n{listing}"
            );
        }
    }
}

/// Both unwinders record the same frames for the same allocations.
#[test]
fn fast_and_backtrace_agree() {
    let prog = fixture("nofp_chain");
    let mut stacks = Vec::new();
    for unwinder in UNWINDERS {
        let dir = scratch_dir(&format!("stacks-agree-{unwinder}"));
        let core = make_core(
            &dir,
            &prog,
            &[],
            &format!("abort-shutdown,unwinder={unwinder}"),
            &lib_path(),
        );
        let (names, listing) = stack_of_block(&prog, &core, 1234 * 4);
        assert!(
            names.len() >= 6,
            "unwinder={unwinder}: short stack {names:?}\n{listing}"
        );
        stacks.push(names);
    }
    assert_eq!(stacks[0], stacks[1], "fast and backtrace unwinders differ");
}

/// Modules loaded, unloaded and loaded again, one of them at the address another one had, with
/// the same code offsets but different frame sizes: the fixture checks every recorded stack
/// while its module is loaded. A stale cached rule from the unloaded module would walk the new
/// one's frames wrongly.
#[test]
fn stacks_through_dlopen_and_dlclose() {
    let prog = fixture("nofp_dlchurn");
    let dir = prog.parent().unwrap().to_str().unwrap().to_owned();
    for unwinder in UNWINDERS {
        let out = output(preloaded(&prog, &format!("unwinder={unwinder}"), None).args([dir.as_str(), "40"]));
        let stdout = text(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("160 checked, 0 wrong"),
            "unwinder={unwinder}: {:?}\n{stdout}{}",
            out.status,
            text(&out.stderr)
        );
    }
}

/// The two-thread storm with cross-thread frees completes under every installed backend, with
/// both unwinders, recording stacks all along.
#[test]
fn storm_under_every_backend() {
    let prog = fixture("bench_storm");
    let mut backends: Vec<(&str, Option<std::path::PathBuf>)> = vec![("glibc", None)];
    backends.extend(common::backends().into_iter().map(|(n, p)| (n, Some(p))));
    for (name, backend) in &backends {
        for unwinder in UNWINDERS {
            let out =
                output(preloaded(&prog, &format!("unwinder={unwinder}"), backend.as_deref()).arg("20000"));
            assert!(
                out.status.success() && text(&out.stdout).contains("storm: 20000 iterations x 2 threads"),
                "{name}, unwinder={unwinder}: {:?}\n{}{}",
                out.status,
                text(&out.stdout),
                text(&out.stderr)
            );
        }
    }
}
