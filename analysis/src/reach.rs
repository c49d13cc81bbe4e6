//! Conservative reachability over the live blocks, in valgrind's four leak classes.
//!
//! This is memcheck's algorithm (mc_leakcheck.c), the one definition the library's exit report
//! and the launcher share (the gdb commands ask the launcher):
//!
//! 1. Mark from the roots. A *start pointer* (a word equal to a block's first byte) found in a
//!    root or in a still-reachable block makes the block **still reachable**. Any other pointer
//!    into a block, an *interior* one or any pointer found in a possibly-lost block, makes an
//!    unmarked block **possibly lost**; a possibly-lost block later reached by a start pointer
//!    from a root or a reachable block is upgraded and scanned again. A worklist runs this to a
//!    fixed point.
//! 2. What stays unmarked is lost. In address order, each unmarked block not yet claimed heads a
//!    clique: it is **definitely lost**, and every unclaimed block it reaches (through any
//!    pointer, transitively) is **indirectly lost**. A clique that reaches an earlier clique's
//!    head takes it over (it becomes indirect), so a chain built in any order has exactly one
//!    definitely-lost head, and a cycle with no way in has one definite block and the rest
//!    indirect.
//!
//! An interior pointer that one of memcheck's four heuristics accepts counts as a start pointer
//! (`Heuristic`): valgrind's default, `--leak-check-heuristics=all`. The blocks so reached are
//! still reachable, and reports say how many each heuristic reached.
//!
//! The exit report and the launcher (over a core or a running process) both classify with this
//! code, and both agree with valgrind on the same program.

use crate::blocks::{each_spanned, Blocks};
use crate::maps::{self, Mapping};
use crate::prescan::Prescan;

/// The class of one block, in valgrind's words.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash, PartialOrd, Ord)]
pub enum Class {
    DefinitelyLost,
    IndirectlyLost,
    PossiblyLost,
    StillReachable,
}

impl Class {
    /// Every class, in the order reports list them.
    pub const ALL: [Class; 4] = [
        Class::DefinitelyLost,
        Class::IndirectlyLost,
        Class::PossiblyLost,
        Class::StillReachable,
    ];

    /// The name valgrind prints.
    pub fn name(self) -> &'static str {
        match self {
            Class::DefinitelyLost => "definitely lost",
            Class::IndirectlyLost => "indirectly lost",
            Class::PossiblyLost => "possibly lost",
            Class::StillReachable => "still reachable",
        }
    }

    /// The word that picks it in a list of classes (`leak-show`, `--show`), as valgrind's
    /// `--show-leak-kinds` spells it.
    pub fn word(self) -> &'static str {
        match self {
            Class::DefinitelyLost => "definite",
            Class::IndirectlyLost => "indirect",
            Class::PossiblyLost => "possible",
            Class::StillReachable => "reachable",
        }
    }

    /// The words a list of classes takes, for the launcher's messages that list them.
    pub const WORDS: &'static str = "definite, indirect, possible, reachable or all";

    /// The bit for this class in a `leak-show` set.
    pub const fn bit(self) -> u8 {
        1 << self as u8
    }

    /// Every class's bit.
    pub const ALL_BITS: u8 = 0b1111;

    /// A set of classes from words separated by commas (or by `+`, as DMEM_OPTS separates its
    /// options with commas), `all` for every class; empty words are skipped. The error names the
    /// word that is not a class, or is empty when no word names one. It allocates nothing: the
    /// library parses its options with it before it has a heap.
    pub fn parse_set(text: &str) -> Result<u8, &str> {
        let mut set = 0;
        for word in text.split([',', '+']).filter(|w| !w.is_empty()) {
            set |= match Class::ALL.iter().find(|c| c.word() == word) {
                Some(c) => c.bit(),
                None if word == "all" => Class::ALL_BITS,
                None => return Err(word),
            };
        }
        if set == 0 {
            return Err("");
        }
        Ok(set)
    }

    /// The classes of a set, in the order reports list them (the launcher's `--show`).
    pub fn in_set(set: u8) -> impl Iterator<Item = Class> {
        Class::ALL.into_iter().filter(move |c| set & c.bit() != 0)
    }

    /// Whether the class counts as a leak (for `leak-exitcode`): all but still reachable.
    pub fn is_leak(self) -> bool {
        self != Class::StillReachable
    }
}

