//! The files of each crate (the library, the analysis, the launcher) import one another without
//! a circle: the library's allocation path imports only downward (never the exit path that
//! reports on it), and the launcher's commands, sources and model form layers too. A circle is found from the source text alone: every
//! `crate::`, `super::` and `self::` path, and every path through a module a file declares, is
//! an edge from that file's module to the module the path names.
//!
//! In the launcher, `source/` and `model/` import nothing from `cli` or `commands`: what a
//! command reads and what it makes of it know nothing of the command line above them.
//!
//! And no file is a heap of jobs: no Rust file of the three crates has more than 800 lines
//! before its unit tests (a trailing `#[cfg(test)] mod tests` is not counted: a module's tests
//! sit with it, and splitting them off would not make its code easier to read), and no function
//! has more than 100 lines.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The module a file defines: `src/a/b.rs` and `src/a/b/mod.rs` are `a::b`; the root is `""`.
fn module_of(root: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(root).unwrap().with_extension("");
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib" | "main")) {
        parts.pop();
    }
    parts.join("::")
}

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The text with comments and the contents of string and char literals blanked, so that a path
/// in a doc comment or a message is not an import.
fn code_only(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            i += 2;
            while i < b.len() && !b[i..].starts_with(b"*/") {
                i += 1;
            }
            i += 2;
        } else if b[i] == b'r'
            && b.get(i + 1).is_some_and(|c| *c == b'"' || *c == b'#')
            && (i == 0 || !b[i - 1].is_ascii_alphanumeric())
        {
            // A raw string: r"..." or r#"..."#.
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&b'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) != Some(&b'"') {
                out.push('r');
                i += 1;
                continue;
            }
            let close: Vec<u8> = std::iter::once(b'"')
                .chain(std::iter::repeat_n(b'#', hashes))
                .collect();
            j += 1;
            while j < b.len() && !b[j..].starts_with(&close) {
                j += 1;
            }
            i = j + close.len();
            out.push_str("\"\"");
        } else if b[i] == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if b[i] == b'\'' && b.get(i + 2) == Some(&b'\'') {
            i += 3;
        } else if b[i] == b'\'' && b.get(i + 1) == Some(&b'\\') {
            i += 2;
            while i < b.len() && b[i] != b'\'' {
                i += 1;
            }
            i += 1;
        } else {
            let c = text[i..].chars().next().unwrap();
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

fn ident_at(s: &str) -> Option<(&str, &str)> {
    let s = s.trim_start();
    let end = s
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    (end > 0).then(|| (&s[..end], &s[end..]))
}

/// The paths of a use tree starting at `s` (what follows `crate::`), each as its segments, and
/// the rest of the text.
fn use_tree<'a>(s: &'a str, prefix: &[String], out: &mut Vec<Vec<String>>) -> &'a str {
    let t = s.trim_start();
    if let Some(mut rest) = t.strip_prefix('{') {
        loop {
            rest = rest.trim_start();
            if let Some(r) = rest.strip_prefix('}') {
                return r;
            }
            if let Some(r) = rest.strip_prefix(',') {
                rest = r;
                continue;
            }
            let before = rest.len();
            rest = use_tree(rest, prefix, out);
            if rest.len() == before {
                // Not a use tree after all (a glob, say): step over one character.
                rest = &rest[rest.chars().next().map_or(0, char::len_utf8)..];
            }
        }
    }
    let Some((id, rest)) = ident_at(t) else {
        return t;
    };
    let mut path = prefix.to_vec();
    path.push(id.to_owned());
    if let Some(r) = rest.strip_prefix("::") {
        return use_tree(r, &path, out);
    }
    out.push(path);
    rest
}

/// The modules `file`'s code refers to.
fn references(module: &str, code: &str, modules: &BTreeSet<String>) -> BTreeSet<String> {
    let here: Vec<String> = module
        .split("::")
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    // `self` is the module itself; `super` its parent.
    let parent = here[..here.len().saturating_sub(1)].to_vec();
    // Children declared here: a bare `child::x` path names them.
    let children: Vec<String> = modules
        .iter()
        .filter_map(|m| {
            let segs: Vec<&str> = m.split("::").collect();
            (segs.len() == here.len() + 1
                && segs[..here.len()] == here.iter().map(String::as_str).collect::<Vec<_>>()[..])
                .then(|| segs[here.len()].to_owned())
        })
        .collect();

    let mut paths = Vec::new();
    let bytes = code.as_bytes();
    let mut i = 0;
    while i < code.len() {
        let boundary =
            i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_' || bytes[i - 1] == b':');
        if !boundary {
            i += 1;
            continue;
        }
        let rest = &code[i..];
        let base: Option<(Vec<String>, &str)> = if let Some(r) = rest.strip_prefix("crate::") {
            Some((Vec::new(), r))
        } else if let Some(r) = rest.strip_prefix("super::") {
            Some((parent.clone(), r))
        } else if let Some(r) = rest.strip_prefix("self::") {
            Some((here.clone(), r))
        } else {
            children.iter().find_map(|c| {
                rest.strip_prefix(c.as_str())
                    .and_then(|r| r.strip_prefix("::"))
                    .map(|r| (here.clone(), r))
            })
        };
        match base {
            Some((prefix, r)) => {
                let r = if let Some(r2) = r.strip_prefix("super::") {
                    // super::super::
                    let mut p = prefix.clone();
                    p.pop();
                    let end = use_tree(r2, &p, &mut paths);
                    i = code.len() - end.len();
                    continue;
                } else {
                    r
                };
                let end = use_tree(r, &prefix, &mut paths);
                i = code.len() - end.len();
            }
            None => i += rest.chars().next().map_or(1, char::len_utf8),
        }
    }
    let mut refs = BTreeSet::new();
    for p in paths {
        // The longest prefix of the path that is a module is what it imports; the crate root
        // declares modules and holds nothing the others need.
        let target = (1..=p.len())
            .rev()
            .map(|n| p[..n].join("::"))
            .find(|m| modules.contains(m));
        if let Some(t) = target {
            if t != module {
                refs.insert(t);
            }
        }
    }
    refs
}

