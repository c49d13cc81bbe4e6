//! Which block sizes can be believed, for the exit report and the launcher alike.
//!
//! A block's size is a word of its header, and a program that writes out of bounds (an
//! underflow of the block, an overflow of the one in front) can leave any number there while
//! the header's links and magic still hold. A reader that believed it would scan, copy or add
//! up memory that is no block's: a crash in the exit report, a launcher that reads terabytes.
//! So a size is believed only where the block ends before the next block's header and inside
//! the mapped memory its header lies in (mappings that follow one another count as one, whatever
//! their protection: a program may make a page of its own block unreadable, and the block is
//! still its block); every read of a block's bytes stays within what this module let through,
//! and skips what cannot be read.

/// Why a block's size is not believed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Misfit {
    /// The block would run past the header of the next block, which starts here.
    NextHeader(usize),
    /// It would run past the end of the mapped memory around its header, which is here
    /// (0: the header lies in no mapped memory known).
    Memory(usize),
    /// Its end lies beyond the address space.
    Overflow,
}

/// Checks the sizes of `n` blocks sorted by start: `block(i)` is block i's start and size, its
/// header the `header` bytes before the start. `region(addr)`, when given, is the
/// mapping that holds `addr`, if any (without it, only the next header bounds a block). Calls
/// `bad(i, why)` for every block whose size is not believed. Blocks at the same start (one
/// block met twice) are not each other's next.
pub fn check_sizes(
    n: usize,
    header: usize,
    block: &dyn Fn(usize) -> (usize, usize),
    mut region: Option<&mut dyn FnMut(usize) -> Option<(usize, usize)>>,
    bad: &mut dyn FnMut(usize, Misfit),
) {
    // The run of adjacent readable mappings the last header was in.
    let mut run: Option<(usize, usize)> = None;
    let mut next = 0;
    for i in 0..n {
        let (start, size) = block(i);
        let Some(end) = start.checked_add(size) else {
            bad(i, Misfit::Overflow);
            continue;
        };
        if next <= i {
            next = i + 1;
        }
        while next < n && block(next).0 == start {
            next += 1;
        }
        if next < n {
            let next_header = block(next).0.wrapping_sub(header);
            if end > next_header {
                bad(i, Misfit::NextHeader(next_header));
                continue;
            }
        }
        let Some(region) = region.as_mut() else {
            continue;
        };
        let at = start.wrapping_sub(header);
        let (lo, mut hi) = match run {
            Some((lo, hi)) if lo <= at && at < hi => (lo, hi),
            _ => match region(at) {
                Some(r) => r,
                None => {
                    run = None;
                    bad(i, Misfit::Memory(0));
                    continue;
                }
            },
        };
        // Extended only as far as a block needs: the mappings of a heap are few, and a block
        // that runs past them all stops the extension at the first gap.
        while end > hi {
            match region(hi) {
                Some((s, e)) if s == hi && e > hi => hi = e,
                _ => break,
            }
        }
        run = Some((lo, hi));
        if end > hi {
            bad(i, Misfit::Memory(hi));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_size_must_end_before_the_next_header_and_inside_its_memory() {
        // Headers of 16 bytes; two readable mappings side by side, then a gap.
        let blocks = [
            (0x1010, 16),
            (0x1030, 0x48),
            (0x1080, 0x1000),
            (0x1080, 8),
            (0x3010, 0x10),
        ];
        let maps = [(0x1000, 0x2000), (0x2000, 0x2100), (0x3000, 0x3020)];
        let mut region = |a: usize| maps.iter().copied().find(|&(s, e)| s <= a && a < e);
        let mut got = Vec::new();
        check_sizes(
            blocks.len(),
            16,
            &|i| blocks[i],
            Some(&mut region),
            &mut |i, why| got.push((i, why)),
        );
        // 0x1030 + 0x48 runs past the header of 0x1080 at 0x1070; 0x1080 + 0x1000 fits the
        // two adjacent mappings up to 0x2100 but not 0x2080 + 8: it ends at 0x2080, inside.
        assert_eq!(got, [(1, Misfit::NextHeader(0x1070))]);
        let blocks = [(0x1010, 0x1100), (0x3010, usize::MAX)];
        let mut got = Vec::new();
        check_sizes(2, 16, &|i| blocks[i], Some(&mut region), &mut |i, w| {
            got.push((i, w))
        });
        assert_eq!(got, [(0, Misfit::Memory(0x2100)), (1, Misfit::Overflow)]);
        let mut got = Vec::new();
        check_sizes(2, 16, &|i| blocks[i], None, &mut |i, w| got.push((i, w)));
        assert_eq!(
            got,
            [(1, Misfit::Overflow)],
            "no regions: only the next header bounds it"
        );
    }
}
