//! The suppressions of every file, ready to match a stack: each frame's names matched once
//! however many suppressions there are, LeakSanitizer's templates through one Aho-Corasick
//! automaton of their literal pieces, valgrind's locations through the plain function name
//! each needs; and the count of what each suppression took out of the report.

use super::file::{read, shown, Entry, File, Loc, Problem, Rule, LSAN_KINDS};
use super::pattern::glob;
use super::stack::{Frames, Head, Named, Stack};
use crate::allocfn;
use crate::frame::Frame;
use crate::reach::Class;
use aho_corasick::{AhoCorasick, AhoCorasickKind};
use std::collections::HashMap;

/// Where valgrind's allocation functions live in its stacks: an `obj:` line for the
/// allocation function's frame matches this as well as the object that holds it here.
const VALGRIND_PRELOAD: &str = "/usr/libexec/valgrind/vgpreload_memcheck-amd64-linux.so";

/// Which suppression matched: the file's index and the entry's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Hit {
    pub file: usize,
    pub entry: usize,
}

/// How much one suppression took out of the report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Use {
    /// Loss records (one class of one stack), as valgrind counts uses.
    pub count: u64,
    pub blocks: u64,
    pub bytes: u64,
}

/// The suppressions of every file that could be read, ready to match.
pub struct Suppressions {
    pub files: Vec<File>,
    /// Every LSan template, in file order, and the automaton of their keys.
    lsan: Vec<(Hit, usize)>,
    automaton: Option<AhoCorasick>,
    /// For each key of the automaton, the templates (indices into `lsan`) that have it.
    by_key: Vec<Vec<usize>>,
    /// Templates without a literal piece, which any string may match.
    keyless: Vec<usize>,
    /// Each string's first matching template, once worked out.
    lsan_cache: HashMap<String, Option<usize>>,
    /// valgrind suppressions in file order, by a plain function name they need, and those
    /// that need none.
    vg: Vec<Hit>,
    vg_by_name: HashMap<String, Vec<usize>>,
    vg_any: Vec<usize>,
    /// The classes (`Class::bit`s) some valgrind suppression matches.
    vg_kinds: u8,
    uses: HashMap<Hit, Use>,
}

impl Suppressions {
    /// The files at `paths`, and a problem for each that could not be read.
    pub fn load(paths: &[String]) -> (Suppressions, Vec<Problem>) {
        let mut files = Vec::new();
        let mut problems = Vec::new();
        for p in paths {
            match read(p) {
                Ok(f) => files.push(f),
                Err(e) => problems.push(e),
            }
        }
        (Suppressions::new(files), problems)
    }

    pub fn new(files: Vec<File>) -> Suppressions {
        let mut s = Suppressions {
            files,
            lsan: Vec::new(),
            automaton: None,
            by_key: Vec::new(),
            keyless: Vec::new(),
            lsan_cache: HashMap::new(),
            vg: Vec::new(),
            vg_by_name: HashMap::new(),
            vg_any: Vec::new(),
            vg_kinds: 0,
            uses: HashMap::new(),
        };
        let mut keys: Vec<String> = Vec::new();
        let mut key_index: HashMap<String, usize> = HashMap::new();
        for (fi, f) in s.files.iter().enumerate() {
            for (ei, e) in f.entries.iter().enumerate() {
                let hit = Hit { file: fi, entry: ei };
                match &e.rule {
                    Rule::Lsan(t) => {
                        let id = s.lsan.len();
                        s.lsan.push((hit, id));
                        match t.key() {
                            Some(k) => {
                                let ki = *key_index.entry(k.to_owned()).or_insert_with(|| {
                                    keys.push(k.to_owned());
                                    s.by_key.push(Vec::new());
                                    keys.len() - 1
                                });
                                s.by_key[ki].push(id);
                            }
                            None => s.keyless.push(id),
                        }
                    }
                    Rule::Valgrind { kinds, locs } => {
                        let id = s.vg.len();
                        s.vg.push(hit);
                        s.vg_kinds |= kinds;
                        // A name with template arguments may match a frame whose arguments
                        // are spelled otherwise (`template_base`): not one to require.
                        let need = locs.iter().find_map(|l| match l {
                            Loc::Fun(g) if g.is_plain() && !g.0.contains('<') && !is_alloc_name(&g.0) => {
                                Some(g.0.clone())
                            }
                            _ => None,
                        });
                        match need {
                            Some(name) => s.vg_by_name.entry(name).or_default().push(id),
                            None => s.vg_any.push(id),
                        }
                    }
                }
            }
        }
        if !keys.is_empty() {
            // A contiguous NFA, never a DFA: building a DFA of one long key (a 1 MiB pattern)
            // takes minutes and gigabytes; an NFA's size and time are linear in the keys.
            s.automaton = AhoCorasick::builder()
                .kind(Some(AhoCorasickKind::ContiguousNFA))
                .build(&keys)
                .ok();
            if s.automaton.is_none() {
                // Too large to build: every template is tried on every string instead.
                s.keyless.extend(s.by_key.drain(..).flatten());
                s.keyless.sort_unstable();
            }
        }
        s
    }

