//! The names a function's address has in its object's symbol tables, and the one valgrind shows.
//!
//! glibc gives most of its functions several symbols at one address (`__gconv_open`,
//! `__GI___gconv_open`; `__libc_start_main_impl`, `__libc_start_main@@GLIBC_2.34`), and which
//! of them a symboliser reports is its own choice. valgrind reads `.symtab` (the object's, or
//! its detached debug file's) and `.dynsym`, merges the function symbols that cover the same
//! address range into one, and shows the name it prefers: the shortest once a `@VERSION` is
//! left out, a versioned one over an unversioned one of that length, else the first in byte
//! order. Its suppressions are matched against, and generated with, that name alone.
//!
//! So a frame here is shown by the name valgrind prefers, matches a `fun:` line by any name its
//! address has (whatever the symboliser chose, and whatever valgrind prefers), and a generated
//! suppression names it as valgrind does. A table is built by `symbolize::Debug` from the
//! symbols of the very files it names frames from (the mapped object, or the copy of its build
//! a core's reader found by `--sysroot`, build id or debuginfod, and its debug file), in the
//! same pass that reads their sizes; never on the allocation path.

use std::collections::HashMap;
use std::sync::Arc;

/// One object's functions that have more than one name: each such name to all the names of its
/// address, valgrind's preferred one first. A name that stands alone is not kept (it is its own
/// and only name), nor one that names functions at different addresses (a `static` function
/// of two files), which could not tell which it is.
#[derive(Default)]
pub struct Table {
    by_name: HashMap<String, Arc<[String]>>,
}

impl Table {
    /// The table of the symbols given as (address, size, name) of function symbols: valgrind
    /// reads functions and indirect functions of any binding, of non-zero size, from `.symtab`
    /// and `.dynsym`.
    pub fn new(mut syms: Vec<(u64, u64, String)>) -> Table {
        syms.sort();
        syms.dedup();
        let mut count: HashMap<&str, usize> = HashMap::new();
        for (_, _, n) in &syms {
            *count.entry(n.as_str()).or_default() += 1;
        }
        let mut by_name = HashMap::new();
        let mut i = 0;
        while i < syms.len() {
            let mut j = i + 1;
            while j < syms.len() && (syms[j].0, syms[j].1) == (syms[i].0, syms[i].1) {
                j += 1;
            }
            if j - i > 1 {
                let mut names: Vec<String> = syms[i..j].iter().map(|s| s.2.clone()).collect();
                names.sort_by(|a, b| order(a, b));
                let names: Arc<[String]> = names.into();
                for n in names.iter() {
                    if count.get(n.as_str()) == Some(&1) {
                        by_name.insert(n.clone(), names.clone());
                    }
                }
            }
            i = j;
        }
        Table { by_name }
    }

    /// Every name of the function named `name`, valgrind's first; None when it has no other.
    pub fn names(&self, name: &str) -> Option<Arc<[String]>> {
        self.by_name.get(name).cloned()
    }
}

/// valgrind's order of preference among a function's names (`preferName` in its
/// `m_debuginfo/storage.c`, read, not copied): the shortest without its version, then a
/// versioned one, then byte order.
fn order(a: &str, b: &str) -> std::cmp::Ordering {
    let unversioned = |s: &str| s.find('@').unwrap_or(s.len());
    unversioned(a)
        .cmp(&unversioned(b))
        .then_with(|| b.contains('@').cmp(&a.contains('@')))
        .then_with(|| a.cmp(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(syms: &[(u64, u64, &str)]) -> Table {
        Table::new(syms.iter().map(|&(a, s, n)| (a, s, n.to_owned())).collect())
    }

    #[test]
    fn valgrind_prefers_the_shortest_then_versioned_then_first() {
        let t = table(&[
            (0x27900, 787, "__GI___gconv_open"),
            (0x27900, 787, "__gconv_open"),
            (0x27280, 321, "__libc_start_main_impl"),
            (0x27280, 321, "__libc_start_main_alias_1"),
            (0x27280, 321, "__libc_start_main@GLIBC_2.2.5"),
            (0x27280, 321, "__libc_start_main@@GLIBC_2.34"),
            (0x100, 8, "alone"),
            (0x200, 8, "twice"),
            (0x300, 8, "twice"),
            (0x300, 8, "other"),
        ]);
        let names = t.names("__GI___gconv_open").unwrap();
        assert_eq!(&names[..], ["__gconv_open", "__GI___gconv_open"]);
        assert_eq!(t.names("__gconv_open").unwrap()[0], "__gconv_open");
        assert_eq!(
            t.names("__libc_start_main_impl").unwrap()[0],
            "__libc_start_main@@GLIBC_2.34"
        );
        assert!(t.names("alone").is_none());
        // A name at two addresses says nothing; the other name of one of them still does.
        assert!(t.names("twice").is_none());
        assert_eq!(&t.names("other").unwrap()[..], ["other", "twice"]);
    }

    #[test]
    fn same_length_versioned_first() {
        assert_eq!(order("foo@V1", "foo"), std::cmp::Ordering::Less);
        assert_eq!(order("ab", "b"), std::cmp::Ordering::Greater);
        assert_eq!(order("a", "b"), std::cmp::Ordering::Less);
    }
}
