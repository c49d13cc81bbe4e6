//! Blocks a thread holds only by libdmem's header: between linking a new block and returning its
//! user pointer, an allocation holds the block by its header's address alone (and may be in the
//! backend meanwhile, giving back blocks other threads freed, or waiting on its lock). memcheck,
//! which puts no header in front, sees such a thread hold the block it is allocating; so does
//! this rule. A header's address is libdmem's to hold, never the program's, so only the words of
//! a thread stopped inside a call into libdmem count: its interrupted instruction is libdmem's,
//! or a return address into libdmem lies just above its stack pointer. The exit report and the
//! launcher both apply it to each stopped thread's registers and the stack near its stack
//! pointer.

/// How far above a stopped thread's stack pointer its call into libdmem may keep a header's
/// address: libdmem's frames and the backend's below them.
pub const CALL_SPAN: usize = 16 << 10;

/// The most blocks one thread can be found carrying: the block it links and a few it gives back.
pub const MOST: usize = 8;

/// What one thread carries, found without allocating.
pub struct Carried {
    inside: bool,
    found: [usize; MOST],
    len: usize,
}

impl Carried {
    /// For a thread whose interrupted instruction is libdmem's (`pc_is_own`) or not.
    pub fn new(pc_is_own: bool) -> Carried {
        Carried {
            inside: pc_is_own,
            found: [0; MOST],
            len: 0,
        }
    }

    /// Words of the stack within `CALL_SPAN` of the stack pointer: a return address into
    /// libdmem among them (`own`) puts the thread inside a call.
    pub fn near(&mut self, words: &[usize], own: impl Fn(usize) -> bool) {
        self.inside = self.inside || words.iter().any(|&w| own(w));
    }

    /// Whether the thread is inside a call into libdmem.
    pub fn inside(&self) -> bool {
        self.inside
    }

    /// Takes from the thread's words those that are a live block's header address:
    /// `block_at(a)` says whether a live block starts at `a`.
    pub fn look(&mut self, words: &[usize], header_size: usize, block_at: impl Fn(usize) -> bool) {
        if !self.inside {
            return;
        }
        for &w in words {
            let start = w.wrapping_add(header_size);
            if self.len < MOST && !self.found().contains(&start) && block_at(start) {
                self.found[self.len] = start;
                self.len += 1;
            }
        }
    }

    /// The start pointers of the blocks found.
    pub fn found(&self) -> &[usize] {
        &self.found[..self.len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_addresses_count_only_inside_a_call() {
        let block_at = |a: usize| a == 0x1070 || a == 0x2070;
        let words = [0x1000, 0x1070, 0x2000, 0x2000, 0x3000];
        let mut outside = Carried::new(false);
        outside.near(&[0x10, 0x20], |w| w == 0x7000);
        outside.look(&words, 0x70, block_at);
        assert!(!outside.inside());
        assert_eq!(outside.found(), &[] as &[usize]);

        let mut inside = Carried::new(false);
        inside.near(&[0x10, 0x7000], |w| w == 0x7000);
        inside.look(&words, 0x70, block_at);
        // 0x1000 and 0x2000 are headers' addresses; 0x1070, a block's own start, is left to
        // the ordinary scan; each block is found once.
        assert_eq!(inside.found(), &[0x1070, 0x2070]);
    }
}
