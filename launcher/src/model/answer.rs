//! How an analysis command's answer is shown. Each command computes a typed answer, a
//! `Serialize` type of its own module; this one place adds the envelope every JSON document
//! carries (`format`, the version of the documents' shape, and `command`) and renders the
//! answer as JSON or as text, the warnings of reading the image first, or, for the answers that
//! have one, as valgrind's XML.

use crate::model::frames::JsonFrame;
use crate::model::text::dump;
use serde::Serialize;

/// The version of the JSON documents' shape.
pub const FORMAT: u32 = 1;

/// A command's answer: its JSON is its fields, its text the lines it writes.
pub trait Answer: Serialize {
    /// The command, as the JSON envelope names it.
    const COMMAND: &'static str;
    /// The answer as lines of text.
    fn lines(&self) -> Vec<String>;
}

/// An answer that valgrind's XML can carry too (`dmem leaks --format xml`, what CI tools read).
pub trait Xml: Answer {
    /// The whole document, the warnings in its preamble.
    fn xml(&self, warnings: Vec<String>) -> String;
}

/// How an answer is shown.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Form {
    Text,
    Json,
    Xml,
}

#[derive(Serialize)]
struct Envelope<'a, T> {
    format: u32,
    command: &'static str,
    #[serde(flatten)]
    answer: &'a T,
}

/// The answer as one JSON document, or as text after the warnings (asked for only then: they
/// name stacks, which takes symbolising).
pub fn render<T: Answer>(answer: &T, json: bool, warnings: impl FnOnce() -> Vec<String>) -> String {
    if json {
        return dump(&Envelope {
            format: FORMAT,
            command: T::COMMAND,
            answer,
        });
    }
    let mut out = warnings();
    out.extend(answer.lines());
    lines(out)
}

/// The answer in the form asked for.
pub fn render_in<T: Xml>(answer: &T, form: Form, warnings: impl FnOnce() -> Vec<String>) -> String {
    match form {
        Form::Xml => answer.xml(warnings()),
        _ => render(answer, form == Form::Json, warnings),
    }
}

/// Lines joined, with a newline after the last.
pub fn lines(out: Vec<String>) -> String {
    let mut s = out.join("\n");
    if !s.is_empty() {
        s.push('\n');
    }
    s
}

/// The lines of a symbolised stack, each indented; one line saying so for no stack at all.
pub fn stack_lines(frames: &[JsonFrame], indent: &str) -> Vec<String> {
    if frames.is_empty() {
        return vec![format!("{indent}(no stack recorded)")];
    }
    frames.iter().map(|f| format!("{indent}{}", f.text)).collect()
}
