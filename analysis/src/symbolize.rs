//! Naming a return address from the object file it is in: the one way both sides name frames,
//! the exit report in the process and the launcher from a core or a running process. The object's
//! DWARF gives the inlined functions innermost first and the function they were inlined into, with
//! files and lines; its symbol table gives the function's symbol (mangled, as valgrind's `fun:`
//! lines name it) and the offset into it. Both are read through the gimli project's `addr2line`,
//! which demangles a name by the language the DWARF says it is in: a C function called `f` stays
//! `f` (a C++ demangler asked blindly would read it as the type `float`).
//!
//! What differs between the sides is only how they find the file (the process's own mapped files,
//! or the copy of a core's build) and where it was loaded; both then give this module the
//! object's files and the address to look up.

use crate::aliases::Table;
use crate::blockfile::BlockFile;
use crate::frame::{inlined_symbol, Frame};
use std::path::{Path, PathBuf};
use std::rc::Rc;

/// One object file opened for naming: its own symbols and, where there is DWARF, lines; and the
/// detached debug file found for it when it has no DWARF of its own.
pub struct Debug {
    own: Option<addr2line::Loader>,
    debug: Option<addr2line::Loader>,
    /// The functions and objects of both files' symbol tables that have a size, as (address,
    /// size), sorted.
    sized: Vec<(u64, u64)>,
    /// The functions of both files' symbol tables that have several names, each with valgrind's
    /// preferred one.
    names: Table,
}

impl Debug {
    /// Opens `file` (when there is a copy of the object) and, when it has no DWARF of its own,
    /// the debug file `detached` names. None when neither opens.
    pub fn open(file: Option<&Path>, detached: impl FnOnce() -> Option<PathBuf>) -> Option<Debug> {
        let own = file.and_then(|f| addr2line::Loader::new(f).ok());
        let has_lines = own
            .as_ref()
            .is_some_and(|l| l.get_section_range(b".debug_info").is_some());
        let detached = if has_lines { None } else { detached() };
        let debug = detached.as_deref().and_then(|p| addr2line::Loader::new(p).ok());
        if own.is_none() && debug.is_none() {
            return None;
        }
        let mut sized = Vec::new();
        let mut functions = Vec::new();
        for f in [file, detached.as_deref()].into_iter().flatten() {
            sized_symbols(f, &mut sized, &mut functions);
        }
        sized.sort_unstable();
        sized.dedup();
        let names = Table::new(functions);
        Some(Debug {
            own,
            debug,
            sized,
            names,
        })
    }

    /// Whether a function or object of the symbol tables starts at `addr` and covers `probe`.
    /// A label without a size (`_dl_start_user` in the loader) names no address, as for
    /// valgrind, which shows `???` there.
    fn covers(&self, addr: u64, probe: u64) -> bool {
        let from = self.sized.partition_point(|&(a, _)| a < addr);
        self.sized[from..]
            .iter()
            .take_while(|&&(a, _)| a == addr)
            .any(|&(a, size)| probe < a + size)
    }

    /// The frames of return address `pc`, whose call instruction is at link-time address
    /// `probe` (the return address moved back into the call and less the load bias), in the
    /// object `object`: the inlined functions innermost first, then the function they were
    /// inlined into; one frame with what the symbol table says when there is no DWARF.
    pub fn frames(&self, pc: u64, probe: u64, object: Option<Rc<Path>>) -> Vec<Frame> {
        let symbol = self
            .own
            .as_ref()
            .and_then(|l| l.find_symbol_info(probe))
            .or_else(|| self.debug.as_ref().and_then(|l| l.find_symbol_info(probe)))
            .filter(|sym| self.covers(sym.address(), probe));
        let mut out = Vec::new();
        for loader in [self.debug.as_ref(), self.own.as_ref()].into_iter().flatten() {
            let Ok(mut it) = loader.find_frames(probe) else {
                continue;
            };
            while let Ok(Some(f)) = it.next() {
                let mut fr = Frame::bare(pc, object.clone());
                fr.function = f
                    .function
                    .as_ref()
                    .and_then(|n| n.demangle().ok())
                    .map(|n| n.into_owned());
                // valgrind names an inlined function by its DWARF name, unqualified; the
                // outermost frame keeps the raw name until the symbol table's replaces it.
                fr.symbol = f
                    .function
                    .as_ref()
                    .and_then(|n| n.raw_name().ok())
                    .map(|raw| raw.into_owned());
                if let Some(loc) = f.location {
                    fr.file = loc.file.map(str::to_owned);
                    fr.line = loc.line;
                }
                fr.inlined = true;
                out.push(fr);
            }
            if !out.is_empty() {
                break;
            }
        }
        let n = out.len();
        for f in out.iter_mut().take(n.saturating_sub(1)) {
            f.symbol = f.symbol.as_deref().map(inlined_symbol);
        }
        if let Some(last) = out.last_mut() {
            // Only the outermost frame is a real function with a symbol.
            last.inlined = false;
            if let Some(sym) = &symbol {
                last.offset = Some(probe + 1 - sym.address());
                if last.function.is_none() {
                    last.function = Some(demangle(sym.name()));
                }
                // A function by its symbol, mangled, as valgrind names it.
                last.symbol = Some(sym.name().to_owned());
                self.name_as_valgrind(last);
            }
        } else {
            let mut fr = Frame::bare(pc, object);
            if let Some(sym) = symbol {
                fr.function = Some(demangle(sym.name()));
                fr.symbol = Some(sym.name().to_owned());
                fr.offset = Some(probe + 1 - sym.address());
                self.name_as_valgrind(&mut fr);
            }
            out.push(fr);
        }
        out
    }

