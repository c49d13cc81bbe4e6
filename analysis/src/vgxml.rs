//! The leak report as valgrind's XML output, protocol version 4 (valgrind's
//! `docs/internals/xml-output-protocol4.txt`), the form that CI viewers read: ValgrindCI,
//! Jenkins' Valgrind plugin, valgrind-codequality. Written the same way by the exit report
//! (`report-format=xml`) and by `dmem leaks --format xml`, with memcheck's leak kinds, one
//! `<error>` per listed loss record (one class of one stack), its suppression when asked for,
//! and how often each suppression was used.

use crate::allocfn::{self, Alloc};
use crate::escape::markup;
use crate::frame::Frame;
use crate::reach::Class;
use crate::suppressions::{below_main_cut, Generated, Stack, PLACEHOLDER};
use std::fmt::Write;

/// What valgrind's preamble says of the run.
pub struct Run<'a> {
    pub pid: u32,
    pub ppid: u32,
    /// The program and its arguments.
    pub argv: &'a [String],
    /// The lines of the preamble: what wrote the report.
    pub preamble: &'a [String],
}

/// One loss record.
pub struct Record<'a> {
    pub class: Class,
    pub bytes: u64,
    pub blocks: u64,
    /// Of a definitely lost record: the bytes of the indirectly lost blocks its blocks hold,
    /// which memcheck counts in it too.
    pub indirect: u64,
    pub stack: &'a Stack<'a>,
    /// The allocation function's address here, when the call was read.
    pub alloc_ip: u64,
    pub suppression: Option<&'a Generated>,
}

/// memcheck's `<kind>` of a loss record.
pub fn kind(c: Class) -> &'static str {
    match c {
        Class::DefinitelyLost => "Leak_DefinitelyLost",
        Class::IndirectlyLost => "Leak_IndirectlyLost",
        Class::PossiblyLost => "Leak_PossiblyLost",
        Class::StillReachable => "Leak_StillReachable",
    }
}

/// The whole document: preamble, the loss records, and the suppressions' counts as
/// (name, uses).
pub fn document(run: &Run, records: &[Record], suppcounts: &[(String, u64)]) -> String {
    let mut x = String::new();
    x.push_str("<?xml version=\"1.0\"?>\n\n<valgrindoutput>\n\n");
    x.push_str("<protocolversion>4</protocolversion>\n<protocoltool>memcheck</protocoltool>\n\n");
    x.push_str("<preamble>\n");
    for l in run.preamble {
        let _ = writeln!(x, "  <line>{}</line>", markup(l));
    }
    x.push_str("</preamble>\n\n");
    let _ = write!(
        x,
        "<pid>{}</pid>\n<ppid>{}</ppid>\n<tool>memcheck</tool>\n\n<args>\n  <vargv>\n    <exe>dmem</exe>\n  </vargv>\n  <argv>\n",
        run.pid, run.ppid
    );
    if let Some((exe, args)) = run.argv.split_first() {
        let _ = writeln!(x, "    <exe>{}</exe>", markup(exe));
        for a in args {
            let _ = writeln!(x, "    <arg>{}</arg>", markup(a));
        }
    }
    x.push_str("  </argv>\n</args>\n\n");
    for state in ["RUNNING", "FINISHED"] {
        let _ = write!(
            x,
            "<status>\n  <state>{state}</state>\n  <time>00:00:00:00.000 </time>\n</status>\n\n"
        );
    }
    for (i, r) in records.iter().enumerate() {
        error(&mut x, i, records.len(), r);
    }
    x.push_str("<errorcounts>\n</errorcounts>\n\n<suppcounts>\n");
    for (name, count) in suppcounts {
        let _ = write!(
            x,
            "  <pair>\n    <count>{count}</count>\n    <name>{}</name>\n  </pair>\n",
            markup(name)
        );
    }
    x.push_str("</suppcounts>\n\n</valgrindoutput>\n\n");
    x
}

