//! Suppression files, as LeakSanitizer and valgrind's memcheck read them, matched against a
//! block's stack; and valgrind's suppression for a stack, as `--gen-suppressions` writes it.
//! The exit report and the launcher both read, match and write them here.
//!
//! A file's format is told by its first line that is neither blank nor a comment: `{` opens
//! valgrind's blocks, anything else is LeakSanitizer's `TYPE:PATTERN` lines.
//!
//! - LeakSanitizer: a `leak:PATTERN` suppresses a block when PATTERN matches, for any frame of
//!   its stack, the module's path, the demangled function name or the source file's path, as
//!   LSan's `TemplateMatch`: a substring match, `*` for any run of characters, `^` and `$`
//!   anchoring it at the start or end. It suppresses what LSan would report, a lost block
//!   (definitely, indirectly or possibly), never a still-reachable one, which LSan never counts
//!   as a leak. Other types (`race:`, `interceptor_via_fun:`) are skipped.
//! - valgrind: `{ NAME  Memcheck:Leak  [match-leak-kinds: KINDS]  LOCATIONS }`, locations
//!   `fun:GLOB` (a function's symbol, mangled, as valgrind matches it; inlined functions by
//!   their DWARF name), `obj:GLOB` (the object's path), `src:FILE[:LINE]` and `...` (any number
//!   of frames); globs have `*` and `?`. They match a prefix of the stack from the allocation
//!   function (`fun:malloc`) down, as memcheck matches, and valgrind's default `--num-callers`
//!   of 12 bounds the locations it reads. Other kinds (`Memcheck:Cond`, `Helgrind:Race`) are
//!   skipped.
//!
//! Each frame's names are matched once however many suppressions there are: LeakSanitizer's
//! patterns through one Aho-Corasick automaton of their literal pieces, valgrind's through the
//! one plain function name each needs. And a stack's return addresses are named only as far as
//! matching reads them (`Frames`): naming the first address in an object reads that object's
//! debug info whole, which costs more than all the matching.

use crate::allocfn::{self, Alloc};
use crate::frame::Frame;
use crate::reach::Class;
use aho_corasick::{AhoCorasick, AhoCorasickKind};
use std::collections::HashMap;
use std::fmt;
use std::path::Path;

/// Where valgrind's allocation functions live in its stacks: an `obj:` line for the
/// allocation function's frame matches this as well as the object that holds it here.
const VALGRIND_PRELOAD: &str = "/usr/libexec/valgrind/vgpreload_memcheck-amd64-linux.so";

/// valgrind's default `--num-callers`: locations past it are not read.
const NUM_CALLERS: usize = 12;

/// A block's stack as suppressions see it.
pub struct Stack<'a> {
    /// The allocation function the program called.
    pub alloc: Alloc,
    /// The object that holds the allocation function here (libdmem.so).
    pub alloc_object: Option<&'a Path>,
    /// The recorded frames, symbolised, inlined ones expanded, innermost first.
    pub frames: &'a [Frame],
    /// The recorded stack filled every slot, so it may have been cut. Matching does not use
    /// it: as in valgrind, a suppression that needs frames past those recorded does not match.
    pub truncated: bool,
}

/// A recorded stack made ready for suppressions and valgrind's XML, owned: what each side
/// builds once per stack.
pub struct Recorded {
    pub frames: Vec<Frame>,
    pub alloc: Alloc,
    /// The allocation function's address, 0 when the call was not read.
    pub alloc_ip: u64,
    pub alloc_object: Option<std::rc::Rc<Path>>,
    pub truncated: bool,
}

impl Recorded {
    pub fn stack(&self) -> Stack<'_> {
        Stack {
            alloc: self.alloc,
            alloc_object: self.alloc_object.as_deref(),
            frames: &self.frames,
            truncated: self.truncated,
        }
    }
}

/// What suppressions know of a stack before any of its return addresses is named: the
/// allocation function, where it lives, and whether the stack may have been cut.
#[derive(Clone, Copy)]
pub struct Head<'a> {
    pub alloc: Alloc,
    pub alloc_object: Option<&'a Path>,
    pub truncated: bool,
}

impl<'a> Head<'a> {
    pub fn of(stack: &Stack<'a>) -> Head<'a> {
        Head {
            alloc: stack.alloc,
            alloc_object: stack.alloc_object,
            truncated: stack.truncated,
        }
    }
}

/// A stack's return addresses, innermost first, named only when matching asks: an object's
/// path costs a lookup in the table of loaded objects, while a return address's frames may need
/// that object's debug info read (and decompressed) whole. Matching asks for as little as the
/// answer needs.
pub trait Frames {
    /// How many return addresses the stack has.
    fn len(&self) -> usize;
    /// Whether the stack has no return address.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The object return address `i` is in: the `object` of each of its frames.
    fn object(&mut self, i: usize) -> Option<&Path>;
    /// The frames of return address `i`: the inlined functions innermost first, then the
    /// function they were inlined into.
    fn frames(&mut self, i: usize) -> &[Frame];
}

/// A stack named already (the launcher's, or one the report lists), cut into its return
/// addresses: each one's frames end with the one that was not inlined.
pub struct Named<'a> {
    frames: &'a [Frame],
    ends: Vec<usize>,
}

impl<'a> Named<'a> {
    pub fn new(frames: &'a [Frame]) -> Named<'a> {
        let mut ends: Vec<usize> = (0..frames.len())
            .filter(|&i| !frames[i].inlined)
            .map(|i| i + 1)
            .collect();
        if ends.last().copied().unwrap_or(0) < frames.len() {
            ends.push(frames.len());
        }
        Named { frames, ends }
    }

    fn range(&self, i: usize) -> std::ops::Range<usize> {
        (if i == 0 { 0 } else { self.ends[i - 1] })..self.ends[i]
    }
}

impl Frames for Named<'_> {
    fn len(&self) -> usize {
        self.ends.len()
    }

    fn object(&mut self, i: usize) -> Option<&Path> {
        self.frames[self.range(i).start].object.as_deref()
    }

    fn frames(&mut self, i: usize) -> &[Frame] {
        &self.frames[self.range(i)]
    }
}

