//! A block's stack as suppressions see it: the allocation function and where it lives, and
//! the return addresses, named only as far as matching asks (`Frames`).

use crate::allocfn::Alloc;
use crate::frame::Frame;
use std::path::Path;

/// A block's stack as suppressions see it.
pub struct Stack<'a> {
    /// The allocation function the program called.
    pub alloc: Alloc,
    /// The object that holds the allocation function here (libdmem.so).
    pub alloc_object: Option<&'a Path>,
    /// The recorded frames, symbolised, inlined ones expanded, innermost first.
    pub frames: &'a [Frame],
    /// The recorded stack filled every slot, so it may have been cut. Matching does not use
    /// it: as in valgrind, a suppression that needs frames past those recorded does not match.
    pub truncated: bool,
}

/// A recorded stack made ready for suppressions and valgrind's XML, owned: what each side
/// builds once per stack.
pub struct Recorded {
    pub frames: Vec<Frame>,
    pub alloc: Alloc,
    /// The allocation function's address, 0 when the call was not read.
    pub alloc_ip: u64,
    pub alloc_object: Option<std::rc::Rc<Path>>,
    pub truncated: bool,
}

impl Recorded {
    pub fn stack(&self) -> Stack<'_> {
        Stack {
            alloc: self.alloc,
            alloc_object: self.alloc_object.as_deref(),
            frames: &self.frames,
            truncated: self.truncated,
        }
    }
}

/// What suppressions know of a stack before any of its return addresses is named: the
/// allocation function, where it lives, and whether the stack may have been cut.
#[derive(Clone, Copy)]
pub struct Head<'a> {
    pub alloc: Alloc,
    pub alloc_object: Option<&'a Path>,
    pub truncated: bool,
}

impl<'a> Head<'a> {
    pub fn of(stack: &Stack<'a>) -> Head<'a> {
        Head {
            alloc: stack.alloc,
            alloc_object: stack.alloc_object,
            truncated: stack.truncated,
        }
    }
}

/// A stack's return addresses, innermost first, named only when matching asks: an object's
/// path costs a lookup in the table of loaded objects, while a return address's frames may need
/// that object's debug info read (and decompressed) whole. Matching asks for as little as the
/// answer needs.
pub trait Frames {
    /// How many return addresses the stack has.
    fn len(&self) -> usize;
    /// Whether the stack has no return address.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The object return address `i` is in: the `object` of each of its frames.
    fn object(&mut self, i: usize) -> Option<&Path>;
    /// The frames of return address `i`: the inlined functions innermost first, then the
    /// function they were inlined into.
    fn frames(&mut self, i: usize) -> &[Frame];
}

/// A stack named already (the launcher's, or one the report lists), cut into its return
/// addresses: each one's frames end with the one that was not inlined.
pub struct Named<'a> {
    frames: &'a [Frame],
    ends: Vec<usize>,
}

impl<'a> Named<'a> {
    pub fn new(frames: &'a [Frame]) -> Named<'a> {
        let mut ends: Vec<usize> = (0..frames.len())
            .filter(|&i| !frames[i].inlined)
            .map(|i| i + 1)
            .collect();
        if ends.last().copied().unwrap_or(0) < frames.len() {
            ends.push(frames.len());
        }
        Named { frames, ends }
    }

    fn range(&self, i: usize) -> std::ops::Range<usize> {
        (if i == 0 { 0 } else { self.ends[i - 1] })..self.ends[i]
    }
}

impl Frames for Named<'_> {
    fn len(&self) -> usize {
        self.ends.len()
    }

    fn object(&mut self, i: usize) -> Option<&Path> {
        self.frames[self.range(i).start].object.as_deref()
    }

    fn frames(&mut self, i: usize) -> &[Frame] {
        &self.frames[self.range(i)]
    }
}
