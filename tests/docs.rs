//! The documentation keeps up with the tree: docs/options.md's table is the one the library
//! prints for `DMEM_OPTS=help` (both come from the options table in src/options.rs),
//! docs/architecture.md's file map names every file of the library, the analysis, the launcher,
//! the gdb side and the benches, the README's demo transcript is what `dmem demo` prints,
//! every test file is a test target of the launcher's package, docs/commands/ holds each
//! command's page as its `--help` gives it, and docs/descriptor.md the descriptor's fields as
//! analysis/src/descriptor.rs defines them.

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
fn options_page_table_matches_help() {
    let page = std::fs::read_to_string(common::top().join("docs/options.md")).unwrap();
    let section = page
        .split("<!-- options-table -->")
        .nth(1)
        .and_then(|rest| rest.split("<!-- /options-table -->").next())
        .expect("docs/options.md has no <!-- options-table --> section");
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
        "docs/options.md's options table differs from DMEM_OPTS=help"
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

/// docs/architecture.md's file map ("Where things are") names every file under `src/`, `analysis/`,
/// `launcher/`, `gdb/` and `bench/`, every test file and script at the top of `tests/`, and the folders of helpers beside them.
/// A file counts as named when a code span in that section is a trailing part of its path long
/// enough to name it alone in the tree: `exports.rs` names src/exports.rs, while two `mod.rs`
/// files need `unwind/mod.rs` and `leak/mod.rs`.
#[test]
fn architecture_file_map_names_every_file() {
    let root = common::top();
    let page = std::fs::read_to_string(root.join("docs/architecture.md")).unwrap();
    let section = page
        .split("## Where things are")
        .nth(1)
        .map(|rest| rest.split("\n## ").next().unwrap_or(rest))
        .expect("docs/architecture.md has no 'Where things are' section");
    let spans: Vec<&str> = section.split('`').skip(1).step_by(2).collect();

    let mut files = Vec::new();
    for dir in ["src", "analysis", "launcher", "gdb", "bench"] {
        files_under(root, dir, &mut files);
    }
    // The tests themselves, one file each; `tests/common/` and `tests/python/` are named as
    // folders of helpers.
    let mut tests = Vec::new();
    files_under(root, "tests", &mut tests);
    let (helpers, top): (Vec<String>, Vec<String>) =
        tests.into_iter().partition(|f| f.matches('/').count() > 1);
    for dir in helpers
        .iter()
        .filter_map(|f| f.rsplit_once('/'))
        .map(|(d, _)| format!("{d}/"))
    {
        assert!(
            spans.contains(&dir.as_str()),
            "docs/architecture.md's file map does not name the folder {dir}"
        );
    }
    files.extend(top);
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
        "docs/architecture.md's file map does not name these files (by a part of the path that names them alone): {missing:?}"
    );
}

/// Every test file at the top of `tests/` is a `[[test]]` of the launcher's package, under its
/// own name, and every such target is a file there: the package lists them one by one
/// (`autotests = false`, as its tests live outside its folder), so a file left out would never
/// run.
#[test]
fn every_test_file_is_a_test_target_of_the_launcher() {
    let root = common::top();
    let manifest = std::fs::read_to_string(root.join("launcher/Cargo.toml")).unwrap();
    let value = |table: &str, key: &str| -> Option<String> {
        table.lines().find_map(|l| {
            let (k, v) = l.split_once('=')?;
            (k.trim() == key).then(|| v.trim().trim_matches('"').to_owned())
        })
    };
    let mut targets = std::collections::BTreeSet::new();
    for table in manifest.split("[[test]]").skip(1) {
        let table = table.split("\n[").next().unwrap_or(table);
        let name = value(table, "name").expect("a [[test]] without a name");
        let path = value(table, "path").expect("a [[test]] without a path");
        assert_eq!(path, format!("../tests/{name}.rs"), "test target {name}'s path");
        targets.insert(name);
    }
    let mut files = std::collections::BTreeSet::new();
    for e in std::fs::read_dir(root.join("tests")).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if let Some(stem) = name.strip_suffix(".rs") {
            files.insert(stem.to_owned());
        }
    }
    assert!(files.len() > 20, "found too few test files: {files:?}");
    assert_eq!(
        targets, files,
        "launcher/Cargo.toml's [[test]] targets differ from the files of tests/"
    );
}

