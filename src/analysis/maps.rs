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

/// The mapping of `maps` (sorted by address) that holds `addr`.
pub fn find(maps: &[Mapping], addr: usize) -> Option<Mapping> {
    let i = maps.partition_point(|m| m.start <= addr);
    i.checked_sub(1).map(|i| maps[i]).filter(|m| addr < m.end)
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
}
