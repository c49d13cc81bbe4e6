//! The README's options table is the one the library prints for `DMEM_OPTS=help`: both come from
//! the options table in src/options.rs, and this keeps the README from drifting.

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