/// memcheck's heuristics (mc_leakcheck.c, `heuristic_reachedness`): interior pointers that real
/// programs keep to the blocks they own, accepted as reaching the block's start.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Heuristic {
    /// libstdc++'s old reference-counted string: length, capacity and count words, then the
    /// characters, which the pointer points to.
    StdString,
    /// A block whose first 8 bytes hold the size of the rest, handed out past them (sqlite's
    /// allocator).
    Length64,
    /// `new T[n]` for a T with a destructor: n first, the pointer past it.
    NewArray,
    /// A pointer to a second base of an object: the word it points to and the block's first word
    /// both point into vtables.
    MultipleInheritance,
}

impl Heuristic {
    /// In valgrind's order, the one it tries them in and prints them in.
    pub const ALL: [Heuristic; 4] = [
        Heuristic::StdString,
        Heuristic::Length64,
        Heuristic::NewArray,
        Heuristic::MultipleInheritance,
    ];

    /// valgrind's name for it.
    pub fn name(self) -> &'static str {
        match self {
            Heuristic::StdString => "stdstring",
            Heuristic::Length64 => "length64",
            Heuristic::NewArray => "newarray",
            Heuristic::MultipleInheritance => "multipleinheritance",
        }
    }

    pub const fn bit(self) -> u8 {
        1 << self as u8
    }

    /// The set every side uses unless told otherwise: all four, as valgrind's default.
    pub const DEFAULT: u8 = 0b1111;

    /// The words a list of heuristics takes, for the launcher's messages that list them.
    pub const WORDS: &'static str = "stdstring, length64, newarray, multipleinheritance, all or none";

    /// A set from valgrind's spelling: `all`, `none`, or names separated by commas (or by `+`,
    /// as DMEM_OPTS separates its options with commas). The error names the word that is not
    /// one of them.
    pub fn parse_set(text: &str) -> Result<u8, &str> {
        match text {
            "all" => return Ok(Heuristic::DEFAULT),
            "none" => return Ok(0),
            _ => {}
        }
        let mut set = 0;
        for word in text.split([',', '+']) {
            match Heuristic::ALL.iter().find(|h| h.name() == word) {
                Some(h) => set |= h.bit(),
                None => return Err(word),
            }
        }
        Ok(set)
    }

    fn from_index(i: u8) -> Option<Heuristic> {
        Heuristic::ALL.get(i.checked_sub(1)? as usize).copied()
    }
}

/// What a classification reads besides the words it scans: single words of blocks, for the
/// heuristics, and whether an address lies in a C++ vtable.
pub trait Source {
    /// Calls `emit` with the aligned words stored in `[start, end)`, in runs as long as it can
    /// read at once (one call per run rather than per word keeps the scan at memory speed).
    fn scan(&mut self, start: usize, end: usize, emit: &mut dyn FnMut(&[usize]));

    /// The word at `addr` (8-byte aligned), if readable.
    fn word(&mut self, addr: usize) -> Option<usize>;

    /// Whether `addr` looks like a vtable's address, for the multipleinheritance heuristic
    /// (see `is_vtable`); a source that cannot tell says no.
    fn is_vtable(&mut self, _addr: usize) -> bool {
        false
    }

    /// A hint that `[start, end)` is scanned soon, so a source whose bytes are in memory can
    /// ask for them ahead: the mark scans blocks in the order of its worklist, not as one
    /// stream the processor's own prefetching follows, and would otherwise wait for every line
    /// of every block. A source that cannot do so ignores it.
    fn prefetch(&mut self, _start: usize, _end: usize) {}
}

/// Words memcheck looks at from a candidate vtable address for two function pointers.
const VTABLE_MAX_CHECK: usize = 20;