fn error(x: &mut String, i: usize, n: usize, r: &Record) {
    let _ = write!(
        x,
        "<error>\n  <unique>{:#x}</unique>\n  <tid>1</tid>\n  <kind>{}</kind>\n  <xwhat>\n    <text>{} bytes in {} blocks are {} in loss record {} of {n}</text>\n    <leakedbytes>{}</leakedbytes>\n    <leakedblocks>{}</leakedblocks>\n  </xwhat>\n  <stack>\n",
        i,
        kind(r.class),
        match r.indirect {
            0 => r.bytes.to_string(),
            ind => format!("{} ({} direct, {ind} indirect)", r.bytes + ind, r.bytes),
        },
        r.blocks,
        r.class.name(),
        i + 1,
        r.bytes + r.indirect,
        r.blocks
    );
    let alloc_obj = r.stack.alloc_object.map(|p| p.to_string_lossy().into_owned());
    let alloc_names: Vec<Option<&str>> = match r.stack.alloc {
        Alloc::Frames(names) => names.iter().map(|&n| Some(n)).collect(),
        Alloc::OneOf { names, .. } if names.len() <= 2 => vec![Some(names[0])],
        Alloc::OneOf { .. } => vec![None],
    };
    for name in alloc_names {
        x.push_str("    <frame>\n");
        let _ = writeln!(x, "      <ip>{:#X}</ip>", r.alloc_ip);
        if let Some(o) = &alloc_obj {
            let _ = writeln!(x, "      <obj>{}</obj>", markup(o));
        }
        if let Some(n) = name {
            let _ = writeln!(x, "      <fn>{}</fn>", markup(allocfn::demangled(n)));
        }
        x.push_str("    </frame>\n");
    }
    // As valgrind's stacks, down to main.
    for f in &r.stack.frames[..below_main_cut(r.stack.frames)] {
        frame(x, f);
    }
    x.push_str("  </stack>\n");
    if let Some(g) = r.suppression {
        let _ = write!(
            x,
            "  <suppression>\n    <sname>{PLACEHOLDER}</sname>\n    <skind>{}</skind>\n    <skaux>{}</skaux>\n",
            g.kind,
            markup(&g.aux)
        );
        for l in &g.lines {
            let (tag, v) = l.split_once(':').unwrap_or(("obj", "*"));
            let _ = writeln!(x, "    <sframe> <{tag}>{}</{tag}> </sframe>", markup(v));
        }
        // CDATA cannot hold "]]>": split it between two sections, as the protocol says.
        // Nor can it hold the characters XML 1.0 forbids: they are shown escaped.
        let raw = g.shown().replace("]]>", "]]]]><![CDATA[>");
        let _ = write!(
            x,
            "    <rawtext>\n<![CDATA[\n{raw}]]>\n    </rawtext>\n  </suppression>\n"
        );
    }
    x.push_str("</error>\n\n");
}