/// A file that could not be used, or the line of it that could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    pub path: String,
    /// 0 for the file as a whole (missing, unreadable).
    pub line: usize,
    pub what: String,
}

/// Text from a command line or a file, as messages echo it: control characters made visible.
fn shown(s: &str) -> String {
    let mut out = Vec::new();
    crate::escape::escape(s.as_bytes(), &mut |piece| out.extend_from_slice(piece));
    String::from_utf8_lossy(&out).into_owned()
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let (path, what) = (shown(&self.path), shown(&self.what));
        match self.line {
            0 => write!(f, "suppressions file {path}: {what}"),
            n => write!(f, "suppressions file {path}, line {n}: {what}"),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    LeakSanitizer,
    Valgrind,
}

/// One suppression of a file.
#[derive(Debug)]
pub struct Entry {
    /// valgrind's name line, or `leak:PATTERN`.
    pub name: String,
    /// The line of the name (valgrind) or of the pattern (LSan).
    pub line: usize,
    rule: Rule,
}

#[derive(Debug)]
enum Rule {
    Lsan(Template),
    Valgrind { kinds: u8, locs: Vec<Loc> },
}

/// A file read whole.
#[derive(Debug)]
pub struct File {
    pub path: String,
    pub format: Format,
    pub entries: Vec<Entry>,
    /// Suppressions of other kinds, skipped: how many of each kind.
    pub skipped: Vec<(String, usize)>,
}

impl File {
    /// The one line saying what was skipped, if anything was.
    pub fn skipped_note(&self) -> Option<String> {
        let n: usize = self.skipped.iter().map(|s| s.1).sum();
        if n == 0 {
            return None;
        }
        let kinds: Vec<String> = self.skipped.iter().map(|s| shown(&s.0)).collect();
        let ours = match self.format {
            Format::LeakSanitizer => "leak:",
            Format::Valgrind => "Memcheck:Leak",
        };
        Some(format!(
            "suppressions file {}: skipped {n} suppression{} of other kinds than {ours} ({})",
            shown(&self.path),
            if n == 1 { "" } else { "s" },
            kinds.join(", ")
        ))
    }
}

/// The largest suppressions file read: far above any real one (valgrind's own default.supp is
/// about 50 KiB), and small enough that what it parses into stays within tens of megabytes.
pub const MAX_FILE: u64 = 4 << 20;

/// Whether `path` can be a suppressions file, looked at without opening it: a regular file no
/// larger than [`MAX_FILE`]. A FIFO or a device is refused here, as `read` refuses it, so that a
/// check at start-up never blocks.
pub fn check(path: &str) -> Result<(), Problem> {
    let fail = |what: String| Problem {
        path: path.to_owned(),
        line: 0,
        what,
    };
    let meta = std::fs::metadata(path).map_err(|e| fail(unreadable(&e)))?;
    if !meta.is_file() {
        return Err(fail("not a regular file".to_owned()));
    }
    if meta.len() > MAX_FILE {
        return Err(fail(too_large(meta.len())));
    }
    Ok(())
}

fn unreadable(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "no such file".to_owned(),
        _ => format!("cannot be read ({e})"),
    }
}

fn too_large(len: u64) -> String {
    format!(
        "{len} bytes, more than the {} MiB a suppressions file may have",
        MAX_FILE >> 20
    )
}

/// Reads and parses one file: a regular file only (opened without blocking, so a FIFO put in
/// its place cannot hang the reader), and no more than [`MAX_FILE`] bytes of it.
pub fn read(path: &str) -> Result<File, Problem> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let fail = |what: String| Problem {
        path: path.to_owned(),
        line: 0,
        what,
    };
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| fail(unreadable(&e)))?;
    let meta = f.metadata().map_err(|e| fail(unreadable(&e)))?;
    if !meta.is_file() {
        return Err(fail("not a regular file".to_owned()));
    }
    if meta.len() > MAX_FILE {
        return Err(fail(too_large(meta.len())));
    }
    // The file may grow after the check: read one byte past the cap to tell.
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    (&mut f)
        .take(MAX_FILE + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| fail(unreadable(&e)))?;
    if bytes.len() as u64 > MAX_FILE {
        return Err(fail(too_large(bytes.len() as u64)));
    }
    parse(path, &String::from_utf8_lossy(&bytes))
}

/// Parses a file's text; `path` names it in problems.
pub fn parse(path: &str, text: &str) -> Result<File, Problem> {
    // Lines as valgrind's reader gives them: trimmed, blank lines and `#` comments dropped.
    // Walked, never collected: what a file parses into is its entries alone.
    let lines = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'));
    let valgrind = lines.clone().next().is_some_and(|(_, l)| l == "{");
    let mut file = File {
        path: path.to_owned(),
        format: if valgrind {
            Format::Valgrind
        } else {
            Format::LeakSanitizer
        },
        entries: Vec::new(),
        skipped: Vec::new(),
    };
    let fail = |line: usize, what: &str| Problem {
        path: path.to_owned(),
        line,
        what: what.to_owned(),
    };
    if valgrind {
        parse_valgrind(lines, &mut file).map_err(|(line, what)| fail(line, &what))?;
    } else {
        for (n, l) in lines {
            let Some((kind, pattern)) = l.split_once(':') else {
                return Err(fail(n, "expected TYPE:PATTERN, as leak:PATTERN"));
            };
            if kind.is_empty() || !kind.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
                return Err(fail(n, "expected TYPE:PATTERN, as leak:PATTERN"));
            }
            if kind != "leak" {
                skip(&mut file.skipped, kind);
                continue;
            }
            if pattern.is_empty() {
                return Err(fail(n, "leak: has no pattern"));
            }
            file.entries.push(Entry {
                name: l.to_owned(),
                line: n,
                rule: Rule::Lsan(Template::new(pattern)),
            });
        }
    }
    Ok(file)
}

fn skip(skipped: &mut Vec<(String, usize)>, kind: &str) {
    match skipped.iter_mut().find(|s| s.0 == kind) {
        Some(s) => s.1 += 1,
        None => skipped.push((kind.to_owned(), 1)),
    }
}