/// memcheck's test of a vtable address: `addr` lies in a readable file-backed mapping, and of
/// the words from it (at most VTABLE_MAX_CHECK, and not past its mapping), the non-null ones
/// point into executable file-backed mappings, at least two of them before any that does not.
/// `maps` are sorted by address.
pub fn is_vtable(maps: &[Mapping], addr: usize, word: &mut dyn FnMut(usize) -> Option<usize>) -> bool {
    let find = |a: usize| maps::find(maps, a);
    let Some(m) = find(addr).filter(|m| m.file && m.readable) else {
        return false;
    };
    let last = (addr + VTABLE_MAX_CHECK * 8).min(m.end - 8);
    let mut functions = 0;
    let mut at = addr;
    while at <= last {
        let Some(f) = word(at) else {
            return false;
        };
        at += 8;
        if f == 0 {
            continue;
        }
        if !find(f).is_some_and(|m| m.file && m.executable) {
            return false;
        }
        functions += 1;
        if functions == 2 {
            return true;
        }
    }
    false
}

/// Which of the heuristics in `set` accepts `ptr`, an interior pointer into block `[start,
/// end)`, as memcheck decides it.
fn heuristic_for<S: Source>(set: u8, ptr: usize, start: usize, end: usize, src: &mut S) -> Option<Heuristic> {
    const W: usize = 8;
    let size = end - start;
    let on = |h: Heuristic| set & h.bit() != 0;
    if on(Heuristic::StdString) && ptr == start + 3 * W {
        if let Some(capacity) = src.word(start + W) {
            if 3 * W + capacity.wrapping_add(1) == size && src.word(start).is_some_and(|len| len <= capacity)
            {
                return Some(Heuristic::StdString);
            }
        }
    }
    if on(Heuristic::Length64) && ptr == start + W {
        if let Some(n) = src.word(start) {
            if n > 0 && size - W == n {
                return Some(Heuristic::Length64);
            }
        }
    }
    if on(Heuristic::NewArray) && ptr == start + W {
        if let Some(n) = src.word(start) {
            if n > 0 && (size - W).is_multiple_of(n) {
                return Some(Heuristic::NewArray);
            }
        }
    }
    if on(Heuristic::MultipleInheritance) && ptr.is_multiple_of(W) && ptr + W <= end {
        let plausible = |a: usize| a.is_multiple_of(W) && a >= 4096;
        if let (Some(inner), Some(first)) = (src.word(ptr), src.word(start)) {
            if plausible(inner) && plausible(first) && src.is_vtable(inner) && src.is_vtable(first) {
                return Some(Heuristic::MultipleInheritance);
            }
        }
    }
    None
}

const UNSEEN: u8 = 0;
const REACHABLE: u8 = 1;
const POSSIBLE: u8 = 2;
const DEFINITE: u8 = 3;
const INDIRECT: u8 = 4;

/// The working state of one classification, allocated up front: the exit report makes it before
/// it stops the other threads, and `classify` then allocates nothing.
pub struct Marker {
    state: Vec<u8>,
    /// For each block, 1 + the index in `Heuristic::ALL` of the heuristic that last accepted an
    /// interior pointer to it, or 0: memcheck's `heuristic` field, kept by its rules.
    heuristic: Vec<u8>,
    /// For an indirectly lost block, the head of the clique that took it (perhaps a head that
    /// a later clique took in turn): memcheck adds its bytes to that head's loss record.
    head: Vec<usize>,
    work: Vec<usize>,
    /// The words of the run of memory being marked from, copied out of the source: one buffer
    /// for the whole mark, where one made for each block scanned was zeroed each time (2 KiB
    /// of stores a block).
    words: [usize; 256],
    /// Blocks' words read ahead (`Prescan`), which the mark takes instead of reading them.
    pre: Prescan,
}

impl Marker {
    /// Room for `n` blocks. A block enters the worklist at most twice in the mark (once possibly
    /// lost, once reachable) and once in the clique pass, so 2n entries never grow it.
    pub fn new(n: usize) -> Marker {
        Marker {
            state: Vec::with_capacity(n),
            heuristic: Vec::with_capacity(n),
            head: Vec::with_capacity(n),
            work: Vec::with_capacity(2 * n + 1),
            words: [0; 256],
            pre: Prescan::default(),
        }
    }

    /// The mark takes each block's words from `pre` where it holds them.
    pub fn read_ahead(&mut self, pre: Prescan) {
        self.pre = pre;
    }

