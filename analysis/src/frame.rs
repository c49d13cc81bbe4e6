//! A symbolised frame: the one record both sides build, the library from the `backtrace` crate
//! at exit (`src/frames.rs`) and the launcher from `addr2line` (`model/symbolize.rs`), and the
//! one that suppressions are matched against and valgrind's XML is written from.

use std::borrow::Cow;
use std::path::Path;
use std::rc::Rc;
use std::sync::Arc;

/// One frame of a symbolised stack. An address inside inlined code gives several frames with
/// the same `pc`: the inlined functions innermost first, then the function they were inlined
/// into.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    pub pc: u64,
    /// Demangled.
    pub function: Option<String>,
    /// The name as valgrind matches `fun:` lines against it and writes it into the suppressions
    /// it generates: a function's symbol, mangled; an inlined function's name as the debug info
    /// gives it (DW_AT_name: unqualified, no parameters). See `valgrind_name`.
    pub symbol: Option<String>,
    /// How far `pc` lies into the function's symbol, when the symbol table knows it; with no
    /// function, how far into its object's file (a file of another build than the one mapped,
    /// whose names would be wrong).
    pub offset: Option<u64>,
    /// The source file as the debug info names it, with its directory when it has one.
    pub file: Option<String>,
    pub line: Option<u32>,
    /// The mapped file `pc` is in.
    pub object: Option<Rc<Path>>,
    /// This frame was inlined into the next one.
    pub inlined: bool,
    /// Every name the function's address has in its object's symbol tables, valgrind's
    /// preferred one first, when it has more than one (`aliases`); set where the frame was
    /// named, from the files it was named from.
    pub names: Option<Arc<[String]>>,
}

impl Frame {
    /// The frame as one line, the one way both sides write a frame (the exit report after its
    /// `#N 0xPC`, the launcher on a line of its own): `function+0x1a (file.c:12) in
    /// libfoo.so`, the file without its directory, an inlined function marked `[inlined]` and
    /// without an offset (which belongs to the function it was inlined into), an address
    /// nothing names as itself.
    pub fn text(&self) -> String {
        let mut s = match &self.function {
            Some(name) => match self.offset {
                Some(o) if !self.inlined => format!("{name}+{o:#x}"),
                _ => name.clone(),
            },
            None => match (self.offset, self.object.as_deref().and_then(Path::file_name)) {
                // `file+offset`: the object's name says where, so it is not repeated.
                (Some(o), Some(name)) => return format!("{}+{o:#x}", name.to_string_lossy()),
                _ => format!("{:#x}", self.pc),
            },
        };
        if let Some(file) = &self.file {
            let file = Path::new(file)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| file.clone());
            match self.line {
                Some(l) => s.push_str(&format!(" ({file}:{l})")),
                None => s.push_str(&format!(" ({file})")),
            }
        }
        if self.inlined {
            s.push_str(" [inlined]");
        }
        if let Some(name) = self.object.as_deref().and_then(Path::file_name) {
            s.push_str(&format!(" in {}", name.to_string_lossy()));
        }
        s
    }

    pub fn bare(pc: u64, object: Option<Rc<Path>>) -> Frame {
        Frame {
            pc,
            function: None,
            symbol: None,
            offset: None,
            file: None,
            line: None,
            object,
            inlined: false,
            names: None,
        }
    }

    /// The name valgrind shows for this frame, `???` when nothing names it: of a function's names
    /// in its object's symbol tables the one valgrind prefers (`aliases`), whichever the
    /// symboliser gave; and the frames glibc runs `main` from as `(below main)`, as valgrind
    /// renames them.
    pub fn valgrind_name(&self) -> Cow<'_, str> {
        let Some(symbol) = self.symbol.as_deref() else {
            return Cow::Borrowed("???");
        };
        if self.inlined {
            return Cow::Borrowed(symbol);
        }
        match self.aliases() {
            Some(names) if is_below_main(&names[0]) => Cow::Borrowed("(below main)"),
            Some(names) => Cow::Owned(names[0].clone()),
            None if is_below_main(symbol) => Cow::Borrowed("(below main)"),
            None => Cow::Borrowed(symbol),
        }
    }

    /// Every name a `fun:` line may match this frame by: its function's names in the object's
    /// symbol tables (valgrind's first), or the one name it has; and `(below main)` for the
    /// frames under `main`.
    pub fn valgrind_names(&self) -> Vec<String> {
        let Some(symbol) = self.symbol.as_deref() else {
            return vec!["???".to_owned()];
        };
        if self.inlined {
            return vec![symbol.to_owned()];
        }
        let below = |name: &str| is_below_main(name).then(|| "(below main)".to_owned());
        match self.aliases() {
            Some(names) => below(&names[0])
                .into_iter()
                .chain(names.iter().cloned())
                .collect(),
            None => below(symbol).into_iter().chain([symbol.to_owned()]).collect(),
        }
    }

    /// The names of this frame's function in its object's symbol tables, when it has several.
    fn aliases(&self) -> Option<Arc<[String]>> {
        self.names.clone()
    }

    /// The source file without its directory, and the directory, as valgrind's XML splits them.
    pub fn file_parts(&self) -> Option<(Option<&str>, &str)> {
        let file = self.file.as_deref()?;
        Some(match file.rfind('/') {
            Some(i) if i > 0 => (Some(&file[..i]), &file[i + 1..]),
            Some(_) => (Some("/"), &file[1..]),
            None => (None, file),
        })
    }
}