    /// Gives a function's frame (not an inlined one) all the names its symbol's address has and
    /// valgrind's name to show, whichever the symbol table lookup or the DWARF chose
    /// (`__GI___strdup`, `__strdup` for `strdup`). The offset stays right: every name of the
    /// group starts at the same address.
    fn name_as_valgrind(&self, f: &mut Frame) {
        f.names = f.symbol.as_deref().and_then(|s| self.names.names(s));
        if let Some(names) = &f.names {
            f.function = Some(demangle(&names[0]));
        }
    }
}

/// A symbol table's name as people read it: C++ and Rust names demangled, C++'s special names
/// in gdb's and c++filt's words (`vtable for A`, where `cpp_demangle` writes `{vtable(A)}`), any
/// other as it is. Only a mangled name is given to the demanglers: the C++ one reads any other
/// as a type, so that a C function `f` would come out as `float`.
pub fn demangle(name: &str) -> String {
    for (prefix, words) in [
        ("_ZTV", "vtable for "),
        ("_ZTI", "typeinfo for "),
        ("_ZTS", "typeinfo name for "),
    ] {
        if let Some(rest) = name.strip_prefix(prefix) {
            let inner = demangle(&format!("_Z{rest}"));
            if !inner.starts_with("_Z") {
                return format!("{words}{inner}");
            }
        }
    }
    if name.starts_with("_Z") || name.starts_with("_R") {
        addr2line::demangle_auto(name.into(), None).into_owned()
    } else {
        name.to_owned()
    }
}

/// Where a distribution's debug package puts the detached debug file of build `id` (hex), under
/// `root` (`/` for this machine's): `usr/lib/debug/.build-id/xx/yyyy.debug`, if it is there.
pub fn in_debug_tree(root: &Path, id: &str) -> Option<PathBuf> {
    if id.len() <= 2 {
        return None;
    }
    let p = root.join(format!("usr/lib/debug/.build-id/{}/{}.debug", &id[..2], &id[2..]));
    p.is_file().then_some(p)
}

/// Adds the (address, size) of every function and object with a size in the symbol tables of the
/// ELF file at `path` to `out`, and the (address, size, name) of every defined function with a
/// size to `functions` (the symbols valgrind merges into one function, `aliases`).
fn sized_symbols(path: &Path, out: &mut Vec<(u64, u64)>, functions: &mut Vec<(u64, u64, String)>) {
    use object::{Object, ObjectSymbol, SymbolKind};
    let Ok(file) = std::fs::File::open(path).and_then(BlockFile::new) else {
        return;
    };
    let cache = object::read::ReadCache::new(file);
    let Ok(elf) = object::File::parse(&cache) else {
        return;
    };
    for s in elf.symbols().chain(elf.dynamic_symbols()) {
        if matches!(s.kind(), SymbolKind::Text | SymbolKind::Data) && s.size() > 0 {
            out.push((s.address(), s.size()));
        }
        if s.kind() == SymbolKind::Text && s.size() > 0 && s.is_definition() {
            match s.name() {
                Ok(name) if !name.is_empty() => functions.push((s.address(), s.size(), name.to_owned())),
                _ => {}
            }
        }
    }
}

/// The build id (hex) of the ELF file at `path`, if it has one.
pub fn build_id(path: &Path) -> Option<String> {
    use object::Object;
    let file = std::fs::File::open(path).and_then(BlockFile::new).ok()?;
    let cache = object::read::ReadCache::new(file);
    let elf = object::File::parse(&cache).ok()?;
    let id = elf.build_id().ok()??;
    Some(id.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// glibc's strdup has three names at one address and its DWARF calls it `__GI___strdup`:
    /// the frame is shown as valgrind shows it, and carries every name for suppressions.
    #[test]
    fn a_glibc_alias_is_shown_by_valgrinds_name() {
        let libc = Path::new("/usr/lib/x86_64-linux-gnu/libc.so.6");
        let detached = || in_debug_tree(Path::new("/"), &build_id(libc)?);
        let Some(d) = Debug::open(Some(libc), detached).filter(|_| libc.is_file()) else {
            return;
        };
        let addr = {
            use object::{Object, ObjectSymbol};
            let data = std::fs::read(libc).unwrap();
            let elf = object::File::parse(&*data).unwrap();
            let sym = elf.dynamic_symbols().find(|s| s.name() == Ok("__strdup"));
            sym.expect("libc's __strdup").address()
        };
        let f = d.frames(0x1000, addr + 4, None).pop().unwrap();
        assert_eq!(f.function.as_deref(), Some("strdup"), "{f:?}");
        let names = f.names.expect("strdup's names");
        assert_eq!(names[0], "strdup");
        assert!(names.iter().any(|n| n == "__strdup"), "{names:?}");
    }

    #[test]
    fn a_c_name_is_not_read_as_a_cpp_type() {
        assert_eq!(demangle("f"), "f");
        assert_eq!(demangle("_Z1fv"), "f()");
        assert_eq!(in_debug_tree(Path::new("/nonexistent"), "ab"), None);
    }

    #[test]
    fn vtable_symbols_name_their_type() {
        assert_eq!(demangle("_ZTV4Base"), "vtable for Base");
        assert_eq!(demangle("_ZN2ns3funEv"), "ns::fun()");
        assert_eq!(demangle("_ZTVN2ns7DerivedE"), "vtable for ns::Derived");
        assert_eq!(demangle("_ZTI4Base"), "typeinfo for Base");
        assert_eq!(demangle("_ZTS4Base"), "typeinfo name for Base");
        assert_eq!(demangle("_ZTVXX"), "_ZTVXX");
    }
}