    /// Classifies every block; `class()` then reads the result. Memory is read through `src`,
    /// so the same rules serve in-process and over a core. `values` are roots that are not in
    /// memory (a core's registers). `heuristics` is a set of `Heuristic` bits.
    pub fn classify<S: Source>(
        &mut self,
        blocks: &Blocks,
        roots: &[(usize, usize)],
        values: &[usize],
        heuristics: u8,
        src: &mut S,
    ) {
        let state = &mut self.state;
        let heur = &mut self.heuristic;
        let heads = &mut self.head;
        let work = &mut self.work;
        let words = &mut self.words;
        let pre = &self.pre;
        heads.clear();
        heads.resize(blocks.len(), usize::MAX);
        state.clear();
        state.resize(blocks.len(), UNSEEN);
        heur.clear();
        heur.resize(blocks.len(), 0);
        work.clear();

        // A word `w` found in memory whose owner is a root or a reachable block (`sure`), or a
        // possibly-lost block: memcheck's lc_push_without_clique_if_a_chunk_ptr.
        let mark = |w: usize,
                    sure: bool,
                    state: &mut Vec<u8>,
                    heur: &mut Vec<u8>,
                    work: &mut Vec<usize>,
                    src: &mut S| {
            let Some(j) = blocks.find(w) else { return };
            let (start, end) = blocks.range(j);
            if state[j] == REACHABLE {
                // Reached through its start after a heuristic: it no longer counts as reached
                // by the heuristic.
                if w == start {
                    heur[j] = 0;
                }
                return;
            }
            let via_start = if w == start {
                true
            } else if heuristics != 0 {
                let h = heuristic_for(heuristics, w, start, end, src);
                heur[j] = h.map_or(0, |h| h as u8 + 1);
                h.is_some()
            } else {
                false
            };
            if via_start && sure {
                state[j] = REACHABLE;
                work.push(j);
            } else if state[j] == UNSEEN {
                state[j] = POSSIBLE;
                work.push(j);
            }
        };
        for &(s, e) in roots {
            let mut run = |ws: &[usize], src: &mut S| {
                each_spanned(blocks, ws, |w| mark(w, true, state, heur, work, src));
            };
            scan_with(src, s, e, words, &mut run);
        }
        for &w in values {
            mark(w, true, state, heur, work, src);
        }
        while let Some(i) = work.pop() {
            // The block AHEAD entries down the worklist, unless blocks scanned before it push
            // others on top: asked for that far ahead, its lines arrive while the blocks above
            // it are scanned (one block's scan takes less time than a miss).
            if let Some(&ahead) = work.len().checked_sub(AHEAD).and_then(|k| work.get(k)) {
                prefetch(pre, blocks, ahead, src);
            }
            // A block queued as possibly lost and upgraded since is queued again; scanning it
            // with its current class covers both entries.
            let sure = state[i] == REACHABLE;
            let mut run = |ws: &[usize], src: &mut S| {
                each_spanned(blocks, ws, |w| mark(w, sure, state, heur, work, src));
            };
            match pre.words(i) {
                Some(ws) => run(ws, src),
                None => {
                    let (s, e) = blocks.range(i);
                    scan_with(src, s, e, words, &mut run);
                }
            }
        }

        self.cliques(blocks, src);
    }

    /// Memcheck's clique pass over the blocks the mark left unseen, in address order: each
    /// becomes definitely lost, the head of a clique, and the blocks it reaches (earlier heads
    /// among them) indirectly lost under it.
    fn cliques<S: Source>(&mut self, blocks: &Blocks, src: &mut S) {
        let (state, heads, work) = (&mut self.state, &mut self.head, &mut self.work);
        let pre = &self.pre;
        let n = blocks.len();
        // The next AHEAD heads, found ahead so that their words are asked for while this
        // clique is scanned (a block a clique claims on the way is passed over when its turn
        // comes): a ring of the heads asked for, and how far the search for them has come.
        let mut asked = [0usize; AHEAD];
        let (mut first, mut count, mut cursor) = (0, 0, 0);
        for head in 0..n {
            if state[head] != UNSEEN {
                continue;
            }
            while count > 0 && asked[first] <= head {
                first = (first + 1) % AHEAD;
                count -= 1;
            }
            cursor = cursor.max(head + 1);
            while count < AHEAD && cursor < n {
                if state[cursor] == UNSEEN {
                    prefetch(pre, blocks, cursor, src);
                    asked[(first + count) % AHEAD] = cursor;
                    count += 1;
                }
                cursor += 1;
            }
            state[head] = DEFINITE;
            work.push(head);
            while let Some(i) = work.pop() {
                if let Some(&next) = work.last() {
                    prefetch(pre, blocks, next, src);
                }
                let mut claim = |ws: &[usize]| {
                    each_spanned(blocks, ws, |w| {
                        let Some(j) = blocks.find_spanned(w) else { return };
                        match state[j] {
                            UNSEEN => {
                                state[j] = INDIRECT;
                                heads[j] = head;
                                work.push(j);
                            }
                            // An earlier clique's head hangs off this one. Its own clique
                            // already claimed what it reaches, so it need not be scanned again.
                            DEFINITE if j != head => {
                                state[j] = INDIRECT;
                                heads[j] = head;
                            }
                            _ => {}
                        }
                    });
                };
                match pre.words(i) {
                    Some(ws) => claim(ws),
                    None => {
                        let (s, e) = blocks.range(i);
                        src.scan(s, e, &mut claim);
                    }
                }
            }
        }
    }

