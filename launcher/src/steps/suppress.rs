//! `--suppressions` for the loss records of a scan (one class of one stack each, grouped and
//! taken out of the report by `analysis::records`): the files read, each recorded stack made
//! ready for matching once, and the suppressions used.

use crate::analysis::allocfn::{Alloc, Callees};
use crate::analysis::suppressions::{Problem, Recorded, Suppressions};
use crate::steps::inspect::Inspect;
use serde::Serialize;
use std::collections::HashMap;
use std::rc::Rc;

/// The suppressions of `--suppressions`, and each recorded stack made ready for them once.
pub struct Gate {
    pub sup: Suppressions,
    problems: Vec<Problem>,
    pub sites: Sites,
}

/// Each recorded stack as suppressions and valgrind's XML see it, made once.
#[derive(Default)]
pub struct Sites {
    callees: Callees,
    stacks: HashMap<u32, Rc<Recorded>>,
}

impl Gate {
    pub fn new(paths: &[String]) -> Gate {
        let (sup, problems) = Suppressions::load(paths);
        Gate {
            sup,
            problems,
            sites: Sites::default(),
        }
    }

    /// The lines saying which files were left out and what was skipped.
    pub fn warnings(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .problems
            .iter()
            .map(|p| format!("warning: this run had no suppressions from {p}"))
            .collect();
        out.extend(
            self.sup
                .files
                .iter()
                .filter_map(|f| f.skipped_note())
                .map(|n| format!("note: {n}")),
        );
        out
    }
}

impl Sites {
    /// A stack symbolised, with the allocation function its first frame called (read from the
    /// image's code and GOT) and the object that function is in.
    pub fn stack(&mut self, ins: &mut Inspect, id: u32) -> Rc<Recorded> {
        if let Some(o) = self.stacks.get(&id) {
            return o.clone();
        }
        let pcs = ins.heap.stacks[id as usize].to_vec();
        let frames = ins.namer.frames(&pcs);
        let maps = &ins.image.maps;
        let base = pcs.first().and_then(|&pc| {
            let path = maps.find(pc)?.path.clone()?;
            let start = maps.of_file(&path).find(|m| m.offset == 0).map(|m| m.start);
            start
        });
        let mem = &ins.image.mem;
        let mut read = |addr: u64, buf: &mut [u8]| mem.read(addr, buf).is_ok();
        let (alloc, ip) = match (pcs.first(), base) {
            (Some(&first), Some(base)) => match self.callees.called(&mut read, first, base) {
                Some((name, ip)) => (Alloc::of(Some(name)), ip),
                None => (Alloc::of(None), 0),
            },
            _ => (Alloc::of(None), 0),
        };
        let object = maps
            .find(ip)
            .filter(|_| ip != 0)
            .and_then(|m| m.path.as_deref())
            .map(Rc::from);
        let owned = Rc::new(Recorded {
            frames,
            alloc,
            alloc_ip: ip,
            alloc_object: object,
            truncated: pcs.len() as u64 >= ins.image.layout.nframes,
        });
        self.stacks.insert(id, owned.clone());
        owned
    }
}

/// A suppression used.
#[derive(Serialize)]
pub struct UsedJson {
    pub name: String,
    file: String,
    line: usize,
    pub count: u64,
    blocks: u64,
    bytes: u64,
    /// The line valgrind -v writes for it.
    #[serde(skip)]
    pub text: String,
}

/// The suppressions used, in the order valgrind lists them.
pub fn used(gate: &Gate) -> Vec<UsedJson> {
    gate.sup
        .used()
        .into_iter()
        .map(|(hit, u)| {
            let e = gate.sup.entry(hit);
            UsedJson {
                name: e.name.clone(),
                file: gate.sup.files[hit.file].path.clone(),
                line: e.line,
                count: u.count,
                blocks: u.blocks,
                bytes: u.bytes,
                text: gate.sup.used_line(hit, u),
            }
        })
        .collect()
}