    /// Whether any suppression was read.
    pub fn is_empty(&self) -> bool {
        self.lsan.is_empty() && self.vg.is_empty()
    }

    pub fn entry(&self, hit: Hit) -> &Entry {
        &self.files[hit.file].entries[hit.entry]
    }

    /// Whether any suppression can match a loss record of `class`: LeakSanitizer's match the
    /// lost classes, valgrind's those their `match-leak-kinds` name.
    pub fn applies_to(&self, class: Class) -> bool {
        self.lsan_applies_to(class) || self.vg_kinds & class.bit() != 0
    }

    fn lsan_applies_to(&self, class: Class) -> bool {
        !self.lsan.is_empty() && LSAN_KINDS & class.bit() != 0
    }

    /// The first suppression, in file order, that matches a loss record of `class` with this
    /// stack. The launcher's way in (it names a stack whole); the exit report's is
    /// `find_lazily`.
    pub fn find(&mut self, stack: &Stack, class: Class) -> Option<Hit> {
        self.find_lazily(Head::of(stack), &mut Named::new(stack.frames), class)
    }

    /// `find`, asking `frames` for names only as far as the answer needs them: nothing when no
    /// suppression applies to the class, the allocation function alone when every valgrind
    /// suppression that could apply fails on it, and each return address's frames in turn
    /// until a match.
    pub fn find_lazily<F: Frames>(&mut self, head: Head, frames: &mut F, class: Class) -> Option<Hit> {
        if !self.applies_to(class) {
            return None;
        }
        let lsan = if self.lsan_applies_to(class) {
            self.find_lsan(head, frames)
        } else {
            None
        };
        // Only a valgrind suppression before LeakSanitizer's match in file order can change the
        // answer.
        self.find_valgrind(head, frames, class, lsan).or(lsan)
    }

    /// Counts a use of `hit` for a loss record of `blocks` blocks and `bytes` bytes.
    pub fn record(&mut self, hit: Hit, blocks: u64, bytes: u64) {
        let u = self.uses.entry(hit).or_default();
        u.count += 1;
        u.blocks += blocks;
        u.bytes += bytes;
    }

    /// Every suppression used, most used first, as valgrind lists them.
    pub fn used(&self) -> Vec<(Hit, Use)> {
        let mut v: Vec<(Hit, Use)> = self.uses.iter().map(|(&h, &u)| (h, u)).collect();
        v.sort_by(|a, b| (b.1.count, a.0).cmp(&(a.1.count, b.0)));
        v
    }

    /// valgrind's `-v` line for a used suppression, less its `--PID--` prefix.
    pub fn used_line(&self, hit: Hit, u: Use) -> String {
        let e = self.entry(hit);
        format!(
            "used_suppression: {:6} {} {}:{} suppressed: {} bytes in {} blocks",
            u.count,
            shown(&e.name),
            shown(&self.files[hit.file].path),
            e.line,
            u.bytes,
            u.blocks
        )
    }

    fn find_lsan<F: Frames>(&mut self, head: Head, frames: &mut F) -> Option<Hit> {
        if self.lsan.is_empty() {
            return None;
        }
        // LSan's order: frame by frame from the innermost, the module first, then each
        // function of the frame (inlined ones first) and its file. A return address's frames
        // are named only when its module did not match.
        for names in head.alloc.frames() {
            if let Some(t) = head
                .alloc_object
                .and_then(|o| self.lsan_string(&o.to_string_lossy()))
            {
                return Some(self.lsan[t].0);
            }
            for n in names {
                if let Some(t) = self.lsan_string(allocfn::demangled(n)) {
                    return Some(self.lsan[t].0);
                }
            }
        }
        for i in 0..frames.len() {
            if let Some(t) = frames
                .object(i)
                .and_then(|o| self.lsan_string(&o.to_string_lossy()))
            {
                return Some(self.lsan[t].0);
            }
            let found = frames.frames(i).iter().find_map(|f| {
                [f.function.as_deref(), f.file.as_deref()]
                    .into_iter()
                    .flatten()
                    .find_map(|s| self.lsan_string(s))
            });
            if let Some(t) = found {
                return Some(self.lsan[t].0);
            }
        }
        None
    }

