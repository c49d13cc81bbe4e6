//! The process's mappings as the analysis sees them, and the one reader of a `/proc/PID/maps`
//! line for the library's report and the launcher alike (the library's allocation-free search
//! for one address, `procmaps.rs`, streams the same lines on its own).

/// A mapping as the rule sees it.
#[derive(Clone, Copy, Debug)]
pub struct Mapping {
    pub start: usize,
    pub end: usize,
    pub readable: bool,
    pub writable: bool,
    /// A region of the kernel's or the main thread's stack (`[vvar]`, `[stack]`, ...), or
    /// glibc's brk heap `[heap]` (which holds blocks and glibc's free chunks).
    pub special: bool,
    /// Backed by a file (a program or library's segments), and executable: what memcheck's
    /// test of a vtable asks (see `reach::is_vtable`).
    pub file: bool,
    pub executable: bool,
}

impl Mapping {
    /// Whether `next` continues this mapping: it starts where this one ends, with the same
    /// permissions.
    pub fn continued_by(&self, next: &Mapping) -> bool {
        next.start == self.end
            && (next.readable, next.writable, next.executable)
                == (self.readable, self.writable, self.executable)
    }
}

/// The mapping of `maps` (sorted by address) that holds `addr`.
pub fn find(maps: &[Mapping], addr: usize) -> Option<Mapping> {
    let i = maps.partition_point(|m| m.start <= addr);
    i.checked_sub(1).map(|i| maps[i]).filter(|m| addr < m.end)
}

/// `maps` (sorted) as ranges: adjacent mappings with the same permissions merged into one. The
/// kernel keeps neighbouring mappings apart for reasons of its own (a forked child's brk heap
/// grows as a second `[heap]` mapping beside the first, since the two no longer share their
/// anonymous memory's owner), so whether memory can be read, and how far a region reaches, is
/// always asked of a range, never of one mapping. A range is special if a part of it is, and
/// file-backed only if all of it is.
pub fn ranges(maps: &[Mapping]) -> Vec<Mapping> {
    let mut out: Vec<Mapping> = Vec::with_capacity(maps.len());
    for m in maps {
        match out.last_mut() {
            Some(r) if r.continued_by(m) => {
                r.end = m.end;
                r.special |= m.special;
                r.file &= m.file;
            }
            _ => out.push(*m),
        }
    }
    out
}

/// The range of `maps` (sorted; see `ranges`) that holds `addr`, without allocating.
pub fn range_of(maps: &[Mapping], addr: usize) -> Option<(usize, usize)> {
    let i = maps.partition_point(|m| m.start <= addr).checked_sub(1)?;
    if addr >= maps[i].end {
        return None;
    }
    let (mut lo, mut hi) = (i, i);
    while lo > 0 && maps[lo - 1].continued_by(&maps[lo]) {
        lo -= 1;
    }
    while hi + 1 < maps.len() && maps[hi].continued_by(&maps[hi + 1]) {
        hi += 1;
    }
    Some((maps[lo].start, maps[hi].end))
}

/// Whether `[start, end)` lies in one readable range of `maps` (sorted), without allocating:
/// a header that straddles two mappings of one range reads like any other.
pub fn readable(maps: &[Mapping], start: usize, end: usize) -> bool {
    match range_of(maps, start) {
        Some((_, hi)) => find(maps, start).is_some_and(|m| m.readable) && end <= hi,
        None => false,
    }
}

/// One line of `/proc/PID/maps`: `start-end perms offset dev inode   path`, the path absent for
/// anonymous memory and in brackets for the kernel's named regions (`[heap]`, `[stack]`,
/// `[vdso]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MapsLine<'a> {
    pub start: usize,
    pub end: usize,
    pub readable: bool,
    pub writable: bool,
    pub executable: bool,
    /// Offset in the file of the byte mapped at `start`.
    pub offset: u64,
    /// As the kernel wrote it: empty, a file's path (perhaps ending in ` (deleted)`) or a
    /// bracketed name.
    pub path: &'a str,
}