/// valgrind's blocks, with its reader's rules and messages.
fn parse_valgrind<'t>(
    lines: impl Iterator<Item = (usize, &'t str)> + Clone,
    file: &mut File,
) -> Result<(), (usize, String)> {
    let last = || lines.clone().last().map_or(0, |l| l.0);
    let mut it = lines.clone().peekable();
    let eof = |what: &str| (last(), format!("unexpected end of file ({what})"));
    while let Some((n, l)) = it.next() {
        if l != "{" {
            return Err((n, "expected '{' or end of file".into()));
        }
        let (name_line, name) = it.next().ok_or_else(|| eof("expecting a name"))?;
        if name == "}" {
            return Err((name_line, "unexpected '}' (expecting a name)".into()));
        }
        let (kl, kind) = it.next().ok_or_else(|| eof("expecting TOOL:KIND"))?;
        let Some((tools, what)) = kind.split_once(':') else {
            return Err((kl, "malformed 'tool1,tool2,...:kind' line".into()));
        };
        let memcheck = tools.split(',').any(|t| t == "Memcheck");
        if !memcheck || what != "Leak" {
            if memcheck && !MEMCHECK_KINDS.contains(&what) {
                return Err((kl, format!("unknown Memcheck suppression kind '{what}'")));
            }
            skip(&mut file.skipped, kind);
            loop {
                let (_, l) = it.next().ok_or_else(|| eof("in a suppression of another kind"))?;
                if l == "}" {
                    break;
                }
            }
            continue;
        }
        let mut kinds = ALL_KINDS;
        if let Some(&(ml, l)) = it.peek() {
            if let Some(list) = l.strip_prefix("match-leak-kinds:") {
                it.next();
                kinds =
                    leak_kinds(list.trim()).ok_or((ml, format!("bad match-leak-kinds '{}'", list.trim())))?;
            }
        }
        let mut locs = Vec::new();
        loop {
            let (ln, l) = it.next().ok_or_else(|| eof("reading the stack"))?;
            if l == "}" {
                break;
            }
            if locs.len() >= NUM_CALLERS {
                continue;
            }
            locs.push(Loc::parse(l).ok_or((
                ln,
                "a location is '...', or starts with 'fun:', 'obj:' or 'src:'".to_owned(),
            ))?);
        }
        if locs.is_empty() {
            return Err((name_line, "the suppression has no stack".into()));
        }
        if locs.iter().all(|l| matches!(l, Loc::Any)) {
            return Err((
                name_line,
                "a suppression needs one location that is not '...'".into(),
            ));
        }
        file.entries.push(Entry {
            name: name.to_owned(),
            line: name_line,
            rule: Rule::Valgrind { kinds, locs },
        });
    }
    Ok(())
}

/// memcheck's suppression kinds; only Leak applies to leaks.
const MEMCHECK_KINDS: &[&str] = &[
    "Value1",
    "Value2",
    "Value4",
    "Value8",
    "Value16",
    "Value32",
    "Cond",
    "Addr1",
    "Addr2",
    "Addr4",
    "Addr8",
    "Addr16",
    "Addr32",
    "Jump",
    "Param",
    "Free",
    "Overlap",
    "Leak",
    "FishyValue",
    "ReallocZero",
];

const ALL_KINDS: u8 = 0b1111;

/// The classes a LeakSanitizer pattern applies to: every one LSan reports as a leak. A block
/// LSan finds reachable it never reports, so a `leak:` line has nothing to say about it; and
/// matching one against still-reachable blocks would name every stack of a program that frees
/// little at exit (CPython's, whose blocks are all reachable) for nothing.
const LSAN_KINDS: u8 = ALL_KINDS & !Class::StillReachable.bit();

fn kind_word(c: Class) -> &'static str {
    match c {
        Class::DefinitelyLost => "definite",
        Class::IndirectlyLost => "indirect",
        Class::PossiblyLost => "possible",
        Class::StillReachable => "reachable",
    }
}

/// `match-leak-kinds`'s comma-separated words, as a set of `Class::bit`s.
fn leak_kinds(list: &str) -> Option<u8> {
    let mut set = 0;
    for w in list.split(',').map(str::trim) {
        set |= match w {
            "all" => ALL_KINDS,
            "none" => 0,
            _ => Class::ALL.iter().find(|&&c| kind_word(c) == w)?.bit(),
        };
    }
    Some(set)
}

#[derive(Debug)]
enum Loc {
    Fun(Glob),
    Obj(Glob),
    Src(Glob, Option<u32>),
    /// `...`
    Any,
}

impl Loc {
    /// `...`, `obj:*` or `fun:*`: matches any frame.
    fn is_wild(&self) -> bool {
        match self {
            Loc::Any => true,
            Loc::Fun(g) | Loc::Obj(g) => g.0 == "*",
            Loc::Src(..) => false,
        }
    }

    fn parse(l: &str) -> Option<Loc> {
        if l == "..." {
            return Some(Loc::Any);
        }
        if let Some(g) = l.strip_prefix("fun:") {
            return Some(Loc::Fun(Glob::new(g)));
        }
        if let Some(g) = l.strip_prefix("obj:") {
            return Some(Loc::Obj(Glob::new(g)));
        }
        let src = l.strip_prefix("src:")?;
        Some(match src.rsplit_once(':') {
            Some((f, n)) if n.parse::<u32>().is_ok() => Loc::Src(Glob::new(f), n.parse().ok()),
            _ => Loc::Src(Glob::new(src), None),
        })
    }
}

/// valgrind's globs: `*` any run of characters, `?` any one, `\` takes the next literally.
/// Runs of `*` are kept as one, so that matching costs what the name does, not the pattern.
#[derive(Debug)]
struct Glob(String);

impl Glob {
    fn new(p: &str) -> Glob {
        Glob(collapse_stars(p, true))
    }

    fn is_plain(&self) -> bool {
        !self.0.contains(['*', '?', '\\'])
    }

    fn matches(&self, s: &str) -> bool {
        glob(self.0.as_bytes(), s.as_bytes())
    }
}