    /// The first template (by index) that matches `s`.
    fn lsan_string(&mut self, s: &str) -> Option<usize> {
        if let Some(&r) = self.lsan_cache.get(s) {
            return r;
        }
        let mut candidates: Vec<usize> = self.keyless.clone();
        if let Some(ac) = &self.automaton {
            for m in ac.find_overlapping_iter(s) {
                candidates.extend_from_slice(&self.by_key[m.pattern().as_usize()]);
            }
        }
        candidates.sort_unstable();
        candidates.dedup();
        let r = candidates.into_iter().find(|&t| {
            let hit = self.lsan[t].0;
            match &self.entry(hit).rule {
                Rule::Lsan(tpl) => tpl.matches(s),
                Rule::Valgrind { .. } => false,
            }
        });
        self.lsan_cache.insert(s.to_owned(), r);
        r
    }

    /// The first valgrind suppression (in file order, before `before`) that matches. Each is
    /// tried on the frames named so far, naming more as its locations reach them; once every
    /// frame is named, only those that need no plain function name, or one the stack has, are
    /// tried.
    fn find_valgrind<F: Frames>(
        &self,
        head: Head,
        frames: &mut F,
        class: Class,
        before: Option<Hit>,
    ) -> Option<Hit> {
        let locs_of = |id: usize| -> Option<&[Loc]> {
            let hit = self.vg[id];
            if before.is_some_and(|b| hit >= b) {
                return None;
            }
            match &self.entry(hit).rule {
                Rule::Valgrind { kinds, locs } if kinds & class.bit() != 0 => Some(locs),
                _ => None,
            }
        };
        let mut input = Input::new(head, frames);
        for id in 0..self.vg.len() {
            if input.complete() {
                let mut candidates: Vec<usize> = self.vg_any.iter().copied().filter(|&c| c >= id).collect();
                for name in input.names() {
                    if let Some(ids) = self.vg_by_name.get(name) {
                        candidates.extend(ids.iter().copied().filter(|&c| c >= id));
                    }
                }
                candidates.sort_unstable();
                candidates.dedup();
                return candidates
                    .into_iter()
                    .find(|&c| locs_of(c).is_some_and(|locs| input.matches(locs)))
                    .map(|c| self.vg[c]);
            }
            if locs_of(id).is_some_and(|locs| input.matches(locs)) {
                return Some(self.vg[id]);
            }
        }
        None
    }
}

fn is_alloc_name(name: &str) -> bool {
    allocfn::UNKNOWN.frames()[0].contains(&name)
}

/// The sequence valgrind matches a suppression's locations against: the allocation function's
/// frames (any of their names), then the stack's frames, named from its return addresses only
/// as far as a location reaches.
struct Input<'f, F: Frames> {
    alloc: Vec<&'static [&'static str]>,
    alloc_object: Option<String>,
    src: &'f mut F,
    /// Each frame named so far: its return address and its place among that one's frames.
    named: Vec<(usize, usize)>,
    /// Each named frame's names as `fun:` lines see them (`Frame::valgrind_names`), looked up
    /// once however many suppressions are tried.
    names: Vec<Vec<String>>,
    /// How many return addresses are named.
    upto: usize,
    /// The stack was recorded whole, not cut by the number of slots.
    whole: bool,
}