impl MapsLine<'_> {
    pub fn parse(line: &str) -> Option<MapsLine<'_>> {
        let mut f = line.splitn(6, ' ');
        let (range, perms, offset) = (f.next()?, f.next()?, f.next()?);
        let (_dev, _inode) = (f.next()?, f.next()?);
        let path = f.next().map(str::trim_start).unwrap_or("");
        let (start, end) = range.split_once('-')?;
        let perms = perms.as_bytes();
        Some(MapsLine {
            start: usize::from_str_radix(start, 16).ok()?,
            end: usize::from_str_radix(end, 16).ok()?,
            readable: perms.first() == Some(&b'r'),
            writable: perms.get(1) == Some(&b'w'),
            executable: perms.get(2) == Some(&b'x'),
            offset: u64::from_str_radix(offset, 16).ok()?,
            path,
        })
    }

    /// A region of the kernel's or a stack, named in brackets.
    pub fn special(&self) -> bool {
        self.path.starts_with('[')
    }

    /// The mapping as the rule of roots sees it.
    pub fn region(&self) -> Mapping {
        Mapping {
            start: self.start,
            end: self.end,
            readable: self.readable,
            writable: self.writable,
            special: self.special(),
            file: self.path.starts_with('/'),
            executable: self.executable,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_every_kind_of_line() {
        let file =
            MapsLine::parse("7f00a000-7f00c000 r-xp 00002000 08:01 1234   /usr/lib/libc.so.6").unwrap();
        assert_eq!(
            (file.start, file.end, file.offset),
            (0x7f00a000, 0x7f00c000, 0x2000)
        );
        assert!(file.readable && !file.writable && file.executable);
        assert_eq!(file.path, "/usr/lib/libc.so.6");
        assert!(file.region().file && !file.region().special);
        let heap = MapsLine::parse("5600-5700 rw-p 00000000 00:00 0   [heap]").unwrap();
        assert!(heap.special() && heap.writable && !heap.region().file);
        let anon = MapsLine::parse("6000-7000 ---p 00000000 00:00 0").unwrap();
        assert_eq!(anon.path, "");
        assert!(!anon.readable && !anon.region().special);
        assert_eq!(MapsLine::parse("garbage"), None);
    }

    fn m(start: usize, end: usize, perms: &str, special: bool) -> Mapping {
        let p = perms.as_bytes();
        Mapping {
            start,
            end,
            readable: p[0] == b'r',
            writable: p[1] == b'w',
            executable: p[2] == b'x',
            special,
            file: false,
        }
    }

    #[test]
    fn adjacent_mappings_with_the_same_permissions_are_one_range() {
        // A forked child's brk heap, grown as a second mapping, then a read-only page, a gap,
        // and a writable mapping.
        let maps = [
            m(0x1000, 0x3000, "rw-", true),
            m(0x3000, 0x5000, "rw-", true),
            m(0x5000, 0x6000, "r--", false),
            m(0x8000, 0x9000, "rw-", false),
        ];
        let r = ranges(&maps);
        assert_eq!(
            r.iter().map(|r| (r.start, r.end)).collect::<Vec<_>>(),
            vec![(0x1000, 0x5000), (0x5000, 0x6000), (0x8000, 0x9000)]
        );
        assert!(r[0].special && !r[2].special);
        assert_eq!(range_of(&maps, 0x3800), Some((0x1000, 0x5000)));
        assert_eq!(range_of(&maps, 0x7000), None);
        // A header across the boundary of the two heap mappings reads.
        assert!(readable(&maps, 0x2fc0, 0x3030));
        // Not across a change of permissions, a gap or past the end.
        assert!(!readable(&maps, 0x4fc0, 0x5030));
        assert!(readable(&maps, 0x5000, 0x5070));
        assert!(!readable(&maps, 0x5fc0, 0x6030));
        assert!(!readable(&maps, 0x8ff0, 0x9060));
        assert!(!readable(&[m(0x1000, 0x2000, "---", false)], 0x1000, 0x1070));
    }
}
