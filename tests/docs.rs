//! The README keeps up with the tree: its options table is the one the library prints for
//! `DMEM_OPTS=help` (both come from the options table in src/options.rs), and its file map names
//! every file of the library, the launcher, the gdb side and the benches.

mod common;

use std::path::Path;

/// `(name, help)` pairs as `DMEM_OPTS=help` prints them.
fn help_rows() -> Vec<(String, String)> {
    let out = common::output(&mut common::preloaded("true", "help", None));
    assert!(out.status.success(), "`true` failed under DMEM_OPTS=help");
    let text = common::text(&out.stderr);
    let rows: Vec<(String, String)> = text
        .lines()
        .skip_while(|l| !l.starts_with("dmem options"))
        .skip(1)
        .filter_map(|l| {
            let l = l.trim_start();
            let (name, help) = l.split_once(char::is_whitespace)?;
            Some((name.to_owned(), help.trim().to_owned()))
        })
        .collect();
    assert!(rows.len() >= 8, "help printed too few options:\n{text}");
    rows
}

#[test]
fn readme_options_table_matches_help() {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let section = readme
        .split("<!-- options-table -->")
        .nth(1)
        .and_then(|rest| rest.split("<!-- /options-table -->").next())
        .expect("README has no <!-- options-table --> section");
    let table: Vec<(String, String)> = section
        .lines()
        .filter_map(|l| {
            // | `name` | help |
            // A `\|` inside a cell is Markdown's escaped pipe, not a cell border.
            let l = l.replace("\\|", "\u{1}");
            let cells: Vec<String> = l.split('|').map(|c| c.trim().replace('\u{1}', "|")).collect();
            (cells.len() == 4 && cells[1].starts_with('`'))
                .then(|| (cells[1].trim_matches('`').to_owned(), cells[2].clone()))
        })
        .collect();
    assert_eq!(
        table,
        help_rows(),
        "README's options table differs from DMEM_OPTS=help"
    );
}

/// Every file under `dir` (relative to the repository), recursively, as paths relative to the
/// repository root; Python's byte-code caches are not files of the tree.
fn files_under(root: &Path, dir: &str, out: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(root.join(dir)) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let rel = format!("{dir}/{name}");
        if name == "__pycache__" || name.ends_with(".pyc") {
            continue;
        }
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            files_under(root, &rel, out);
        } else {
            out.push(rel);
        }
    }
}

/// The README's file map ("Where things are") names every file under `src/`, `gdb/` and `bench/`.
/// A file counts as named when a code span in that section is a trailing part of its path long
/// enough to name it alone in the tree: `exports.rs` names src/exports.rs, while two `mod.rs`
/// files need `unwind/mod.rs` and `leak/mod.rs`.
#[test]
fn readme_file_map_names_every_file() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let section = readme
        .split("### Where things are")
        .nth(1)
        .map(|rest| rest.split("\n## ").next().unwrap_or(rest))
        .expect("README has no 'Where things are' section");
    let spans: Vec<&str> = section.split('`').skip(1).step_by(2).collect();

    let mut files = Vec::new();
    for dir in ["src", "gdb", "bench"] {
        files_under(root, dir, &mut files);
    }
    assert!(files.len() > 20, "found too few files: {files:?}");
    // Trailing parts of a path: for src/a/b.rs, "b.rs", "a/b.rs" and "src/a/b.rs".
    let suffixes = |f: &str| -> Vec<String> {
        let parts: Vec<&str> = f.split('/').collect();
        (0..parts.len()).rev().map(|i| parts[i..].join("/")).collect()
    };
    let missing: Vec<&String> = files
        .iter()
        .filter(|f| {
            let unique = suffixes(f)
                .into_iter()
                .skip_while(|s| files.iter().filter(|g| g.ends_with(&format!("/{s}"))).count() > 1)
                .collect::<Vec<_>>();
            !unique.iter().any(|s| spans.contains(&s.as_str()))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "README's file map does not name these files (by a part of the path that names them alone): {missing:?}"
    );
}