/// Lines of a transcript as they compare: addresses (`common::hide_addresses`) and the core's
/// path, which differ from run to run, stand as `0xADDR` and `CORE`.
fn comparable(lines: &[&str]) -> Vec<String> {
    lines
        .iter()
        .map(|l| match l.find("core file: ") {
            Some(at) => format!("{}core file: CORE", &l[..at]),
            None => common::hide_addresses(l),
        })
        .collect()
}

/// The README's first transcript is what `dmem demo` prints, from the compiler's command to the
/// report's total, addresses and the core's path aside.
#[test]
fn readme_demo_transcript_is_what_the_demo_prints() {
    let readme = std::fs::read_to_string(common::top().join("README.md")).unwrap();
    let block = readme
        .split("```\n$ cc ")
        .nth(1)
        .and_then(|rest| rest.split("\n```").next())
        .map(|b| format!("$ cc {b}"))
        .expect("README has no transcript starting with `$ cc`");
    let shown: Vec<&str> = block.lines().collect();

    let dir = common::scratch_dir("docs-demo");
    let out = common::output(common::dmem().args(["demo", "--dir"]).arg(&dir));
    let stdout = common::text(&out.stdout);
    assert!(
        out.status.success(),
        "dmem demo failed: {}{stdout}",
        common::text(&out.stderr)
    );
    let printed: Vec<&str> = stdout
        .lines()
        .skip_while(|l| !l.starts_with("$ cc "))
        .take_while(|l| !l.starts_with("Next, in "))
        .collect();
    let printed: Vec<&str> = match printed.iter().position(|l| l.starts_with("total: ")) {
        Some(last) => printed[..=last].to_vec(),
        None => panic!("dmem demo printed no total line:\n{stdout}"),
    };
    assert_eq!(
        comparable(&shown),
        comparable(&printed),
        "README's transcript differs from what dmem demo prints:\n{stdout}"
    );
}

/// The commands `dmem --help` lists (not `help`), in its order.
fn commands() -> Vec<String> {
    let out = common::output(common::dmem().arg("--help"));
    assert!(out.status.success(), "dmem --help failed");
    let text = common::text(&out.stdout);
    let names: Vec<String> = text
        .lines()
        .skip_while(|l| !l.starts_with("Subcommands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|&n| n != "help")
        .map(str::to_owned)
        .collect();
    assert!(names.len() >= 20, "dmem --help listed too few commands:\n{text}");
    names
}

/// The reference page the README's table of commands links `name` to, as a link from
/// docs/commands/: (its text, its target).
fn topic_of(readme: &str, name: &str) -> (String, String) {
    readme
        .lines()
        .filter(|l| l.starts_with("| `dmem "))
        .find_map(|l| {
            let l = l.replace("\\|", "\u{1}");
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            let first = cells.get(1)?.trim_matches('`').strip_prefix("dmem ")?;
            let names = first.split_whitespace().next()?;
            names.split('\u{1}').any(|n| n == name).then_some(())?;
            let link = cells.get(3)?.strip_prefix('[')?;
            let (text, target) = link.split_once("](")?;
            let target = target.strip_suffix(')')?.strip_prefix("docs/")?;
            Some((text.to_owned(), format!("../{target}")))
        })
        .unwrap_or_else(|| panic!("README's table of commands has no row for `dmem {name}`"))
}

/// docs/commands/ holds one page per command, generated from the command's own `--help` (the
/// clap declarations the man pages come from too) and the README's table of commands, so it
/// cannot drift from either; `DMEM_BLESS=1` rewrites the pages, and the diff is the review.
#[test]
fn every_command_has_a_page_generated_from_its_help() {
    let root = common::top();
    let dir = root.join("docs/commands");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let bless = std::env::var_os("DMEM_BLESS").is_some();
    let names = commands();
    let mut index = String::from(
        "# Commands\n\nOne page per command, generated from its `--help` by tests/docs.rs \
         (`DMEM_BLESS=1 cargo test --release --test docs` rewrites them).\n\n",
    );
    for name in &names {
        let out = common::output(common::dmem().args([name, "--help"]));
        assert!(out.status.success(), "dmem {name} --help failed");
        let help = common::text(&out.stdout);
        let about = help.lines().find(|l| !l.is_empty() && !l.starts_with("Usage:"));
        let about = about.unwrap_or("").trim();
        let (text, target) = topic_of(&readme, name);
        let page = format!(
            "# dmem {name}\n\n{about}\n\n```text\n$ dmem {name} --help\n{}\n```\n\nMore in [{text}]({target}).\n",
            help.trim_end()
        );
        index.push_str(&format!("- [`dmem {name}`]({name}.md): {about}\n"));
        let path = dir.join(format!("{name}.md"));
        if bless {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&path, &page).unwrap();
            continue;
        }
        let shown = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            shown == page,
            "docs/commands/{name}.md differs from `dmem {name} --help` (DMEM_BLESS=1 rewrites it):\n{page}"
        );
    }
    let index_path = dir.join("README.md");
    if bless {
        std::fs::write(&index_path, &index).unwrap();
    }
    assert_eq!(
        std::fs::read_to_string(&index_path).unwrap_or_default(),
        index,
        "docs/commands/README.md differs from the commands `dmem --help` lists"
    );
    // No page is left of a command that is gone.
    for e in std::fs::read_dir(&dir).unwrap().flatten() {
        let file = e.file_name().to_string_lossy().into_owned();
        let stem = file.strip_suffix(".md").unwrap_or(&file);
        assert!(
            stem == "README" || names.iter().any(|n| n == stem),
            "docs/commands/{file} is the page of no command"
        );
    }
}

