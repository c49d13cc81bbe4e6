//! How the analysis commands get what they read: the image named on the command line, its lists
//! walked into a heap, names for its addresses, and, for the scans that need the process to
//! hold still, its threads stopped while their registers and its writable memory are copied
//! (or the registers of a debugger that holds it stopped).

use crate::analysis::escape::show;
use crate::analysis::reach::Heuristic;
use crate::cli::ImageArgs;
use crate::model::frames::Namer;
use crate::model::heap::{self, Heap};
use crate::model::leaks::{self, Classified};
use crate::model::roots::{self, Loaded, Roots};
use crate::model::symbolize::Symbolizer;
use crate::source::image::{Image, Target};
use crate::source::live;
use crate::source::mappings::Mappings;
use crate::source::memory::{CopiedMemory, LiveMemory, ReadError};
use crate::source::ptrace;
use crate::source::threads;
use crate::{failed, Result};
use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

pub struct Inspect {
    pub image: Image,
    pub heap: Heap,
    pub namer: Namer,
    /// How long dmem kept the process stopped, if it stopped one.
    pub pause: Option<Duration>,
    /// The heuristics the classification applies (`Heuristic` bits).
    pub heuristics: u8,
    /// Where the image was read through glibc's heap: what that walk found, for a note.
    pub bare: Option<String>,
    /// And what it counted.
    pub census: Option<crate::source::glibc::Census>,
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
        Inspect::open_words(&args.image, args.registers.as_deref(), args.heuristics, need)
    }

    pub fn open_words(
        words: &[OsString],
        registers: Option<&Path>,
        heuristics: Option<u8>,
        need: Need,
    ) -> Result<Inspect> {
        let target = Target::parse(words)?;
        let image = Image::open(&target)?;
        Inspect::of_image(image, registers, heuristics, need)
    }

    /// An image opened already, made ready to answer: a running process stopped for a copy where
    /// `need` (or glibc's heap) asks for one, its heap walked.
    pub fn of_image(
        mut image: Image,
        registers: Option<&Path>,
        heuristics: Option<u8>,
        need: Need,
    ) -> Result<Inspect> {
        let mut pause = None;
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
        } else if let (Some(pid), Need::Still, _) | (Some(pid), _, true) =
            (image.pid, need, image.glibc.is_some())
        {
            // glibc's heap has no change counters to read a running process by: it is always
            // read from a copy taken while the process was stopped.
            // Stopped for the copy of its writable memory only: the analysis reads the copy.
            let s = ptrace::stop(pid)?;
            let copy = Mappings::of_process(pid)
                .map_err(|e| live::refused(pid, &e))
                .and_then(|maps| {
                    let mem = CopiedMemory::copy(LiveMemory::new(pid), &maps).map_err(|e| match e {
                        ReadError::Denied(e) => live::refused(pid, &e),
                        ReadError::Unmapped => failed(format!("process {pid} ended")),
                    })?;
                    Ok((maps, mem))
                });
            image.threads = s.threads.clone();
            pause = Some(s.resume());
            let (maps, mem) = copy?;
            image.maps = maps;
            image.mem = Box::new(mem);
            image.still = true;
        }
        let mut namer = Namer::new(Symbolizer::new(image.maps.clone()));
        if image.glibc.is_none() {
            // While the lists are walked; what else the stacks need, after.
            namer.sym.open_usual_ahead(image.exe.as_deref());
        }
        let (walk, bare, census) = match &image.glibc {
            Some(g) => {
                let tps = image.thread_pointers();
                let (walk, census) = crate::source::glibc::walk(&*image.mem, &image.maps, g, &tps);
                (walk, Some(census.line(g)), Some(census))
            }
            None => (image.walk()?, None, None),
        };
        let mut heap = Heap::new(walk, image.layout.header_size);
        if image.glibc.is_some() {
            crate::model::bare::group_by_type_and_size(&mut heap, &*image.mem, &roots::loaded(&image.maps));
        }
        namer
            .sym
            .open_ahead(heap.stacks.iter().flat_map(|s| s.iter().copied()));
        Ok(Inspect {
            image,
            heap,
            namer,
            pause,
            heuristics: heuristics.unwrap_or(Heuristic::DEFAULT),
            bare,
            census,
        })
    }

    /// Whether the image was read through glibc's heap: its blocks have no stacks.
    pub fn is_bare(&self) -> bool {
        self.image.glibc.is_some()
    }

    /// Refuses, in one line, a command that needs allocation stacks on an image that has none.
    pub fn needs_stacks(&self, what: &str) -> Result<()> {
        match &self.image.glibc {
            Some(g) => Err(failed(format!(
                "{} ran without libdmem, so it has no allocation stacks ({what} needs them; read \
                 through {}'s heap, 'dmem leaks', 'summary', 'types', 'whatis', 'why', 'words', \
                 'verify', 'snapshot' and 'diff' answer without): run it with LD_PRELOAD=libdmem.so \
                 (or 'dmem run') to record them",
                self.image.name,
                g.version_text()
            ))),
            None => Ok(()),
        }
    }

    /// The line saying how long a process was stopped, if dmem stopped one.
    pub fn pause_line(&self) -> Option<String> {
        let pause = self.pause?;
        Some(format!(
            "dmem: {} was stopped for {:.1} ms while its threads' registers and writable memory were copied",
            self.image.name,
            pause.as_secs_f64() * 1e3
        ))
    }

    /// The loaded objects, the roots and every block's class.
    pub fn classify(&mut self) -> (Vec<Loaded>, Roots, Classified) {
        let objects = roots::loaded(&self.image.maps);
        let r = roots::gather(&self.image, &objects, &self.heap);
        let c = leaks::classify(&*self.image.mem, &self.heap, &r, self.heuristics);
        (objects, r, c)
    }

    /// Lines about anything that makes the answer incomplete.
    pub fn warnings(&mut self) -> Vec<String> {
        let h = &self.heap;
        let mut out = heap::warnings(&h.problems(), &h.blocks, &h.stacks, &mut self.namer);
        out.extend(self.bare.iter().map(|l| format!("note: {l}")));
        if !self.image.still {
            out.extend(heap::moving_note(h.moving(), h.lists.len(), &self.image.name));
        }
        out
    }
}