    /// The heuristic that made block `i` still reachable, if one did.
    pub fn heuristic(&self, i: usize) -> Option<Heuristic> {
        if self.state[i] != REACHABLE {
            return None;
        }
        Heuristic::from_index(self.heuristic[i])
    }

    /// Every indirectly lost block with its `head`, as (block, head), in block order: what
    /// `records::Marks` reads.
    pub fn heads(&self) -> Vec<(usize, usize)> {
        (0..self.state.len())
            .filter_map(|i| self.head(i).map(|h| (i, h)))
            .collect()
    }

    /// For an indirectly lost block, the definitely lost block whose loss record valgrind
    /// counts it in (`161 (48 direct, 113 indirect) bytes`).
    fn head(&self, i: usize) -> Option<usize> {
        let mut h = *self.head.get(i)?;
        // Heads taken by a later clique pass their blocks on; each step goes to a later clique.
        while h != usize::MAX && self.state[h] == INDIRECT {
            h = self.head[h];
        }
        (h != usize::MAX).then_some(h)
    }

    /// The class of block `i` after `classify`.
    pub fn class(&self, i: usize) -> Class {
        match self.state[i] {
            REACHABLE => Class::StillReachable,
            POSSIBLE => Class::PossiblyLost,
            DEFINITE => Class::DefinitelyLost,
            _ => Class::IndirectlyLost,
        }
    }
}

/// How many blocks ahead of the one it scans the mark asks its source for.
const AHEAD: usize = 4;

/// Asks `src` for block `i`'s memory ahead of its scan, unless its words were read ahead.
fn prefetch<S: Source>(pre: &Prescan, blocks: &Blocks, i: usize, src: &mut S) {
    if pre.words(i).is_none() {
        let (s, e) = blocks.range(i);
        src.prefetch(s, e);
    }
}

