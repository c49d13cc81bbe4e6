//! An image opened and its blocks classified (still reachable, possibly, definitely or indirectly
//! lost), for the commands that need the classes: leaks and why, and folded, types and words
//! when asked for lost blocks; and the blocks of the classes a command picks.

use crate::analysis::reach::Class;
use crate::cli;
use crate::model::leaks::Classified;
use crate::model::roots::{Loaded, Roots};
use crate::model::text::plural;
use crate::steps::inspect::{Inspect, Need};
use crate::Result;

/// The lost blocks, which `--leaks` of folded, types and words picks.
pub const LOST: [Class; 3] = [Class::DefinitelyLost, Class::IndirectlyLost, Class::PossiblyLost];

/// An image opened and classified, the process (if dmem stopped one) running again.
pub struct Scan {
    pub ins: Inspect,
    pub objects: Vec<Loaded>,
    pub roots: Roots,
    pub c: Classified,
}

impl Scan {
    pub fn open(image: &cli::ImageArgs) -> Result<Scan> {
        Scan::open_words(&image.image, image.registers.as_deref(), image.heuristics)
    }

    pub fn open_words(
        words: &[std::ffi::OsString],
        registers: Option<&std::path::Path>,
        heuristics: Option<u8>,
    ) -> Result<Scan> {
        let mut ins = Inspect::open_words(words, registers, heuristics, Need::Still)?;
        let (objects, roots, c) = ins.classify();
        if let Some(line) = ins.pause_line() {
            eprintln!("{line}");
        }
        Ok(Scan {
            ins,
            objects,
            roots,
            c,
        })
    }

    /// The blocks of `classes`, in address order.
    pub fn of(&self, classes: &[Class]) -> Vec<usize> {
        (0..self.c.class.len())
            .filter(|&i| classes.contains(&self.c.class[i]))
            .collect()
    }

    pub fn warnings(&mut self, scanned: bool) -> Vec<String> {
        let mut out = self.ins.warnings();
        if scanned {
            out.extend(self.roots.notes.iter().map(|n| format!("note: {n}")));
            if !self.c.unread_roots.is_empty() {
                let n = self.c.unread_roots.len() as u64;
                let names: Vec<&str> = self
                    .c
                    .unread_roots
                    .iter()
                    .take(4)
                    .map(|&i| self.roots.roots[i].what.as_str())
                    .collect();
                out.push(format!(
                    "warning: {} could not be read and {} not scanned: {}",
                    plural(n, "root range"),
                    if n == 1 { "was" } else { "were" },
                    names.join(", ")
                ));
            }
        }
        if self.c.unread_blocks > 0 {
            out.push(format!(
                "warning: {} not in memory; their contents were not scanned",
                plural(self.c.unread_blocks as u64, "block")
            ));
        }
        out
    }
}

/// The classes a command looks at: --show's, else the lost ones with --leaks, else None (every
/// live block).
pub fn classes_of(leaks: bool, show: &Option<cli::Classes>) -> Option<Vec<Class>> {
    show.clone().map(|c| c.0).or_else(|| leaks.then(|| LOST.to_vec()))
}

/// How output names the blocks of `classes`: "live", "lost", or the classes themselves.
pub fn describe(classes: &Option<Vec<Class>>) -> String {
    match classes {
        None => "live".to_owned(),
        Some(c) if c[..] == LOST => "lost".to_owned(),
        Some(c) => c.iter().map(|c| c.name()).collect::<Vec<_>>().join(" or "),
    }
}

/// The blocks a command looks at, before its filters: the live ones, or those of `classes`
/// (which needs the scan).
pub enum Pool {
    Live(Box<Inspect>),
    Classed(Box<Scan>),
}

impl Pool {
    pub fn open(image: &cli::ImageArgs, classes: &Option<Vec<Class>>) -> Result<Pool> {
        Ok(match classes {
            None => Pool::Live(Box::new(Inspect::open(image, Need::Snapshot)?)),
            Some(_) => Pool::Classed(Box::new(Scan::open(image)?)),
        })
    }

    pub fn ins(&mut self) -> &mut Inspect {
        match self {
            Pool::Live(i) => i,
            Pool::Classed(s) => &mut s.ins,
        }
    }

    pub fn blocks(&self, classes: &Option<Vec<Class>>) -> Vec<usize> {
        match (self, classes) {
            (Pool::Classed(s), Some(c)) => s.of(c),
            (Pool::Live(i), _) => i.heap.everything(),
            (Pool::Classed(s), None) => s.ins.heap.everything(),
        }
    }

    pub fn warnings(&mut self) -> Vec<String> {
        match self {
            Pool::Live(i) => i.warnings(),
            Pool::Classed(s) => s.warnings(true),
        }
    }

    pub fn objects(&mut self) -> Vec<Loaded> {
        match self {
            Pool::Live(i) => crate::model::roots::loaded(&i.image.maps),
            Pool::Classed(s) => std::mem::take(&mut s.objects),
        }
    }
}
