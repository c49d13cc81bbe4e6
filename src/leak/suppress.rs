//! The suppression files of `suppressions=FILE` (see `analysis::suppressions`), read at
//! start-up, when a path still means what the user meant before the program changes directory,
//! and kept for the exit report. A file that cannot be read or parsed is named in one line, the
//! program runs on without it, and the report says so again.

use crate::analysis::suppressions::{Problem, Suppressions};
use crate::{options, sink};
use std::sync::Mutex;

pub struct Loaded {
    pub sup: Suppressions,
    /// The files left out, and why.
    pub problems: Vec<Problem>,
}

static LOADED: Mutex<Option<Loaded>> = Mutex::new(None);

/// Reads the files `suppressions=FILE` names, once, from the library constructor (the real
/// allocator is known by then; libdmem's own heap holds what is read).
pub fn load() {
    let paths: Vec<String> = options::get()
        .suppression_files()
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .collect();
    if paths.is_empty() {
        return;
    }
    let (sup, problems) = Suppressions::load(&paths);
    let mut out = sink::stderr();
    for p in &problems {
        out.str("dmem: ")
            .str(&p.to_string())
            .str("; running without this file\n");
    }
    for note in sup.files.iter().filter_map(|f| f.skipped_note()) {
        out.str("dmem: ").str(&note).str("\n");
    }
    out.flush();
    *LOADED.lock().unwrap_or_else(|e| e.into_inner()) = Some(Loaded { sup, problems });
}

/// What `load` read, for the report (which runs once).
pub fn take() -> Option<Loaded> {
    LOADED.lock().unwrap_or_else(|e| e.into_inner()).take()
}