/// `p` with each run of `*` made one `*` (an escaped one, when `escapes`, left as it is).
fn collapse_stars(p: &str, escapes: bool) -> String {
    let mut out = String::with_capacity(p.len());
    let mut chars = p.chars();
    let mut star = false;
    while let Some(c) = chars.next() {
        if c == '*' && star {
            continue;
        }
        star = c == '*';
        out.push(c);
        if escapes && c == '\\' {
            if let Some(next) = chars.next() {
                out.push(next);
            }
        }
    }
    out
}

/// The glob `p` up to its first `*` that is not escaped, and what follows that `*`.
fn segment(p: &[u8]) -> (&[u8], Option<&[u8]>) {
    let mut i = 0;
    while i < p.len() {
        match p[i] {
            b'\\' => i += 2,
            b'*' => return (&p[..i], Some(&p[i + 1..])),
            _ => i += 1,
        }
    }
    (p, None)
}

/// Whether the segment `seg` (no `*`) matches `s` from its start, and how many bytes of `s` it
/// covers; it stops at the first byte that differs, so it costs no more than `s` is long.
fn fits(seg: &[u8], s: &[u8]) -> Option<usize> {
    let (mut i, mut n) = (0, 0);
    while i < seg.len() {
        let c = *s.get(n)?;
        match seg[i] {
            b'?' => i += 1,
            b'\\' => {
                if seg.get(i + 1) != Some(&c) {
                    return None;
                }
                i += 2;
            }
            b => {
                if b != c {
                    return None;
                }
                i += 1;
            }
        }
        n += 1;
    }
    Some(n)
}

/// How many bytes of a name the segment `seg` covers, counted no further than `limit` + 1.
fn width(seg: &[u8], limit: usize) -> usize {
    let (mut i, mut n) = (0, 0);
    while i < seg.len() && n <= limit {
        i += if seg[i] == b'\\' { 2 } else { 1 };
        n += 1;
    }
    n
}

/// Whether the glob `p` matches all of `s`. The pieces between `*`s are placed leftmost in turn
/// (which leaves the most room for those after them): time bounded by the square of the name's
/// length whatever the pattern, and no memory.
fn glob(p: &[u8], s: &[u8]) -> bool {
    let (first, mut rest) = segment(p);
    let Some(n) = fits(first, s) else {
        return false;
    };
    let mut at = n;
    let Some(mut after) = rest.take() else {
        return at == s.len();
    };
    loop {
        let (seg, next) = segment(after);
        match next {
            None => {
                // The last piece ends where the name does.
                let w = width(seg, s.len() - at);
                return w <= s.len() - at && fits(seg, &s[s.len() - w..]) == Some(w);
            }
            Some(next) => {
                let mut k = at;
                at = loop {
                    if k > s.len() {
                        return false;
                    }
                    if let Some(w) = fits(seg, &s[k..]) {
                        break k + w;
                    }
                    k += 1;
                };
                after = next;
            }
        }
    }
}

/// LeakSanitizer's pattern: literal pieces between `*`s, optionally anchored. The pieces are
/// read from `body` as matching walks it, and runs of `*` are kept as one.
#[derive(Debug)]
struct Template {
    start: bool,
    end: bool,
    body: String,
    /// Where in `body` the longest literal piece is.
    key: Option<std::ops::Range<usize>>,
}

impl Template {
    fn new(t: &str) -> Template {
        let (start, t) = match t.strip_prefix('^') {
            Some(rest) => (true, rest),
            None => (false, t),
        };
        let (end, t) = match t.strip_suffix('$') {
            Some(rest) => (true, rest),
            None => (false, t),
        };
        let body = collapse_stars(t, false);
        let mut key: Option<std::ops::Range<usize>> = None;
        let mut from = 0;
        for piece in body.split('*') {
            if !piece.is_empty() && key.as_ref().is_none_or(|k| piece.len() > k.len()) {
                key = Some(from..from + piece.len());
            }
            from += piece.len() + 1;
        }
        Template {
            start,
            end,
            body,
            key,
        }
    }

    /// The longest literal piece, which any string it matches contains.
    fn key(&self) -> Option<&str> {
        self.key.clone().map(|k| &self.body[k])
    }

    /// LSan's matching: each piece found leftmost after the one before it, so the time is linear
    /// in the string (a piece longer than what is left fails at once).
    fn matches(&self, s: &str) -> bool {
        if s.is_empty() {
            return false;
        }
        let mut rest = s;
        let mut pieces = self.body.split('*').peekable();
        let mut first = true;
        while let Some(piece) = pieces.next() {
            let last = pieces.peek().is_none();
            if first && self.start {
                first = false;
                match rest.strip_prefix(piece) {
                    Some(r) => rest = r,
                    None => return false,
                }
                if last && self.end && !rest.is_empty() {
                    return false;
                }
                continue;
            }
            first = false;
            if last && self.end {
                return rest.len() >= piece.len() && rest.ends_with(piece);
            }
            match rest.find(piece) {
                Some(at) => rest = &rest[at + piece.len()..],
                None => return false,
            }
        }
        true
    }
}

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

/// A suppression that matches exactly one stack and class, as valgrind's `--gen-suppressions`
/// writes it.
pub struct Generated {
    pub kind: &'static str,
    /// `match-leak-kinds: definite`
    pub aux: String,
    /// `fun:malloc`, `obj:/usr/lib/libfoo.so`, ...
    pub lines: Vec<String>,
}

/// valgrind's placeholder for the name a user gives a suppression.
pub const PLACEHOLDER: &str = "insert_a_suppression_name_here";

impl Generated {
    pub fn new(stack: &Stack, class: Class) -> Generated {
        let mut lines: Vec<String> = stack
            .alloc
            .patterns()
            .iter()
            .map(|p| format!("fun:{p}"))
            .collect();
        let frames = &stack.frames[..below_main_cut(stack.frames)];
        for f in frames {
            lines.push(match (&f.symbol, &f.object) {
                // An inlined template's arguments as a glob (see `template_base`).
                (Some(_), _) if f.inlined && f.valgrind_name().contains('<') => {
                    let name = f.valgrind_name();
                    format!("fun:{}<*", &name[..name.find('<').unwrap_or(name.len())])
                }
                (Some(_), _) => format!("fun:{}", f.valgrind_name()),
                (None, Some(o)) => format!("obj:{}", o.to_string_lossy()),
                (None, None) => "obj:*".to_owned(),
            });
        }
        Generated {
            kind: "Memcheck:Leak",
            aux: format!("match-leak-kinds: {}", kind_word(class)),
            lines,
        }
    }