/// The strongly connected components of more than one module (Tarjan's algorithm).
fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct State<'a> {
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        found: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on.insert(v);
        for w in s.graph.get(v).into_iter().flatten() {
            let w = w.as_str();
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if s.on.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut comp = Vec::new();
            loop {
                let w = s.stack.pop().unwrap();
                s.on.remove(w);
                comp.push(w.to_owned());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                s.found.push(comp);
            }
        }
    }
    let mut s = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.found
}

/// The import graph of the crate rooted at `root` (its `lib.rs` or `main.rs` folder).
fn import_graph(root: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(root, &mut files);
    let modules: BTreeSet<String> = files.iter().map(|f| module_of(root, f)).collect();
    files
        .iter()
        .map(|f| {
            let m = module_of(root, f);
            let code = code_only(&std::fs::read_to_string(f).unwrap());
            // A file's unit tests, at its end, may use whatever they test with.
            let code = match code.find("#[cfg(test)]\nmod tests") {
                Some(at) => code[..at].to_owned(),
                None => code,
            };
            let refs = references(&m, &code, &modules);
            (m, refs)
        })
        .collect()
}

fn assert_no_circle(root: &Path) {
    let graph = import_graph(root);
    assert!(graph.len() > 5, "found too few modules under {}", root.display());
    let found = circles(&graph);
    assert!(
        found.is_empty(),
        "modules under {} that import one another in a circle: {found:#?}\nedges: {:#?}",
        root.display(),
        found
            .iter()
            .flatten()
            .map(|m| (
                m,
                graph[m]
                    .iter()
                    .filter(|t| found.iter().any(|c| c.contains(t)))
                    .collect::<Vec<_>>()
            ))
            .collect::<Vec<_>>()
    );
}

#[test]
fn library_imports_have_no_circle() {
    assert_no_circle(&common::top().join("src"));
}

#[test]
fn analysis_imports_have_no_circle() {
    assert_no_circle(&common::top().join("analysis/src"));
}

#[test]
fn the_finder_sees_a_circle() {
    // Two modules that name each other, one through a use list and one through a path.
    let modules: BTreeSet<String> = ["", "a", "b", "b::c"].iter().map(|s| s.to_string()).collect();
    let a = references(
        "a",
        &code_only("use crate::{b::c::{self, X}, d};\nfn f() { \"crate::a\"; }"),
        &modules,
    );
    assert_eq!(a, BTreeSet::from(["b::c".to_owned()]));
    let c = references(
        "b::c",
        &code_only("// crate::b\nfn g() { super::super::a::f() }"),
        &modules,
    );
    assert_eq!(c, BTreeSet::from(["a".to_owned()]));
    let graph = BTreeMap::from([("a".to_owned(), a), ("b::c".to_owned(), c)]);
    assert_eq!(circles(&graph), vec![vec!["a".to_owned(), "b::c".to_owned()]]);
}

/// The imports from `source/` and `model/` up into `cli` or `commands`, as `from -> to`.
fn upward_imports(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let under = |m: &str, top: &str| m == top || m.starts_with(&format!("{top}::"));
    graph
        .iter()
        .filter(|(from, _)| under(from, "source") || under(from, "model"))
        .flat_map(|(from, to)| {
            to.iter()
                .filter(|t| under(t, "cli") || under(t, "commands"))
                .map(move |t| format!("{from} -> {t}"))
        })
        .collect()
}

