//! valgrind's suppression for a stack and class, as `--gen-suppressions` writes it.

use super::file::kind_word;
use super::stack::Stack;
use crate::frame::Frame;
use crate::reach::Class;

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
