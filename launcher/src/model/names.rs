//! Naming addresses of data, and finding vtables, from the loaded objects' symbol tables:
//! `held in .bss of leak_list`, `vtable for A + 16 in .data.rel.ro of prog`, as `dmem why` and
//! `dmem words` name a word, and the C++ type of a block whose first word points into a vtable.

use crate::analysis::symbolize::demangle;
use crate::model::roots::Loaded;
use crate::source::elf::{self, Symbol};

/// One object's symbols, moved to where the object was loaded.
struct Table {
    lib: String,
    lo: u64,
    hi: u64,
    syms: Vec<Symbol>,
}

/// Every loaded object's symbols, read when first asked for.
pub struct Names {
    tables: Vec<Table>,
}

impl Names {
    pub fn new(objects: &[Loaded]) -> Names {
        let tables = objects
            .iter()
            .map(|o| {
                let syms: Vec<Symbol> = o
                    .file
                    .as_deref()
                    .map(elf::symbols)
                    .unwrap_or_default()
                    .into_iter()
                    .map(|s| Symbol {
                        addr: o.bias.wrapping_add(s.addr),
                        ..s
                    })
                    .collect();
                let lo = o
                    .elf
                    .loads
                    .iter()
                    .map(|s| o.bias.wrapping_add(s.vaddr))
                    .min()
                    .unwrap_or(0);
                let hi = o
                    .elf
                    .loads
                    .iter()
                    .map(|s| o.bias.wrapping_add(s.vaddr + s.memsz))
                    .max()
                    .unwrap_or(0);
                Table {
                    lib: o.name.clone(),
                    lo,
                    hi,
                    syms,
                }
            })
            .collect();
        Names { tables }
    }

    /// `name + off in SECTION of LIB` for the symbol holding `addr`, as gdb's `info symbol`
    /// words it.
    pub fn name(&self, addr: u64) -> Option<String> {
        let t = self.tables.iter().find(|t| t.lo <= addr && addr < t.hi)?;
        let i = t.syms.partition_point(|s| s.addr <= addr).checked_sub(1)?;
        // The nearest symbol at or below, that covers the address (a symbol without a size
        // covers what follows it up to the next one).
        let s = t.syms[..=i]
            .iter()
            .rev()
            .take_while(|s| s.addr == t.syms[i].addr)
            .find(|s| s.size == 0 || addr < s.addr + s.size)?;
        let name = demangle(&s.name);
        let off = addr - s.addr;
        let name = if off == 0 { name } else { format!("{name} + {off}") };
        let text = format!("{name} in {} of {}", s.section, t.lib);
        Some(crate::analysis::escape::escaped(text.as_bytes()))
    }

    /// Every `vtable for X` symbol (`_ZTV...`), by address.
    pub fn vtables(&self) -> Vtables {
        let mut rows: Vec<(u64, u64, String)> = self
            .tables
            .iter()
            .flat_map(|t| t.syms.iter())
            .filter(|s| s.name.starts_with("_ZTV"))
            // A vtable symbol without a size still covers its first entries.
            .map(|s| {
                (
                    s.addr,
                    s.addr + if s.size == 0 { 24 } else { s.size },
                    s.name.clone(),
                )
            })
            .collect();
        rows.sort();
        rows.dedup_by(|a, b| a.0 == b.0);
        Vtables { rows }
    }
}

/// The vtables of an image.
pub struct Vtables {
    /// (start, end, mangled symbol), sorted.
    rows: Vec<(u64, u64, String)>,
}

impl Vtables {
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// The vtable `value` points into, by number.
    pub fn lookup(&self, value: u64) -> Option<usize> {
        let k = self.rows.partition_point(|r| r.0 <= value).checked_sub(1)?;
        (value < self.rows[k].1).then_some(k)
    }

    /// The type vtable `k` belongs to: `A` for `vtable for A` (`_ZTV1A`).
    pub fn type_name(&self, k: usize) -> String {
        let mangled = &self.rows[k].2;
        let d = demangle(mangled);
        let name = d.strip_prefix("vtable for ").unwrap_or(mangled);
        crate::analysis::escape::escaped(name.as_bytes())
    }

    /// The type of a mangled vtable symbol a user named, if there is such a vtable.
    pub fn type_of_symbol(&self, symbol: &str) -> Option<String> {
        self.rows
            .iter()
            .position(|r| r.2 == symbol)
            .map(|k| self.type_name(k))
    }
}