#[test]
fn launcher_sources_and_model_import_nothing_from_the_command_line() {
    let graph = import_graph(&common::top().join("launcher/src"));
    assert!(graph.contains_key("source::image") && graph.contains_key("model::heap"));
    let up = upward_imports(&graph);
    assert!(
        up.is_empty(),
        "source/ and model/ import from cli or commands: {up:#?}"
    );
    // The check sees such an import.
    let modules: BTreeSet<String> = ["", "cli", "model", "model::text"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let refs = references(
        "model::text",
        &code_only("fn f() { crate::cli::show(x) }"),
        &modules,
    );
    let graph = BTreeMap::from([("model::text".to_owned(), refs)]);
    assert_eq!(upward_imports(&graph), vec!["model::text -> cli".to_owned()]);
}

#[test]
fn launcher_imports_have_no_circle() {
    assert_no_circle(&common::top().join("launcher/src"));
}

/// Files allowed over `MAX_FILE_LINES` for now, each with why. Remove a file from here once it
/// is split: the test fails while an exception is no longer needed.
const LONG_FILES: &[(&str, &str)] = &[];

/// Most lines of a file, before its unit tests.
const MAX_FILE_LINES: usize = 800;
/// Most lines of a function, from its `fn` line to its closing brace.
const MAX_FN_LINES: usize = 100;

/// The code of a file before its trailing unit tests, which are not counted.
fn before_tests(code: &str) -> &str {
    [
        "#[cfg(test)]\nmod tests",
        "#[cfg(test)]\npub mod tests",
        "#[cfg(test)]\npub(crate) mod tests",
    ]
    .iter()
    .filter_map(|m| code.rfind(m))
    .min()
    .map_or(code, |at| &code[..at])
}

/// Each function of `code` (comments and literals blanked) with a body: its name, the line its
/// `fn` is on, and how many lines it spans to its closing brace.
fn functions(code: &str) -> Vec<(String, usize, usize)> {
    let b = code.as_bytes();
    let line_of = |at: usize| code[..at].matches('\n').count() + 1;
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(k) = code[from..].find("fn ") {
        let at = from + k;
        from = at + 3;
        if at > 0 && (b[at - 1].is_ascii_alphanumeric() || b[at - 1] == b'_') {
            continue;
        }
        let Some((name, _)) = ident_at(&code[at + 3..]) else {
            continue;
        };
        // The body opens at the first `{` after the signature; a declaration ends at `;` first.
        let Some(open) = code[at..].find(['{', ';']).map(|o| at + o) else {
            continue;
        };
        if b[open] == b';' {
            continue;
        }
        let mut depth = 0;
        let mut close = open;
        for (i, c) in code[open..].bytes().enumerate() {
            match c {
                b'{' => depth += 1,
                b'}' => depth -= 1,
                _ => continue,
            }
            if depth == 0 {
                close = open + i;
                break;
            }
        }
        out.push((name.to_owned(), line_of(at), line_of(close) - line_of(at) + 1));
    }
    out
}

/// What is too long in the crate sources: files over `MAX_FILE_LINES` before their tests, and
/// functions over `MAX_FN_LINES`, as `path: what` lines; and the exceptions no longer needed.
fn too_long() -> (Vec<String>, Vec<String>) {
    let top = common::top();
    let mut files = Vec::new();
    for dir in ["src", "analysis/src", "launcher/src"] {
        rust_files(&top.join(dir), &mut files);
    }
    files.sort();
    assert!(
        files.len() > 50,
        "found too few Rust files under {}",
        top.display()
    );
    let mut long = Vec::new();
    let mut stale = Vec::new();
    for f in &files {
        let rel = f.strip_prefix(top).unwrap().to_string_lossy().into_owned();
        let code = code_only(&std::fs::read_to_string(f).unwrap());
        let lines = before_tests(&code).lines().count();
        let excepted = LONG_FILES.iter().any(|(p, _)| *p == rel);
        if lines > MAX_FILE_LINES && !excepted {
            long.push(format!("{rel}: {lines} lines before its tests"));
        } else if lines <= MAX_FILE_LINES && excepted {
            stale.push(rel.clone());
        }
        for (name, line, n) in functions(&code) {
            if n > MAX_FN_LINES && !excepted {
                long.push(format!("{rel}:{line}: fn {name} is {n} lines"));
            }
        }
    }
    (long, stale)
}

#[test]
fn no_file_or_function_is_too_long() {
    let (long, stale) = too_long();
    assert!(
        long.is_empty(),
        "split these (at most {MAX_FILE_LINES} lines a file, before its unit tests, and \
         {MAX_FN_LINES} a function):\n{}",
        long.join("\n")
    );
    assert!(
        stale.is_empty(),
        "no longer over {MAX_FILE_LINES} lines: take them out of LONG_FILES: {stale:?}"
    );
}

#[test]
fn the_length_check_measures_functions_and_files() {
    let text = "/// fn documented() {\nfn short(x: u8) -> u8 {\n    x\n}\n\
                trait T { fn declared(&self); }\n\
                fn long() -> impl Fn() {\n    let s = \"}\";\n    || {\n        ()\n    }\n}\n\
                #[cfg(test)]\nmod tests {\n    fn in_tests() {}\n}\n";
    let code = code_only(text);
    assert_eq!(
        functions(&code),
        vec![
            ("short".to_owned(), 2, 3),
            ("long".to_owned(), 6, 6),
            ("in_tests".to_owned(), 14, 1)
        ]
    );
    assert_eq!(before_tests(&code).lines().count(), 11);
}
