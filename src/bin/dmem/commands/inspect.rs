//! How the analysis commands get what they read: the image named on the command line, its lists
//! walked into a heap, names for its addresses, and, for the scans that need the process to
//! hold still, its threads stopped (or the registers of a debugger that holds it stopped).
#![forbid(unsafe_code)]

use crate::cli::{show, ImageArgs};
use crate::model::frames::Namer;
use crate::model::heap::Heap;
use crate::model::leaks::{self, Classified};
use crate::model::roots::{self, Loaded, Roots};
use crate::model::symbolize::Symbolizer;
use crate::model::text::plural;
use crate::source::image::{Image, Target};
use crate::source::ptrace::{self, Stopped};
use crate::source::threads;
use crate::{failed, Result};
use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

pub struct Inspect {
    pub image: Image,
    pub heap: Heap,
    pub namer: Namer,
    /// The process, stopped by dmem for a scan; let go by `resume`.
    stopped: Option<Stopped>,
    /// How long it was stopped, once let go.
    pub pause: Option<Duration>,
}

/// Whether a command needs the image to hold still (every thread's registers and a consistent
/// heap), or reads a running process as `dmem top` does.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Need {
    Snapshot,
    Still,
}

impl Inspect {
    pub fn open(args: &ImageArgs, need: Need) -> Result<Inspect> {
        Inspect::open_words(&args.image, args.registers.as_deref(), need)
    }

    pub fn open_words(words: &[OsString], registers: Option<&Path>, need: Need) -> Result<Inspect> {
        let target = Target::parse(words)?;
        let mut image = Image::open(&target)?;
        let mut stopped = None;
        if let Some(file) = registers {
            if image.pid.is_none() {
                return Err(crate::usage(
                    "--registers is for a running process (a PID); a core holds its own",
                ));
            }
            let text = std::fs::read_to_string(file)
                .map_err(|e| failed(format!("cannot read {}: {e}", show(file))))?;
            image.threads = threads::from_json(&text).map_err(|e| failed(format!("{}: {e}", show(file))))?;
            image.still = true;
        } else if let (Some(pid), Need::Still) = (image.pid, need) {
            let s = ptrace::stop(pid)?;
            image.threads = s.threads.clone();
            image.still = true;
            stopped = Some(s);
        }
        let walk = image.walk()?;
        let heap = Heap::new(walk, image.layout.header_size);
        let namer = Namer::new(Symbolizer::new(image.maps.clone()));
        Ok(Inspect {
            image,
            heap,
            namer,
            stopped,
            pause: None,
        })
    }

    /// Lets a process dmem stopped run again.
    pub fn resume(&mut self) {
        if let Some(s) = self.stopped.take() {
            self.pause = Some(s.resume());
        }
    }

    /// The line saying how long a process was stopped, if dmem stopped one.
    pub fn pause_line(&self) -> Option<String> {
        let pause = self.pause?;
        Some(format!(
            "dmem: {} was stopped for {:.1} ms for the scan",
            self.image.name,
            pause.as_secs_f64() * 1e3
        ))
    }

    /// The loaded objects, the roots and every block's class; the process (if dmem stopped
    /// one) runs again afterwards.
    pub fn classify(&mut self) -> (Vec<Loaded>, Roots, Classified) {
        let objects = roots::loaded(&self.image.maps);
        let r = roots::gather(&self.image, &objects);
        let c = leaks::classify(&*self.image.mem, &self.heap, &r);
        (objects, r, c)
    }

    /// Lines about anything that makes the answer incomplete.
    pub fn warnings(&self) -> Vec<String> {
        let problems = self.heap.problems();
        let mut out = Vec::new();
        if !problems.is_empty() {
            out.push(format!(
                "warning: {} in the lists; the answer is incomplete (see 'dmem verify'):",
                plural(problems.len() as u64, "problem")
            ));
            out.extend(problems.iter().take(5).map(|p| format!("warning:   {p}")));
            if problems.len() > 5 {
                out.push(format!("warning:   ... and {} more", problems.len() - 5));
            }
        }
        if !self.image.still {
            let moving = self.heap.lists.iter().filter(|l| !l.consistent).count();
            if moving > 0 {
                out.push(format!(
                    "note: {} of {} lists changed too fast to read whole: {} runs on while it is read",
                    moving,
                    self.heap.lists.len(),
                    self.image.name
                ));
            }
        }
        out
    }
}