/// Whether valgrind counts a function of this name as one of those that run `main`
/// (`get_fnname_kind` in its `m_debuginfo/debuginfo.c`, for glibc on Linux), with glibc 2.34's
/// `__libc_start_main_impl` too, which is what a symboliser may call the function valgrind names
/// `__libc_start_main@@GLIBC_2.34`, when the object's other names cannot be read.
fn is_below_main(name: &str) -> bool {
    matches!(
        name,
        "__libc_start_main"
            | "__libc_start_call_main"
            | "generic_start_main"
            | "_start"
            | "__libc_start_main_impl"
    ) || name.starts_with("__libc_start_main.")
        || name.starts_with("generic_start_main.")
}

/// The name valgrind gives an inlined function: its DW_AT_name, which is the demangled name
/// without its scope or parameters (`std::vector<int>::push_back(int const&)` is
/// `push_back`, `Box<T>::make()` is `make`, a function template keeps its arguments:
/// `max<int>`). `demangled_no_params` is the name demangled without parameters.
pub fn inlined_name(demangled_no_params: &str) -> &str {
    // The last `::` outside template brackets and parentheses starts the unqualified name.
    let bytes = demangled_no_params.as_bytes();
    let (mut depth, mut start) = (0i32, 0usize);
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'<' | b'(' => depth += 1,
            b'>' | b')' => depth -= 1,
            b':' if depth == 0 && bytes.get(i + 1) == Some(&b':') => {
                start = i + 2;
                i += 1;
            }
            _ => {}
        }
        i += 1;
    }
    &demangled_no_params[start..]
}

/// An inlined function's name as valgrind gives it from the name the debug info links it by:
/// a mangled C++ name demangled without its parameters and scope (`inlined_name`), any other
/// name as it is. `cpp_demangle` is linked by both sides already (the library through
/// `backtrace`).
pub fn inlined_symbol(raw: &str) -> String {
    if !raw.starts_with("_Z") {
        return raw.to_owned();
    }
    let opts = cpp_demangle::DemangleOptions::new().no_params().no_return_type();
    match cpp_demangle::Symbol::new(raw).map(|s| s.demangle_with_options(&opts)) {
        Ok(Ok(d)) => inlined_name(&d).to_owned(),
        _ => raw.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inlined_names_are_unqualified() {
        assert_eq!(inlined_name("inl"), "inl");
        assert_eq!(inlined_name("Box<std::vector<int> >::make"), "make");
        assert_eq!(inlined_name("std::max<ns::A<1>::B>"), "max<ns::A<1>::B>");
        assert_eq!(inlined_name("ns::W::W"), "W");
        assert_eq!(inlined_name("(anonymous namespace)::helper"), "helper");
        assert_eq!(inlined_symbol("_ZN3BoxIiE4makeEv"), "make");
        assert_eq!(inlined_symbol("inl"), "inl");
    }

    #[test]
    fn below_main_and_file_parts() {
        let mut f = Frame::bare(1, None);
        assert_eq!(f.valgrind_name(), "???");
        f.symbol = Some("__libc_start_call_main".into());
        assert_eq!(f.valgrind_name(), "(below main)");
        f.file = Some("/src/a/b.c".into());
        assert_eq!(f.file_parts(), Some((Some("/src/a"), "b.c")));
        f.file = Some("b.c".into());
        assert_eq!(f.file_parts(), Some((None, "b.c")));
    }
}
