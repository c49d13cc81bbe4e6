//! `dmem why`: the leak class of the block an address is in, and the chain of blocks from a root
//! (or from the definitely lost block that holds it) that decides it.

use crate::analysis::reach::Class;
use crate::cli;
use crate::model::answer::{self, render, Answer};
use crate::model::leaks::Graph;
use crate::model::names::Names;
use crate::model::text::{hex, plural};
use crate::steps::blocks::{self, block_json, BlockJson};
use crate::steps::counts::key;
use crate::steps::scan::Scan;
use crate::Result;
use serde::Serialize;

/// `dmem why` shows this many blocks at each end of a longer chain.
const WHY_ENDS: usize = 4;

/// `why`: the class of the block an address is in, and the chain of blocks that decides it.
#[derive(Serialize)]
#[serde(untagged)]
pub enum Why {
    Found(Chain),
    NotLive(NoBlock),
}

/// An address inside no live block.
#[derive(Serialize)]
pub struct NoBlock {
    addr: String,
    block: Option<()>,
}

/// The block's class and its chain: from a root for a still reachable or possibly lost block
/// (the block alone when none was found), from the definitely lost block that holds it for an
/// indirectly lost one, the block itself for a definitely lost one.
#[derive(Serialize)]
pub struct Chain {
    addr: String,
    class: String,
    root: Option<RootJson>,
    chain: Vec<Link>,
    #[serde(skip)]
    of: Class,
    /// The block's address.
    #[serde(skip)]
    block: u64,
}

#[derive(Serialize)]
pub struct RootJson {
    kind: &'static str,
    #[serde(rename = "where")]
    place: String,
    addr: Option<String>,
    value: String,
    start_pointer: bool,
    into: Option<u64>,
    /// The symbol of the word's address, if any.
    #[serde(skip)]
    symbol: Option<String>,
}

/// A block of the chain, and where the block before it points to it.
#[derive(Serialize)]
pub struct Link {
    #[serde(flatten)]
    block: BlockJson,
    via_offset: Option<u64>,
    into: Option<u64>,
    #[serde(skip)]
    stack: u32,
}

impl Answer for Why {
    const COMMAND: &'static str = "why";

    fn lines(&self) -> Vec<String> {
        match self {
            Why::NotLive(w) => vec![format!("{}: not inside any live block", w.addr)],
            Why::Found(c) => {
                let mut out = vec![c.head()];
                out.extend(c.root.as_ref().map(RootJson::line));
                if c.of == Class::DefinitelyLost {
                    // Its chain is the block alone.
                    let b = &c.chain[0].block;
                    out.push(format!("  {}, {}:", block_line(b), b.alloc_at()));
                    out.extend(answer::stack_lines(&b.stack, "       "));
                } else {
                    out.extend(c.chain_lines());
                }
                out
            }
        }
    }
}

/// `0x... (N bytes, thread T)`; without the thread where none is known.
fn block_line(b: &BlockJson) -> String {
    if b.bare {
        format!("{} ({} bytes)", b.addr, b.size)
    } else {
        format!("{} ({} bytes, thread {})", b.addr, b.size, b.tid)
    }
}

impl Chain {
    /// The line saying what the class means for this block.
    fn head(&self) -> String {
        let user = hex(self.block);
        let n = plural(self.chain.len() as u64, "block");
        match self.of {
            Class::StillReachable => {
                format!("{user} is still reachable: start pointers lead to it from a root through {n}:")
            }
            Class::PossiblyLost => format!(
                "{user} is possibly lost: only a chain through an interior pointer leads to it from a root, through {n}:"
            ),
            Class::DefinitelyLost => format!(
                "{user} is definitely lost: no pointer from a root or from a block in use leads to it, and no other lost block holds it"
            ),
            Class::IndirectlyLost => format!(
                "{user} is indirectly lost: only lost blocks point to it; a chain from the definitely lost block {}:",
                self.chain[0].block.addr
            ),
        }
    }