    /// [`Generated::text`] as printed among other text: a name's control characters shown
    /// escaped (`\x1b`), never written raw to a terminal or into XML.
    pub fn shown(&self) -> String {
        crate::escape::lines(&self.text())
    }

    /// The text to paste into a suppressions file.
    pub fn text(&self) -> String {
        let mut s = format!("{{\n   <{PLACEHOLDER}>\n   {}\n   {}\n", self.kind, self.aux);
        for l in &self.lines {
            s.push_str("   ");
            s.push_str(l);
            s.push('\n');
        }
        s.push_str("}\n");
        s
    }
}

/// How many frames valgrind's stacks keep (`--show-below-main=no`): up to the outermost `main`,
/// or without one up to the innermost frame below main; whole addresses, inlined frames and all.
pub fn below_main_cut(frames: &[Frame]) -> usize {
    let outer = |i: usize| !frames[i].inlined;
    let mut n = frames.len();
    for i in (0..frames.len()).rev() {
        if !outer(i) {
            continue;
        }
        let name = frames[i].valgrind_name();
        if name == "main" || name == "(below main)" {
            n = i + 1;
        }
        if name == "main" {
            break;
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::rc::Rc;

    fn frame(sym: &str, demangled: &str, file: &str, obj: &str) -> Frame {
        let mut f = Frame::bare(0x1000 + sym.len() as u64, Some(Rc::from(Path::new(obj))));
        f.symbol = Some(sym.into());
        f.function = Some(demangled.into());
        f.file = Some(file.into());
        f.line = Some(7);
        f
    }

    fn stack(frames: &[Frame]) -> Stack<'_> {
        Stack {
            alloc: Alloc::of(Some("malloc")),
            alloc_object: Some(Path::new("/opt/dmem/libdmem.so")),
            frames,
            truncated: false,
        }
    }

    fn frames() -> Vec<Frame> {
        vec![
            frame(
                "vendor_init",
                "vendor_init",
                "/src/vendor/init.c",
                "/usr/lib/libvendor.so",
            ),
            frame(
                "_ZN2ns4loadIiEEvv",
                "void ns::load<int>()",
                "/src/app/load.cpp",
                "/opt/app/bin",
            ),
            frame("main", "main", "/src/app/main.cpp", "/opt/app/bin"),
            frame(
                "__libc_start_call_main",
                "__libc_start_call_main",
                "libc_start_call_main.h",
                "/lib/libc.so.6",
            ),
        ]
    }

    fn find(text: &str, class: Class) -> Option<Hit> {
        let f = parse("t.supp", text).unwrap();
        let mut s = Suppressions::new(vec![f]);
        let fr = frames();
        s.find(&stack(&fr), class)
    }

    #[test]
    fn lsan_templates_match_as_lsan() {
        let t = Template::new("^foo*bar$");
        assert!(t.matches("foo_x_bar") && !t.matches("xfoobar") && !t.matches("foobarx"));
        assert!(Template::new("load").matches("void ns::load<int>()"));
        assert!(!Template::new("ns::load<*>$").matches("void ns::load<int>()"));
        assert!(Template::new("ns::load<*>()$").matches("void ns::load<int>()"));
        assert!(!Template::new("x").matches(""));
        assert_eq!(
            find("# c\nleak:vendor_init\n", Class::DefinitelyLost),
            Some(Hit { file: 0, entry: 0 })
        );
        assert!(
            find("leak:libvendor.so\n", Class::DefinitelyLost).is_some(),
            "by module"
        );
        assert!(
            find("leak:app/load.cpp\n", Class::IndirectlyLost).is_some(),
            "by file"
        );
        assert!(
            find("leak:app/load.cpp\n", Class::StillReachable).is_none(),
            "LSan never reports a reachable block"
        );
        assert!(find("leak:^vendor$\n", Class::DefinitelyLost).is_none());
        assert!(find("leak:nowhere\nleak:*init\n", Class::DefinitelyLost) == Some(Hit { file: 0, entry: 1 }));
    }

    #[test]
    fn valgrind_blocks_match_from_the_allocation_function() {
        let ok = "{\n n\n Memcheck:Leak\n match-leak-kinds: definite\n fun:malloc\n fun:vendor_init\n}\n";
        assert!(find(ok, Class::DefinitelyLost).is_some());
        assert!(find(ok, Class::PossiblyLost).is_none(), "kinds");
        let no_alloc = "{\n n\n Memcheck:Leak\n fun:vendor_init\n}\n";
        assert!(
            find(no_alloc, Class::DefinitelyLost).is_none(),
            "the first frame is malloc"
        );
        let dots = "{\n n\n Memcheck:Leak\n fun:*alloc\n ...\n fun:main\n}\n";
        assert!(find(dots, Class::DefinitelyLost).is_some());
        let mangled = "{\n n\n Memcheck:Leak\n ...\n fun:_ZN2ns4loadIiEEvv\n}\n";
        assert!(find(mangled, Class::DefinitelyLost).is_some());
        let demangled = "{\n n\n Memcheck:Leak\n ...\n fun:void ns::load<int>()\n}\n";
        assert!(
            find(demangled, Class::DefinitelyLost).is_none(),
            "valgrind matches mangled names"
        );
        let obj = "{\n n\n Memcheck:Leak\n obj:*/vgpreload_memcheck-*.so\n obj:*/libvendor.so\n}\n";
        assert!(find(obj, Class::IndirectlyLost).is_some());
        let src = "{\n n\n Memcheck:Leak\n fun:malloc\n src:init.c:7\n}\n";
        assert!(find(src, Class::IndirectlyLost).is_some());
        let below = "{\n n\n Memcheck:Leak\n ...\n fun:main\n fun:(below main)\n}\n";
        assert!(find(below, Class::IndirectlyLost).is_some());
        let too_long = "{\n n\n Memcheck:Leak\n ...\n fun:(below main)\n fun:x\n}\n";
        assert!(find(too_long, Class::IndirectlyLost).is_none());
    }

    /// A named stack that records which return addresses matching asked to name.
    struct Counting<'a> {
        named: Named<'a>,
        asked: Vec<usize>,
    }

    impl Frames for Counting<'_> {
        fn len(&self) -> usize {
            self.named.len()
        }

        fn object(&mut self, i: usize) -> Option<&Path> {
            self.named.object(i)
        }

        fn frames(&mut self, i: usize) -> &[Frame] {
            if !self.asked.contains(&i) {
                self.asked.push(i);
            }
            self.named.frames(i)
        }
    }

    /// The match, and which return addresses it named.
    fn lazily(text: &str, frames: &[Frame], class: Class) -> (Option<Hit>, Vec<usize>) {
        let mut s = Suppressions::new(vec![parse("t.supp", text).unwrap()]);
        let mut c = Counting {
            named: Named::new(frames),
            asked: Vec::new(),
        };
        let hit = s.find_lazily(Head::of(&stack(frames)), &mut c, class);
        (hit, c.asked)
    }

    #[test]
    fn matching_names_only_the_frames_it_reads() {
        let fr = frames();
        let definite =
            "{\n n\n Memcheck:Leak\n match-leak-kinds: definite\n fun:malloc\n fun:vendor_init\n}\n";
        assert_eq!(
            lazily(definite, &fr, Class::StillReachable),
            (None, vec![]),
            "kinds"
        );
        assert_eq!(
            lazily(definite, &fr, Class::DefinitelyLost),
            (Some(Hit { file: 0, entry: 0 }), vec![0])
        );
        let calloc = "{\n n\n Memcheck:Leak\n fun:calloc\n ...\n fun:main\n}\n";
        assert_eq!(
            lazily(calloc, &fr, Class::DefinitelyLost),
            (None, vec![]),
            "allocation function"
        );
        let dots = "{\n n\n Memcheck:Leak\n fun:malloc\n ...\n fun:main\n}\n";
        assert_eq!(lazily(dots, &fr, Class::DefinitelyLost).1, vec![0, 1, 2]);
        let nowhere = "{\n n\n Memcheck:Leak\n fun:malloc\n ...\n fun:nowhere\n}\n";
        assert_eq!(
            lazily(nowhere, &fr, Class::DefinitelyLost),
            (None, vec![0, 1, 2, 3])
        );
        assert_eq!(
            lazily("leak:libvendor.so\n", &fr, Class::PossiblyLost),
            (Some(Hit { file: 0, entry: 0 }), vec![]),
            "by module, before any name"
        );
        assert_eq!(
            lazily("leak:libvendor.so\n", &fr, Class::StillReachable),
            (None, vec![]),
            "a reachable block, not named"
        );
        assert_eq!(
            lazily("leak:load.cpp\n", &fr, Class::IndirectlyLost).1,
            vec![0, 1]
        );
    }

    #[test]
    fn inlined_frames_are_matched_in_place() {
        // valgrind lists an address's inlined functions, innermost first, before the function
        // they were inlined into; a block generated by valgrind names them all.
        let mut fr = frames();
        let mut inl = frame(
            "pair<std::string const&, 0ul>",
            "std::pair<std::string const&, 0ul>",
            "/usr/include/c++/12/tuple",
            "/opt/app/bin",
        );
        inl.pc = fr[1].pc;
        inl.inlined = true;
        fr.insert(1, inl);
        let block = "{\n n\n Memcheck:Leak\n fun:malloc\n fun:vendor_init\n fun:pair<const std::string&, 0>\n fun:_ZN2ns4loadIiEEvv\n fun:main\n}\n";
        assert_eq!(
            lazily(block, &fr, Class::DefinitelyLost),
            (Some(Hit { file: 0, entry: 0 }), vec![0, 1, 2])
        );
        // The first block names every frame; the second is then tried by the names it needs.
        let dots = "{\n x\n Memcheck:Leak\n ...\n fun:nowhere\n}\n\
                    {\n n\n Memcheck:Leak\n ...\n fun:pair<const std::string&, 0>\n fun:_ZN2ns4loadIiEEvv\n}\n";
        assert_eq!(
            lazily(dots, &fr, Class::DefinitelyLost).0,
            Some(Hit { file: 0, entry: 1 }),
            "template arguments spelled otherwise"
        );
        let file = "leak:c++/12/tuple\n";
        assert!(
            lazily(file, &fr, Class::DefinitelyLost).0.is_some(),
            "an inlined frame's file"
        );
    }

    #[test]
    fn other_kinds_are_skipped_and_errors_name_their_line() {
        let f = parse(
            "a.supp",
            "{\n c\n Memcheck:Cond\n fun:x\n}\n{\n h\n Helgrind:Race\n fun:y\n}\n",
        )
        .unwrap();
        assert!(f.entries.is_empty());
        assert_eq!(
            f.skipped_note().unwrap(),
            "suppressions file a.supp: skipped 2 suppressions of other kinds than Memcheck:Leak (Memcheck:Cond, Helgrind:Race)"
        );
        let e = parse("a.supp", "{\n n\n Memcheck:Leak\n bogus\n}\n").unwrap_err();
        assert_eq!(e.line, 4);
        assert!(
            e.to_string()
                .starts_with("suppressions file a.supp, line 4: a location is"),
            "{e}"
        );
        let e = parse("b.supp", "leak:x\nnot a suppression\n").unwrap_err();
        assert_eq!(
            (e.line, e.what.as_str()),
            (2, "expected TYPE:PATTERN, as leak:PATTERN")
        );
        let f = parse("c.supp", "race:x\nleak:y\n").unwrap();
        assert_eq!((f.format, f.entries.len()), (Format::LeakSanitizer, 1));
        assert!(read("/nonexistent/x.supp")
            .unwrap_err()
            .to_string()
            .ends_with("no such file"));
    }

    #[test]
    fn generated_suppressions_stop_at_main() {
        let fr = frames();
        let g = Generated::new(&stack(&fr), Class::DefinitelyLost);
        assert_eq!(
            g.text(),
            "{\n   <insert_a_suppression_name_here>\n   Memcheck:Leak\n   match-leak-kinds: definite\n   fun:malloc\n   fun:vendor_init\n   fun:_ZN2ns4loadIiEEvv\n   fun:main\n}\n"
        );
        // What dmem writes, dmem reads back as matching that stack alone.
        assert!(find(&g.text(), Class::DefinitelyLost).is_some());
        assert!(find(&g.text(), Class::IndirectlyLost).is_none());
    }

    /// A small seeded generator, so that a failure repeats.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }

        fn word(&mut self, alphabet: &[u8], max: usize) -> String {
            let n = self.below(max + 1);
            (0..n)
                .map(|_| alphabet[self.below(alphabet.len())] as char)
                .collect()
        }
    }

    /// valgrind's glob as the plain recursive definition: the oracle for `glob`.
    fn glob_oracle(p: &[u8], s: &[u8]) -> bool {
        match p.split_first() {
            None => s.is_empty(),
            Some((b'*', rest)) => (0..=s.len()).any(|k| glob_oracle(rest, &s[k..])),
            Some((b'?', rest)) => !s.is_empty() && glob_oracle(rest, &s[1..]),
            Some((b'\\', rest)) => match (rest.split_first(), s.split_first()) {
                (Some((a, rest)), Some((b, s))) => a == b && glob_oracle(rest, s),
                _ => false,
            },
            Some((&c, rest)) => s.first() == Some(&c) && glob_oracle(rest, &s[1..]),
        }
    }

    /// LSan's template as the plain recursive definition: the oracle for `Template`.
    fn template_oracle(t: &str, s: &str) -> bool {
        fn here(p: &[u8], s: &[u8], end: bool) -> bool {
            match p.split_first() {
                None => !end || s.is_empty(),
                Some((b'*', rest)) => (0..=s.len()).any(|k| here(rest, &s[k..], end)),
                Some((&c, rest)) => s.first() == Some(&c) && here(rest, &s[1..], end),
            }
        }
        let (start, t) = t.strip_prefix('^').map_or((false, t), |r| (true, r));
        let (end, t) = t.strip_suffix('$').map_or((false, t), |r| (true, r));
        let (p, s) = (t.as_bytes(), s.as_bytes());
        !s.is_empty() && (0..=if start { 0 } else { s.len() }).any(|k| here(p, &s[k..], end))
    }

    #[test]
    fn globs_and_templates_agree_with_their_definitions() {
        let mut rng = Rng(0x9e3779b97f4a7c15);
        for _ in 0..20_000 {
            let p = rng.word(b"ab*?\\", 8);
            let s = rng.word(b"ab*?\\", 8);
            assert_eq!(
                Glob::new(&p).matches(&s),
                glob_oracle(p.as_bytes(), s.as_bytes()),
                "glob {p:?} on {s:?}"
            );
            let t = format!(
                "{}{}{}",
                if rng.below(3) == 0 { "^" } else { "" },
                rng.word(b"ab*", 7),
                if rng.below(3) == 0 { "$" } else { "" }
            );
            assert_eq!(
                Template::new(&t).matches(&s),
                template_oracle(&t, &s),
                "template {t:?} on {s:?}"
            );
        }
    }

    /// valgrind's `generic_match` as the plain recursive definition over names: the oracle for
    /// `Input::matches`. Past the last frame only `...` matches (nothing).
    fn locs_oracle(locs: &[&str], names: &[&str]) -> bool {
        match locs.split_first() {
            None => true,
            Some((&"...", rest)) => (0..=names.len()).any(|k| locs_oracle(rest, &names[k..])),
            Some((l, rest)) => match names.split_first() {
                Some((n, names)) => glob(l.as_bytes(), n.as_bytes()) && locs_oracle(rest, names),
                None => false,
            },
        }
    }

    #[test]
    fn valgrind_locations_agree_with_generic_match() {
        let mut rng = Rng(0x2545f4914f6cdd1d);
        let pool = ["f", "g", "h", "*", "?"];
        for round in 0..5_000 {
            let names: Vec<String> = (0..rng.below(7)).map(|_| pool[rng.below(3)].to_owned()).collect();
            let fr: Vec<Frame> = names.iter().map(|n| frame(n, n, "/s/x.c", "/o/x.so")).collect();
            let mut locs = vec!["fun:malloc".to_owned()];
            locs.extend((0..rng.below(6)).map(|_| match rng.below(3) {
                0 => "...".to_owned(),
                _ => format!("fun:{}", pool[rng.below(pool.len())]),
            }));
            if locs.iter().skip(1).all(|l| l == "...") && locs.len() > 1 {
                continue;
            }
            let text = format!("{{\n n\n Memcheck:Leak\n {}\n}}\n", locs.join("\n "));
            let mut sup = Suppressions::new(vec![parse("t.supp", &text).unwrap()]);
            let mut st = stack(&fr);
            st.truncated = round % 2 == 0;
            let want = {
                let mut all: Vec<&str> = vec!["malloc"];
                all.extend(names.iter().map(String::as_str));
                let mut ls: Vec<&str> = locs.iter().map(|l| l.strip_prefix("fun:").unwrap_or(l)).collect();
                // A stack recorded whole ends where valgrind's goes on into `obj:*` frames:
                // trailing locations that match any frame may match none there.
                while !st.truncated && ls.last().is_some_and(|l| *l == "..." || *l == "*") {
                    ls.pop();
                }
                locs_oracle(&ls, &all)
            };
            assert_eq!(
                sup.find(&st, Class::DefinitelyLost).is_some(),
                want,
                "{locs:?} on {names:?}"
            );
        }
    }

    #[test]
    fn dots_past_the_recorded_frames_match_nothing() {
        // The stack filled every recorded slot; a `...` reaching past it must not let a name
        // the stack never had match (valgrind: a suppression longer than the stack fails).
        let fr = frames();
        let mut st = stack(&fr);
        st.truncated = true;
        for text in [
            "{\n n\n Memcheck:Leak\n fun:malloc\n ...\n fun:unrelated_library_function\n}\n",
            "{\n n\n Memcheck:Leak\n ...\n fun:main\n fun:__libc_start_call_main\n fun:x\n}\n",
        ] {
            let mut sup = Suppressions::new(vec![parse("t.supp", text).unwrap()]);
            assert_eq!(sup.find(&st, Class::DefinitelyLost), None, "{text}");
        }
        let trailing = "{\n n\n Memcheck:Leak\n fun:malloc\n fun:vendor_init\n ...\n}\n";
        let mut sup = Suppressions::new(vec![parse("t.supp", trailing).unwrap()]);
        assert!(
            sup.find(&st, Class::DefinitelyLost).is_some(),
            "a trailing ... takes nothing"
        );
    }

    #[test]
    fn trailing_wildcards_match_past_the_end_of_a_whole_stack() {
        // valgrind's stack of a static constructor's block goes on past the entry point into
        // junk it writes as `obj:*`; a stack recorded whole ends at the entry point.
        let fr = frames();
        let text = "{\n n\n Memcheck:Leak\n fun:malloc\n fun:vendor_init\n fun:_ZN2ns4loadIiEEvv\n \
                    fun:main\n fun:(below main)\n obj:*\n obj:*\n ...\n}\n";
        let mut sup = Suppressions::new(vec![parse("t.supp", text).unwrap()]);
        let mut st = stack(&fr);
        assert!(sup.find(&st, Class::DefinitelyLost).is_some(), "whole: matched");
        // A stack that filled every slot may have been cut: what lies past it is unknown.
        st.truncated = true;
        assert_eq!(sup.find(&st, Class::DefinitelyLost), None, "cut: not matched");
        // A named frame past the end never matches.
        st.truncated = false;
        let named = "{\n n\n Memcheck:Leak\n fun:malloc\n ...\n fun:(below main)\n obj:*\n fun:x\n}\n";
        let mut sup = Suppressions::new(vec![parse("t.supp", named).unwrap()]);
        assert_eq!(sup.find(&st, Class::DefinitelyLost), None);
    }

    /// Runs `f` on a thread and fails if it has not finished in a minute: far beyond what it
    /// takes, so only a hang (the quadratic or exponential matching this replaced) comes near.
    fn finishes<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        rx.recv_timeout(std::time::Duration::from_secs(60))
            .expect("matching did not finish in a minute")
    }

    #[test]
    fn huge_patterns_compile_and_match_in_bounded_time() {
        finishes(|| {
            let fr = frames();
            // One 1 MiB LSan pattern, its pieces matching names partly; and one of stars.
            let long = "vendor*".repeat(150_000);
            let stars = "*".repeat(1 << 20);
            let text = format!(
                "leak:{long}\nleak:^{stars}nothere$\nleak:{}\n",
                "ab".repeat(1 << 19)
            );
            let mut sup = Suppressions::new(vec![parse("t.supp", &text).unwrap()]);
            assert_eq!(sup.find(&stack(&fr), Class::DefinitelyLost), None);
            // valgrind globs of a million stars and of alternating pieces.
            let g = format!("fun:{}", "*?".repeat(1 << 19));
            let text = format!(
                "{{\n n\n Memcheck:Leak\n fun:malloc\n ...\n {g}z\n ...\n fun:{}\n}}\n",
                "a*".repeat(1 << 19)
            );
            let mut sup = Suppressions::new(vec![parse("t.supp", &text).unwrap()]);
            assert_eq!(sup.find(&stack(&fr), Class::DefinitelyLost), None);
        });
    }

    #[test]
    fn any_bytes_parse_to_an_answer() {
        // Random files of the characters suppressions are made of: parsing never panics, and a
        // file's entries are never more than its lines.
        finishes(|| {
            let mut rng = Rng(0xdeadbeefcafef00d);
            let fr = frames();
            let words = [
                "{",
                "}",
                "leak:",
                "Memcheck:Leak",
                "...",
                "fun:",
                "obj:",
                "src:",
                "*",
                "main",
                "\n",
                "match-leak-kinds:",
                "definite",
                "\u{1b}[2J",
                ":",
                "#",
                " ",
            ];
            for _ in 0..3_000 {
                let text: String = (0..rng.below(40))
                    .map(|_| words[rng.below(words.len())])
                    .collect();
                if let Ok(f) = parse("r.supp", &text) {
                    assert!(f.entries.len() <= text.lines().count());
                    let mut sup = Suppressions::new(vec![f]);
                    let _ = sup.find(&stack(&fr), Class::DefinitelyLost);
                } else if let Err(e) = parse("r.supp", &text) {
                    assert!(!e.to_string().contains('\u{1b}'), "{e}");
                }
            }
        });
    }

    #[test]
    fn files_that_are_not_regular_or_too_large_are_refused_without_reading() {
        let dir = std::env::temp_dir().join(format!("dmem-supp-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("fifo.supp");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
        assert!(made.success());
        let fifo = fifo.to_str().unwrap().to_owned();
        // Opening a FIFO with no writer would block; `read` must not.
        let e = finishes(move || read(&fifo).unwrap_err());
        assert!(e.to_string().ends_with("not a regular file"), "{e}");
        assert!(check(e.path.as_str()).is_err());
        let big = dir.join("big.supp");
        std::fs::write(&big, "leak:x\n".repeat((MAX_FILE / 7 + 1) as usize)).unwrap();
        let e = read(big.to_str().unwrap()).unwrap_err();
        assert!(e.what.contains("more than the 4 MiB"), "{e}");
        assert_eq!(check(big.to_str().unwrap()).unwrap_err(), e);
        let dev = read("/dev/zero").unwrap_err();
        assert!(dev.to_string().ends_with("not a regular file"), "{dev}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn globs() {
        assert!(glob(b"*alloc", b"malloc") && glob(b"m?lloc", b"malloc") && !glob(b"m?lloc", b"mlloc"));
        assert!(glob(b"a*b*c", b"aXbYbc") && !glob(b"a*b*c", b"aXbYb"));
        assert!(glob(b"\\*x", b"*x") && !glob(b"\\*x", b"ax"));
    }
}