/// Scans `[start, end)` of `src` with `run`, which also gets `src` back for the heuristics'
/// reads: the words of a run are copied out first, into `buf`, so `src` is free again while they
/// are marked.
fn scan_with<S: Source>(
    src: &mut S,
    start: usize,
    end: usize,
    buf: &mut [usize; 256],
    run: &mut dyn FnMut(&[usize], &mut S),
) {
    let mut at = (start + 7) & !7;
    while at + 8 <= end {
        let stop = end.min(at + 8 * buf.len());
        let mut n = 0;
        src.scan(at, stop, &mut |ws| {
            buf[n..n + ws.len()].copy_from_slice(ws);
            n += ws.len();
        });
        run(&buf[..n], src);
        at = stop;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// Builds `n` 16-byte blocks at 0x1000 + 0x100*i; `links` are (from, to, offset-into-to),
    /// stored in consecutive words of `from`; `root_to` are (block, offset) pointers in a root.
    fn world(n: usize, links: &[(usize, usize, usize)], root_to: &[(usize, usize)]) -> Vec<Class> {
        let addr = |i: usize| 0x1000 + 0x100 * i;
        let mut mem = HashMap::new();
        let mut used = vec![0; n];
        for &(from, to, off) in links {
            mem.insert(addr(from) + 8 * used[from], addr(to) + off);
            used[from] += 1;
        }
        for (k, &(to, off)) in root_to.iter().enumerate() {
            mem.insert(0x100 + 8 * k, addr(to) + off);
        }
        let mut blocks = Blocks::with_capacity(n);
        for (i, &words) in used.iter().enumerate() {
            blocks.push(addr(i), addr(i) + 8 * words.max(2));
        }
        let roots = [(0x100, 0x100 + 8 * root_to.len())];
        // Each world classified twice: reading every block as the mark goes, and with the
        // blocks' words read ahead on two threads (`Prescan`), which must change nothing.
        let read = |s: usize, e: usize, emit: &mut dyn FnMut(&[usize])| {
            let ws: Vec<usize> = (s..e)
                .step_by(8)
                .map(|a| mem.get(&a).copied().unwrap_or(0))
                .collect();
            emit(&ws);
            true
        };
        let ahead = Prescan::read(&blocks, 2, 1 << 20, &read);
        let mut answers = Vec::new();
        for pre in [None, Some(ahead)] {
            let mut m = Marker::new(n);
            if let Some(pre) = pre {
                m.read_ahead(pre);
            }
            m.classify(&blocks, &roots, &[], Heuristic::DEFAULT, &mut Words(mem.clone()));
            let classes: Vec<Class> = (0..n).map(|i| m.class(i)).collect();
            answers.push((classes, m.heads()));
        }
        assert_eq!(answers[0], answers[1], "read ahead or not");
        answers.swap_remove(0).0
    }

    /// Memory as a map of the words that are not zero; vtables at 0x9000..0xa000.
    struct Words(HashMap<usize, usize>);

    impl Source for Words {
        fn scan(&mut self, start: usize, end: usize, emit: &mut dyn FnMut(&[usize])) {
            for a in (start..end).step_by(8) {
                emit(&[self.0.get(&a).copied().unwrap_or(0)]);
            }
        }
        fn word(&mut self, addr: usize) -> Option<usize> {
            Some(self.0.get(&addr).copied().unwrap_or(0))
        }
        fn is_vtable(&mut self, addr: usize) -> bool {
            (0x9000..0xa000).contains(&addr)
        }
    }

    /// One block of `size` bytes at 0x1000 holding `words` from its start, and a root word
    /// pointing `offset` bytes into it: its class and the heuristic that reached it, with the
    /// heuristics in `set`.
    fn one(size: usize, words: &[usize], offset: usize, set: u8) -> (Class, Option<Heuristic>) {
        let mut mem = HashMap::new();
        for (k, &w) in words.iter().enumerate() {
            mem.insert(0x1000 + 8 * k, w);
        }
        mem.insert(0x100, 0x1000 + offset);
        let mut blocks = Blocks::with_capacity(1);
        blocks.push(0x1000, 0x1000 + size);
        let mut m = Marker::new(1);
        m.classify(&blocks, &[(0x100, 0x108)], &[], set, &mut Words(mem));
        (m.class(0), m.heuristic(0))
    }

    #[test]
    fn each_heuristic_accepts_its_shape_only() {
        use Class::*;
        use Heuristic::*;
        let all = Heuristic::DEFAULT;
        // stdstring: length 5, capacity 15, count; characters at +24; 24 + 15 + 1 bytes.
        assert_eq!(one(40, &[5, 15, 0], 24, all), (StillReachable, Some(StdString)));
        assert_eq!(
            one(40, &[16, 15, 0], 24, all),
            (PossiblyLost, None),
            "length above capacity"
        );
        assert_eq!(
            one(48, &[5, 15, 0], 24, all),
            (PossiblyLost, None),
            "size does not fit"
        );
        // length64: the rest's size first.
        assert_eq!(one(72, &[64], 8, all), (StillReachable, Some(Length64)));
        // newarray: 3 elements of 8 bytes (which length64 does not take: 24 != 32 - 8 + 8).
        assert_eq!(one(32, &[3], 8, all), (StillReachable, Some(NewArray)));
        assert_eq!(
            one(40, &[3], 8, all),
            (PossiblyLost, None),
            "32 bytes are not 3 elements"
        );
        assert_eq!(one(32, &[0], 8, all), (PossiblyLost, None), "no elements");
        // multipleinheritance: the second base's vtable pointer at +16, the first at +0.
        assert_eq!(
            one(32, &[0x9010, 7, 0x9810, 0], 16, all),
            (StillReachable, Some(MultipleInheritance))
        );
        assert_eq!(one(32, &[0x9010, 7, 0x5000, 0], 16, all), (PossiblyLost, None));
        // Each only when asked for.
        assert_eq!(one(72, &[64], 8, 0), (PossiblyLost, None));
        assert_eq!(
            one(72, &[64], 8, Heuristic::parse_set("stdstring,newarray").unwrap()),
            (StillReachable, Some(NewArray))
        );
        // A start pointer is no heuristic.
        assert_eq!(one(72, &[64], 0, all), (StillReachable, None));
    }

    #[test]
    fn heuristic_sets_parse_as_valgrind_spells_them() {
        assert_eq!(Heuristic::parse_set("all"), Ok(15));
        assert_eq!(Heuristic::parse_set("none"), Ok(0));
        assert_eq!(Heuristic::parse_set("length64,stdstring"), Ok(3));
        assert_eq!(Heuristic::parse_set("length64,bogus"), Err("bogus"));
    }

    /// Blocks per class: definitely, indirectly, possibly lost, still reachable.
    fn counts(c: &[Class]) -> [usize; 4] {
        Class::ALL.map(|k| c.iter().filter(|&&x| x == k).count())
    }

    #[test]
    fn held_list_orphan_list_and_singles() {
        // 0..10 a list held by a root; 10..20 an orphaned list; 20..25 orphans.
        let mut links = vec![];
        for i in (0..9).chain(10..19) {
            links.push((i, i + 1, 0));
        }
        let c = world(25, &links, &[(0, 0)]);
        assert_eq!(counts(&c), [6, 9, 0, 10]);
        assert_eq!(c[10], Class::DefinitelyLost);
    }

    #[test]
    fn interior_pointer_makes_possibly_lost_and_so_does_what_it_holds() {
        // Root -> 0 (interior) -> 1 (start) -> 2 (start); root -> 3 (start) -> 4 (interior).
        let c = world(5, &[(0, 1, 0), (1, 2, 0), (3, 4, 8)], &[(0, 8), (3, 0)]);
        use Class::*;
        assert_eq!(
            c,
            [
                PossiblyLost,
                PossiblyLost,
                PossiblyLost,
                StillReachable,
                PossiblyLost
            ]
        );
    }

    #[test]
    fn possibly_lost_is_upgraded_by_a_later_start_pointer() {
        // The interior pointer comes first in the root; the start pointer to 0 is found later,
        // through block 1, and must also upgrade 2, which 0 holds.
        let c = world(3, &[(1, 0, 0), (0, 2, 0)], &[(0, 8), (1, 0)]);
        assert_eq!(c, [Class::StillReachable; 3]);
    }

    #[test]
    fn list_built_backwards_still_has_one_definite_head() {
        // The head is the highest address: block 0's clique runs first and is taken over.
        let links: Vec<_> = (1..6).map(|i| (i, i - 1, 0)).collect();
        let c = world(6, &links, &[]);
        assert_eq!(counts(&c), [1, 5, 0, 0]);
        assert_eq!(c[5], Class::DefinitelyLost);
    }

    #[test]
    fn orphaned_cycle_keeps_one_definite() {
        let c = world(3, &[(0, 1, 0), (1, 2, 0), (2, 0, 0)], &[]);
        assert_eq!(counts(&c), [1, 2, 0, 0]);
        assert_eq!(c[0], Class::DefinitelyLost);
    }

    #[test]
    fn head_allocated_after_its_cycle_takes_the_cycle_over() {
        // 0 <-> 1 is a cycle; 2 points into it from a higher address.
        let c = world(3, &[(0, 1, 0), (1, 0, 0), (2, 0, 0)], &[]);
        use Class::*;
        assert_eq!(c, [IndirectlyLost, IndirectlyLost, DefinitelyLost]);
    }

    #[test]
    fn claimed_block_stays_with_its_first_clique() {
        // 0 and 2 are heads that both reach 1; 1 stays with 0's clique, and 2 stays definite.
        let c = world(3, &[(0, 1, 0), (2, 1, 0)], &[]);
        use Class::*;
        assert_eq!(c, [DefinitelyLost, IndirectlyLost, DefinitelyLost]);
    }
}
