//! A suppressions file read and parsed: LeakSanitizer's `TYPE:PATTERN` lines or valgrind's
//! blocks, with their readers' rules and messages, and the refusal of a file that cannot be one.

use super::pattern::{Glob, Template};
use crate::reach::Class;
use std::fmt;

/// valgrind's default `--num-callers`: locations past it are not read.
const NUM_CALLERS: usize = 12;

/// A file that could not be used, or the line of it that could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    pub path: String,
    /// 0 for the file as a whole (missing, unreadable).
    pub line: usize,
    pub what: String,
}

/// Text from a command line or a file, as messages echo it: control characters made visible.
pub(super) fn shown(s: &str) -> String {
    crate::escape::escaped(s.as_bytes())
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
    pub(super) rule: Rule,
}

#[derive(Debug)]
pub(super) enum Rule {
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
pub(super) const LSAN_KINDS: u8 = ALL_KINDS & !Class::StillReachable.bit();

pub(super) fn kind_word(c: Class) -> &'static str {
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
pub(super) enum Loc {
    Fun(Glob),
    Obj(Glob),
    Src(Glob, Option<u32>),
    /// `...`
    Any,
}

impl Loc {
    /// `...`, `obj:*` or `fun:*`: matches any frame.
    pub(super) fn is_wild(&self) -> bool {
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