    /// The blocks of the chain, a long one (a linked list) by its ends; --json gives all of it.
    fn chain_lines(&self) -> Vec<String> {
        let len = self.chain.len();
        let keep = if len > 2 * WHY_ENDS + 1 { WHY_ENDS } else { len };
        let mut out = Vec::new();
        let mut last: Option<u32> = None;
        for (n, link) in self.chain.iter().enumerate() {
            if keep <= n && n < len - keep {
                if n == keep {
                    out.push(format!("  ... {} more blocks on the way ...", len - 2 * keep));
                }
                continue;
            }
            let mut via = String::new();
            if let (Some(off), Some(inside)) = (link.via_offset, link.into) {
                via = format!(" at offset {off} of the block above");
                if inside > 0 {
                    via.push_str(&format!(", {inside} bytes into this one"));
                }
            }
            let line = block_line(&link.block);
            if last == Some(link.stack) {
                let same = if link.block.bare {
                    "in the same group"
                } else {
                    "allocated at the same stack"
                };
                out.push(format!("  -> {line}{via}, {same}"));
                continue;
            }
            out.push(format!("  -> {line}{via}, {}:", link.block.alloc_at()));
            out.extend(answer::stack_lines(&link.block.stack, "       "));
            last = Some(link.stack);
        }
        out
    }
}

impl RootJson {
    fn line(&self) -> String {
        let hit = self
            .into
            .map(|d| format!(", {d} bytes into the first block"))
            .unwrap_or_default();
        match &self.addr {
            None => format!("  root: {} = {}{hit}", self.place, self.value),
            Some(w) => {
                let name = self
                    .symbol
                    .as_ref()
                    .map(|n| format!(" ({n})"))
                    .unwrap_or_default();
                format!("  root: the word at {w}{name}, in the {}{hit}", self.place)
            }
        }
    }
}

pub fn why(args: cli::AddrArgs) -> Result<String> {
    let (words, addr) = blocks::addr_words(&args)?;
    let mut scan = Scan::open_words(&words, args.registers.as_deref(), args.heuristics)?;
    let answer = match scan.ins.heap.find(addr) {
        None => Why::NotLive(NoBlock {
            addr: hex(addr),
            block: None,
        }),
        Some((k, _)) => Why::Found(Chain::of(&mut scan, addr, k)),
    };
    Ok(render(&answer, args.json, || scan.warnings(true)))
}

impl Chain {
    /// The chain that decides the class of block `k`, which `addr` is in.
    fn of(scan: &mut Scan, addr: u64, k: usize) -> Chain {
        let class = scan.c.class[k];
        let graph = Graph::build(&*scan.ins.image.mem, &scan.ins.heap, &scan.roots);
        let (root, chain) = match class {
            Class::StillReachable | Class::PossiblyLost => {
                match graph.chain_from_root(k, &scan.c.class, class == Class::StillReachable) {
                    Some((r, rf, chain)) => (Some((r, rf)), chain),
                    None => (None, vec![k]),
                }
            }
            _ => (None, graph.chain_from_leak(k, &scan.c.class)),
        };
        let mut links = Vec::new();
        for (n, &p) in chain.iter().enumerate() {
            let b = scan.ins.heap.blocks[p];
            let hop = if n == 0 {
                None
            } else {
                graph.link(&scan.ins.heap, chain[n - 1], p)
            };
            links.push(Link {
                block: block_json(&mut scan.ins, &b),
                via_offset: hop.map(|h| h.0),
                into: hop.map(|h| h.1),
                stack: b.stack,
            });
        }
        let first = scan.ins.heap.blocks[chain[0]].addr;
        let names = Names::new(&scan.objects);
        let root = root.map(|(r, rf)| RootJson {
            kind: scan.roots.roots[r].kind_name(),
            place: scan.roots.roots[r].what.clone(),
            addr: rf.word.map(hex),
            value: hex(rf.value),
            start_pointer: rf.start,
            into: Some(rf.value - first).filter(|&d| d != 0),
            symbol: rf.word.and_then(|w| names.name(w)),
        });
        Chain {
            addr: hex(addr),
            class: key(class),
            root,
            chain: links,
            of: class,
            block: scan.ins.heap.blocks[k].addr,
        }
    }
}