impl<'f, F: Frames> Input<'f, F> {
    fn new(head: Head, src: &'f mut F) -> Input<'f, F> {
        Input {
            alloc: head.alloc.frames(),
            alloc_object: head.alloc_object.map(|p| p.to_string_lossy().into_owned()),
            src,
            named: Vec::new(),
            names: Vec::new(),
            upto: 0,
            whole: !head.truncated,
        }
    }

    /// Every return address is named.
    fn complete(&self) -> bool {
        self.upto == self.src.len()
    }

    /// Whether element `k` exists, naming return addresses until it does or none is left.
    fn exists(&mut self, k: usize) -> bool {
        let Some(k) = k.checked_sub(self.alloc.len()) else {
            return true;
        };
        while self.named.len() <= k && self.upto < self.src.len() {
            let i = self.upto;
            let frames = self.src.frames(i);
            let n = frames.len();
            self.names.extend(frames.iter().map(Frame::valgrind_names));
            self.named.extend((0..n).map(|j| (i, j)));
            self.upto += 1;
        }
        k < self.named.len()
    }

    /// Every name of every frame as `fun:` lines see them, once every frame is named.
    fn names(&self) -> impl Iterator<Item = &String> {
        self.names.iter().flatten()
    }

    /// valgrind's `generic_match` with a prefix match: every location consumed, frames may be
    /// left; `...` takes any number of frames. A location past the last recorded frame matches
    /// nothing, as in valgrind, where a suppression longer than the stack it recorded does not
    /// match: so a `...` cannot reach past the recorded frames to match any stack.
    ///
    /// The runs of locations between `...`s are placed leftmost in turn, which leaves the most
    /// frames for the runs after them: time bounded by locations times frames, however many
    /// `...` there are.
    fn matches(&mut self, locs: &[Loc]) -> bool {
        // valgrind's unwinder goes on past the program's entry point into whatever words lie
        // above it on the stack, and its generated suppressions write those frames as `obj:*`;
        // a recorded stack ends at the entry point. So past the end of a stack that was not
        // cut, trailing locations that match any frame match no frame as well.
        let locs = if self.whole {
            let wild = locs.iter().rev().take_while(|l| l.is_wild()).count();
            &locs[..locs.len() - wild]
        } else {
            locs
        };
        let mut at = 0;
        for (i, run) in locs.split(|l| matches!(l, Loc::Any)).enumerate() {
            if run.is_empty() {
                continue;
            }
            // Only the first run is tied to the allocation function's frame.
            let anchored = i == 0;
            let mut k = at;
            loop {
                if !self.exists(k + run.len() - 1) {
                    return false;
                }
                if run.iter().enumerate().all(|(j, l)| self.loc_matches(l, k + j)) {
                    break;
                }
                if anchored {
                    return false;
                }
                k += 1;
            }
            at = k + run.len();
        }
        true
    }

    /// Whether `loc` matches element `k`, which exists.
    fn loc_matches(&mut self, loc: &Loc, k: usize) -> bool {
        if let Some(names) = self.alloc.get(k) {
            return match loc {
                Loc::Any => true,
                Loc::Fun(g) => names.iter().any(|n| g.matches(n)),
                Loc::Obj(g) => {
                    g.matches(VALGRIND_PRELOAD) || self.alloc_object.as_deref().is_some_and(|o| g.matches(o))
                }
                Loc::Src(..) => false,
            };
        }
        let (i, j) = self.named[k - self.alloc.len()];
        let names = &self.names[k - self.alloc.len()];
        let f = &self.src.frames(i)[j];
        match loc {
            Loc::Any => true,
            Loc::Fun(g) => match template_base(f, &g.0) {
                Some((ours, theirs)) => glob(theirs.as_bytes(), ours.as_bytes()),
                // Any of the names the function's address has: valgrind's, which its
                // suppressions name, and the one the symboliser gave.
                None => names.iter().any(|n| g.matches(n)),
            },
            Loc::Obj(g) => match &f.object {
                Some(o) => g.matches(&o.to_string_lossy()),
                None => g.matches("???"),
            },
            Loc::Src(g, line) => match f.file_parts() {
                Some((_, file)) => g.matches(file) && line.is_none_or(|l| f.line == Some(l)),
                None => false,
            },
        }
    }
}

/// For an inlined template function, its name and the pattern's up to their template
/// arguments: valgrind names it by its DWARF name, in which GCC spells the arguments its own way
/// (`pair<const std::string&, 0>`), while here the name comes from demangling the linkage name
/// (`pair<std::string const&, 0ul>`); so the arguments are not compared.
fn template_base<'f, 'p>(f: &'f Frame, pattern: &'p str) -> Option<(&'f str, &'p str)> {
    if !f.inlined {
        return None;
    }
    let name = f.symbol.as_deref()?;
    let (ours, _) = name.split_once('<')?;
    let (theirs, _) = pattern.split_once('<')?;
    Some((ours, theirs))
}
