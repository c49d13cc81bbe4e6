//! What a walk finds: the live blocks and their stacks, how each list was read, the problems
//! met on the way, and the options a walk takes.

use super::layout::Counters;

/// One live block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block {
    /// The address the program was given.
    pub addr: u64,
    pub size: u64,
    pub tid: u32,
    /// Index into `Walk::stacks`.
    pub stack: u32,
    /// The list the block was found on, and the one its header names: they differ only in a
    /// corrupt heap, which a strict walk keeps and `dmem verify` reports.
    pub list: u16,
    pub named_list: u16,
    /// log2 of the alignment asked for; 0 for an ordinary block.
    pub align_log2: u8,
}

/// Something wrong found in the lists: which list, which header (or list), and what.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Problem {
    pub list: Option<u64>,
    pub addr: Option<u64>,
    pub text: String,
    /// The header a write must have changed, when one can be named: the readers name the
    /// block in front of it, whose end an overflow runs past.
    pub header: Option<u64>,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.list {
            Some(i) => write!(f, "list {i}: {}", self.text),
            None => write!(f, "lists: {}", self.text),
        }
    }
}

/// How one list was read.
#[derive(Clone, Debug, Default)]
pub struct ListRead {
    /// Where the list is.
    pub addr: u64,
    /// The list's counters as read in the last attempt.
    pub counters: Counters,
    /// Attempts made (1 when the first was whole).
    pub attempts: u32,
    /// Whether an attempt saw the list whole: the same even sequence value before and after,
    /// and every header sound. A version 1 descriptor has no counter, so only the headers
    /// decide.
    pub consistent: bool,
    /// Blocks read in the last attempt.
    pub blocks: u64,
    /// What ended the last attempt early, if something did.
    pub problem: Option<Problem>,
    /// The image was taken while a change of the list was under way (its sequence counter is
    /// odd in a core): its counters may be a block apart from its links.
    pub mid_change: bool,
    /// The sequence value the list held throughout the attempt kept, if it held one.
    pub seq: Option<u64>,
}

/// Everything one walk found.
#[derive(Debug, Default)]
pub struct Walk {
    /// Sorted by address.
    pub blocks: Vec<Block>,
    /// Distinct stacks, each its return addresses innermost first, without trailing zeros.
    pub stacks: Vec<Box<[u64]>>,
    pub lists: Vec<ListRead>,
    /// The sum of the lists' counters (each from the attempt whose blocks were kept).
    pub counters: Counters,
    /// Sound headers whose size cannot be believed (their blocks are left out of `blocks`),
    /// and lists read whole whose blocks do not add up to their counters.
    pub size_problems: Vec<Problem>,
}

impl Walk {
    /// Lists that no attempt saw whole, broken or moving.
    #[cfg(test)]
    pub fn inconsistent(&self) -> usize {
        self.lists.iter().filter(|l| !l.consistent).count()
    }

    pub fn moving(&self) -> usize {
        moving(&self.lists)
    }

    pub fn problems(&self) -> Vec<&Problem> {
        problems(&self.lists, &self.size_problems)
    }

    pub fn live_bytes(&self) -> u64 {
        self.blocks.iter().map(|b| b.size).sum()
    }
}

/// Lists a running process changed throughout the walk: not broken, but never read whole.
pub fn moving(lists: &[ListRead]) -> usize {
    lists
        .iter()
        .filter(|l| !l.consistent && l.problem.is_none())
        .count()
}

/// Everything wrong that a walk met: where lists broke, then sizes not believed.
pub fn problems<'a>(lists: &'a [ListRead], size_problems: &'a [Problem]) -> Vec<&'a Problem> {
    lists
        .iter()
        .filter_map(|l| l.problem.as_ref())
        .chain(size_problems)
        .collect()
}

#[derive(Clone, Copy, Debug)]
pub struct WalkOptions {
    /// Attempts per list before it counts as inconsistent.
    pub attempts: u32,
    /// Memory that cannot change while it is read (a core, a stopped process): one attempt per
    /// list, and a header whose back link does not name the header before it ends the list as
    /// a problem, instead of being taken for a list that moved under the walk.
    pub strict: bool,
}

impl Default for WalkOptions {
    fn default() -> Self {
        WalkOptions {
            attempts: 4,
            strict: false,
        }
    }
}

impl WalkOptions {
    /// For memory that does not change while it is read.
    pub fn still() -> WalkOptions {
        WalkOptions {
            attempts: 1,
            strict: true,
        }
    }
}

/// Fatal: the walk cannot go on at all (permission refused, the process gone).
#[derive(Debug)]
pub struct Denied(pub std::io::Error);