fn frame(x: &mut String, f: &Frame) {
    x.push_str("    <frame>\n");
    let _ = writeln!(x, "      <ip>{:#X}</ip>", f.pc);
    if let Some(o) = &f.object {
        let _ = writeln!(x, "      <obj>{}</obj>", markup(&o.to_string_lossy()));
    }
    if let Some(name) = &f.function {
        // valgrind's name for the frames that run `main`, as its XML writes them.
        let below = f.valgrind_name() == "(below main)";
        let _ = writeln!(
            x,
            "      <fn>{}</fn>",
            markup(if below { "(below main)" } else { name })
        );
    }
    if let Some((dir, file)) = f.file_parts() {
        if let Some(d) = dir {
            let _ = writeln!(x, "      <dir>{}</dir>", markup(d));
        }
        let _ = writeln!(x, "      <file>{}</file>", markup(file));
        if let Some(l) = f.line {
            let _ = writeln!(x, "      <line>{l}</line>");
        }
    }
    x.push_str("    </frame>\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;
    use std::rc::Rc;

    #[test]
    fn cpp_names_are_escaped_and_cdata_kept_whole() {
        assert_eq!(
            markup("std::map<int, A&>\u{1}"),
            "std::map&lt;int, A&amp;&gt;\\x01"
        );
        let mut f = Frame::bare(0x1234, Some(Rc::from(Path::new("/a/b&c"))));
        f.function = Some("void f<int>(A&)".into());
        f.symbol = Some("_Z1fIiEvR1A".into());
        f.file = Some("/src/x.cpp".into());
        f.line = Some(3);
        let frames = [f];
        let stack = Stack {
            alloc: Alloc::of(Some("_Znwm")),
            alloc_object: Some(Path::new("/lib/libdmem.so")),
            frames: &frames,
            truncated: false,
        };
        let g = Generated::new(&stack, Class::DefinitelyLost);
        let r = Record {
            class: Class::DefinitelyLost,
            bytes: 16,
            blocks: 2,
            indirect: 8,
            stack: &stack,
            alloc_ip: 0x77,
            suppression: Some(&g),
        };
        let run = Run {
            pid: 5,
            ppid: 1,
            argv: &["./a".into(), "x<y".into()],
            preamble: &["dmem".into()],
        };
        let doc = document(&run, &[r], &[("mine".into(), 3)]);
        assert!(doc.contains("<fn>void f&lt;int&gt;(A&amp;)</fn>"), "{doc}");
        assert!(doc.contains("<fn>operator new(unsigned long)</fn>"), "{doc}");
        assert!(doc.contains("<obj>/a/b&amp;c</obj>") && doc.contains("<arg>x&lt;y</arg>"));
        assert!(doc.contains("<dir>/src</dir>\n      <file>x.cpp</file>\n      <line>3</line>"));
        assert!(doc
            .contains("<sframe> <fun>_Znwm</fun> </sframe>\n    <sframe> <fun>_Z1fIiEvR1A</fun> </sframe>"));
        assert!(
            doc.contains("<kind>Leak_DefinitelyLost</kind>") && doc.contains("<leakedbytes>24</leakedbytes>")
        );
        assert!(doc.contains(
            "<text>24 (16 direct, 8 indirect) bytes in 2 blocks are definitely lost in loss record 1 of 1</text>"
        ));
        assert!(doc.contains("<pair>\n    <count>3</count>\n    <name>mine</name>"));
    }

    /// Whether `c` may appear in an XML 1.0 document.
    fn xml_char(c: char) -> bool {
        matches!(c, '\t' | '\n' | '\r' | '\u{20}'..='\u{d7ff}' | '\u{e000}'..='\u{fffd}' | '\u{10000}'..)
    }

    #[test]
    fn any_bytes_in_any_name_give_well_formed_xml() {
        // Seeded random names of every byte value, in every place a name goes, the generated
        // suppression included: no character XML forbids comes out, markup characters come out
        // only as markup, and each CDATA section is closed once.
        let mut seed = 0x853c49e6748fea9bu64;
        let mut byte = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed as u8
        };
        for _ in 0..500 {
            let mut name = || {
                let n = byte() % 24;
                let b: Vec<u8> = (0..n).map(|_| byte()).collect();
                String::from_utf8_lossy(&b).into_owned() + "\u{ffff}]]>"
            };
            let mut f = Frame::bare(0x1234, Some(Rc::from(Path::new(&name()))));
            f.function = Some(name());
            f.symbol = Some(name());
            f.file = Some(format!("/{}/{}", name(), name()));
            f.line = Some(3);
            let mut g = f.clone();
            g.symbol = None;
            let frames = [f, g];
            let stack = Stack {
                alloc: Alloc::of(Some("malloc")),
                alloc_object: Some(Path::new("/lib/libdmem.so")),
                frames: &frames,
                truncated: false,
            };
            let gen = Generated::new(&stack, Class::PossiblyLost);
            let r = Record {
                class: Class::PossiblyLost,
                bytes: 1,
                blocks: 1,
                indirect: 0,
                stack: &stack,
                alloc_ip: 0,
                suppression: Some(&gen),
            };
            let argv = [name(), name()];
            let pre = [name()];
            let run = Run {
                pid: 1,
                ppid: 1,
                argv: &argv,
                preamble: &pre,
            };
            let doc = document(&run, &[r], &[(name(), 1)]);
            assert!(doc.chars().all(xml_char), "{doc:?}");
            // Outside CDATA, every '<' opens a tag dmem wrote and every '&' an entity.
            let outside: String = doc
                .split("<![CDATA[")
                .enumerate()
                .map(|(i, part)| {
                    if i == 0 {
                        part.to_owned()
                    } else {
                        let (inside, after) = part.split_once("]]>").expect("CDATA closed");
                        assert!(!inside.contains("]]>"));
                        after.to_owned()
                    }
                })
                .collect();
            for (at, _) in outside.match_indices('&') {
                let rest = &outside[at..];
                assert!(
                    ["&amp;", "&lt;", "&gt;", "&quot;", "&#39;"]
                        .iter()
                        .any(|e| rest.starts_with(e)),
                    "{rest:.20}"
                );
            }
            for (at, _) in outside.match_indices('<') {
                let tag = outside[at + 1..].split(['>', ' ']).next().unwrap();
                assert!(
                    tag.trim_start_matches(['/', '?'])
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_'),
                    "{tag:?}"
                );
            }
        }
    }
}