/// docs/descriptor.md, the layout descriptor's format, generated from the one definition the
/// library writes from and every reader reads with (analysis/src/descriptor.rs): its module
/// comment, its version, and a row for each group of fields in `descriptor::field` with the
/// comment they share. `DMEM_BLESS=1` rewrites it.
#[test]
fn descriptor_page_is_the_format_in_code() {
    let root = common::top();
    let source = std::fs::read_to_string(root.join("analysis/src/descriptor.rs")).unwrap();
    let about: Vec<&str> = source
        .lines()
        .take_while(|l| l.starts_with("//!"))
        .map(|l| l.trim_start_matches("//!").trim_start())
        .collect();
    let version = source
        .lines()
        .find_map(|l| l.strip_prefix("pub const VERSION: u64 = "))
        .and_then(|v| v.strip_suffix(';'))
        .expect("descriptor.rs has no VERSION");
    // (the comment, the fields under it), in the order of the source.
    let mut groups: Vec<(String, Vec<String>)> = Vec::new();
    let mut in_doc = false;
    let body = source.split("pub mod field {").nth(1).expect("no `mod field`");
    for line in body.lines().map(str::trim).take_while(|l| *l != "}") {
        if let Some(d) = line.strip_prefix("///") {
            // A comment after a field starts the next group.
            if !in_doc {
                groups.push((String::new(), Vec::new()));
            }
            in_doc = true;
            let group = groups.last_mut().unwrap();
            group.0 = format!("{} {}", group.0, d.trim()).trim().to_owned();
        } else if let Some(rest) = line.strip_prefix("pub const ") {
            let name = rest.split('"').nth(1).expect("a field's name in quotes");
            if groups.is_empty() {
                groups.push((String::new(), Vec::new()));
            }
            groups.last_mut().unwrap().1.push(format!("`{name}`"));
            in_doc = false;
        }
    }
    assert!(groups.len() >= 15, "found too few field groups in descriptor.rs");
    let mut page = String::from("# The layout descriptor\n\n");
    for para in about.split(|l| l.is_empty()) {
        page.push_str(&para.join("\n"));
        page.push_str("\n\n");
    }
    page.push_str(&format!(
        "## Its fields (version {version})\n\nGenerated from `analysis/src/descriptor.rs` by \
         tests/docs.rs (`DMEM_BLESS=1 cargo test --release --test docs` rewrites it). Offsets \
         are in bytes; an address is the process's.\n\n| fields | meaning |\n| --- | --- |\n"
    ));
    for (doc, names) in &groups {
        page.push_str(&format!(
            "| {} | {} |\n",
            names.join(", "),
            doc.replace('|', "\\|")
        ));
    }
    let path = root.join("docs/descriptor.md");
    if std::env::var_os("DMEM_BLESS").is_some() {
        std::fs::write(&path, &page).unwrap();
    }
    assert!(
        std::fs::read_to_string(&path).unwrap_or_default() == page,
        "docs/descriptor.md differs from analysis/src/descriptor.rs (DMEM_BLESS=1 rewrites it):\n{page}"
    );
}
