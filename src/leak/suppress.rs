//! The suppression files of `suppressions=FILE` (see `analysis::suppressions`). The library's
//! constructor only looks at each path (a `stat`, which neither opens nor blocks): it makes a
//! relative one absolute, while it still means what the user meant before the program changes
//! directory, and names one that is missing, not a regular file or too large. The files are read,
//! parsed and compiled when the exit report needs them, never before: a process that writes no
//! report never pays for them. A file that cannot be used is named in one line, the program runs
//! on without it, and the report says so again.

use crate::analysis::suppressions::{self, Problem, Suppressions};
use crate::{options, sink};
use std::sync::Mutex;

pub struct Loaded {
    pub sup: Suppressions,
    /// The files left out, and why.
    pub problems: Vec<Problem>,
}

/// The paths to read at the report, and the problems the constructor found.
static PATHS: Mutex<Option<(Vec<String>, Vec<Problem>)>> = Mutex::new(None);

/// Looks at the files `suppressions=FILE` names, once, from the library constructor.
pub fn load() {
    let paths: Vec<String> = options::get()
        .suppression_files()
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .collect();
    if paths.is_empty() {
        return;
    }
    let cwd = std::env::current_dir().ok();
    let mut usable = Vec::new();
    let mut problems = Vec::new();
    for p in paths {
        let abs = match &cwd {
            Some(d) if !p.starts_with('/') => d.join(&p).to_string_lossy().into_owned(),
            _ => p.clone(),
        };
        match suppressions::check(&abs) {
            Ok(()) => usable.push(abs),
            // Named as the user wrote it.
            Err(e) => problems.push(Problem { path: p, ..e }),
        }
    }
    tell(&problems, &[]);
    *PATHS.lock().unwrap_or_else(|e| e.into_inner()) = Some((usable, problems));
}

/// One line on standard error for each file left out, and for what each file read skipped.
fn tell(problems: &[Problem], notes: &[String]) {
    if problems.is_empty() && notes.is_empty() {
        return;
    }
    let mut out = sink::stderr();
    for p in problems {
        out.str("dmem: ")
            .str(&p.to_string())
            .str("; running without this file\n");
    }
    for note in notes {
        out.str("dmem: ").str(note).str("\n");
    }
    out.flush();
}

/// The files `load` looked at, read and compiled now, for the report (which runs once).
pub fn take() -> Option<Loaded> {
    let (paths, mut problems) = PATHS.lock().unwrap_or_else(|e| e.into_inner()).take()?;
    let (sup, late) = Suppressions::load(&paths);
    let notes: Vec<String> = sup.files.iter().filter_map(|f| f.skipped_note()).collect();
    tell(&late, &notes);
    problems.extend(late);
    Some(Loaded { sup, problems })
}
