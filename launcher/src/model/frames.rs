//! Frames as every command writes them: as text (`Frame::text`, the one style the exit report
//! writes too), escaped, and as JSON; a stack's lines, and its folded form.

use crate::model::symbolize::{Frame, Symbolizer};
use serde::{Deserialize, Serialize};

/// A frame as one line of text (`Frame::text`); names read from an image are shown escaped.
pub fn text(f: &Frame) -> String {
    crate::analysis::escape::escaped(f.text().as_bytes())
}

/// A frame as every JSON document of dmem writes it (the analysis commands, snapshots, `top`,
/// `diff`, the timeline): every part, `null` where unknown, and the text line. Snapshots written
/// before the one shape lack `offset` and `text` and carry `inlined` only when true, so reading
/// takes those as absent.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct JsonFrame {
    pub pc: String,
    pub function: Option<String>,
    #[serde(default)]
    pub offset: Option<u64>,
    pub file: Option<String>,
    pub line: Option<u32>,
    pub object: Option<String>,
    #[serde(default)]
    pub inlined: bool,
    #[serde(default)]
    pub text: String,
}

pub fn json(f: &Frame) -> JsonFrame {
    JsonFrame {
        pc: format!("{:#x}", f.pc),
        function: f.function.clone(),
        offset: f.offset,
        file: f.file.clone(),
        line: f.line,
        object: f.object.as_deref().map(|p| p.to_string_lossy().into_owned()),
        inlined: f.inlined,
        text: text(f),
    }
}

/// Names the return addresses of one image, each once.
pub struct Namer {
    pub sym: Symbolizer,
}

impl Namer {
    pub fn new(sym: Symbolizer) -> Namer {
        Namer { sym }
    }

    /// The frames of a stack, inlined ones too, innermost first.
    pub fn frames(&mut self, pcs: &[u64]) -> Vec<Frame> {
        pcs.iter().flat_map(|&pc| self.sym.frames(pc).to_vec()).collect()
    }

    /// The stack's lines, each indented by `indent`; one line saying so for no stack at all.
    pub fn lines(&mut self, pcs: &[u64], indent: &str) -> Vec<String> {
        if pcs.is_empty() {
            return vec![format!("{indent}(no stack recorded)")];
        }
        self.frames(pcs)
            .iter()
            .map(|f| format!("{indent}{}", text(f)))
            .collect()
    }

    pub fn json(&mut self, pcs: &[u64]) -> Vec<JsonFrame> {
        self.frames(pcs).iter().map(json).collect()
    }

    /// Whether a line of the stack matches `re` (the `--match` filter).
    pub fn matches(&mut self, pcs: &[u64], re: &regex_lite::Regex) -> bool {
        self.frames(pcs).iter().any(|f| re.is_match(&text(f)))
    }

    /// The stack for folded output (`folded_key`), each frame its function or its address.
    pub fn folded(&mut self, pcs: &[u64]) -> String {
        let frames = self.frames(pcs);
        folded_key(
            frames
                .iter()
                .rev()
                .map(|f| f.function.clone().unwrap_or_else(|| format!("{:#x}", f.pc))),
        )
    }
}

/// A stack as folded output names it, outermost first: `main;make_list;malloc_wrapper`, with
/// `;` taken out of names; `[no stack]` for none.
pub fn folded_key(outermost_first: impl IntoIterator<Item = String>) -> String {
    let names: Vec<String> = outermost_first
        .into_iter()
        .map(|n| n.replace(';', ":").replace('\n', " "))
        .collect();
    if names.is_empty() {
        return "[no stack]".to_owned();
    }
    names.join(";")
}

/// Folded stacks, `outer;...;inner VALUE` per line sorted by stack, as flame-graph tools read
/// them: the one writer of `dmem folded`, `dmem snapshot --format folded` and the flame graphs.
#[derive(Default)]
pub struct Folded(std::collections::BTreeMap<String, i64>);

impl Folded {
    /// Adds `value` to the stack `key` (from `folded_key`).
    pub fn add(&mut self, key: String, value: i64) {
        *self.0.entry(key).or_default() += value;
    }

    /// How many distinct stacks, and the sum of their values.
    pub fn counts(&self) -> (usize, i64) {
        (self.0.len(), self.0.values().sum())
    }

    pub fn text(&self) -> String {
        self.0.iter().map(|(k, v)| format!("{k} {v}\n")).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;
    use std::rc::Rc;

    #[test]
    fn a_frame_reads_as_one_line_with_what_is_known() {
        let mut f = Frame::bare(0x1234, Some(Rc::from(Path::new("/usr/lib/libfoo.so"))));
        assert_eq!(text(&f), "0x1234 in libfoo.so");
        let mut elsewhere = f.clone();
        elsewhere.offset = Some(0x1159);
        assert_eq!(text(&elsewhere), "libfoo.so+0x1159");
        f.function = Some("make".into());
        f.offset = Some(0x1a);
        f.file = Some("/src/dir/foo.c".into());
        f.line = Some(12);
        assert_eq!(text(&f), "make+0x1a (foo.c:12) in libfoo.so");
        f.inlined = true;
        assert_eq!(text(&f), "make (foo.c:12) [inlined] in libfoo.so");
        let j = json(&f);
        assert_eq!((j.pc.as_str(), j.line, j.inlined), ("0x1234", Some(12), true));
    }
}
