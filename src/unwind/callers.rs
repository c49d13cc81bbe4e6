//! A caller's frame as the platform unwinder restores it: where its stack pointer was when it
//! made the call, and its callee-saved registers, for the exit report and the core's reader to
//! start the scan of the exiting thread at the program's own frame.
//!
//! Only the exit path asks, once per process, so this uses `_Unwind_Backtrace` (libgcc's, which
//! every Rust library links already) rather than the cached walker: that walker keeps only the
//! return addresses, and the registers a frame saved are what is wanted here.

/// The callee-saved registers of the x86-64 ABI, in this order: rbx, rbp, r12, r13, r14, r15.
pub const SAVED: usize = 6;

/// Their DWARF register numbers.
#[cfg(target_arch = "x86_64")]
const SAVED_DWARF: [i32; SAVED] = [3, 6, 12, 13, 14, 15];

/// A frame of the program: the stack pointer it had when it called, and its callee-saved
/// registers.
#[derive(Clone, Copy, Debug, Default)]
pub struct Frame {
    pub sp: usize,
    pub regs: [usize; SAVED],
}

/// The frame whose stack pointer is `sp`, or when `past` is not 0, the frame that many above
/// it; with `through` not 0, the frame just below the one returned must be of the function at
/// `through`. Its stack pointer and its callee-saved registers as the unwind tables restore
/// them; None when the unwinder cannot get there, or the frames are not those. The caller must
/// be inside libdmem's reentrancy guard: the unwinder may allocate on first use.
#[cfg(target_arch = "x86_64")]
pub fn above(sp: usize, past: usize, through: usize) -> Option<Frame> {
    use core::ffi::{c_int, c_void};

    #[repr(C)]
    struct Context {
        _opaque: [u8; 0],
    }
    // libgcc's unwinder interface (the Itanium C++ ABI's level 1, plus libgcc's GetCFA and
    // FindEnclosingFunction). In the callback for a frame, GetCFA gives the canonical frame
    // address of the frame it called: this frame's stack pointer at that call.
    unsafe extern "C" {
        fn _Unwind_Backtrace(
            trace: extern "C" fn(*mut Context, *mut c_void) -> c_int,
            arg: *mut c_void,
        ) -> c_int;
        fn _Unwind_GetCFA(ctx: *mut Context) -> usize;
        fn _Unwind_GetIP(ctx: *mut Context) -> usize;
        fn _Unwind_GetGR(ctx: *mut Context, index: c_int) -> usize;
        fn _Unwind_FindEnclosingFunction(pc: *mut c_void) -> *mut c_void;
    }
    const CONTINUE: c_int = 0;
    const STOP: c_int = 4;

    struct Walk {
        sp: usize,
        past: usize,
        through: usize,
        /// Frames above the one whose stack pointer is `sp`; None until it is reached.
        depth: Option<usize>,
        found: Option<Frame>,
    }

    extern "C" fn visit(ctx: *mut Context, arg: *mut c_void) -> c_int {
        // SAFETY: `arg` is the `Walk` passed below, alive for the whole backtrace, and `ctx` is
        // the unwinder's context for this frame, valid during the callback. The unwinder's
        // initial frame saves every callee-saved register (`__builtin_unwind_init`), so each of
        // them has a location in every frame above it and GetGR may read them.
        unsafe {
            let w = &mut *(arg as *mut Walk);
            let here = _Unwind_GetCFA(ctx);
            let depth = match w.depth {
                Some(d) => d + 1,
                None if here == w.sp => 0,
                // Frames lie above one another: past `sp`, the frame was missed.
                None if here > w.sp => return STOP,
                None => return CONTINUE,
            };
            w.depth = Some(depth);
            if depth == w.past {
                let mut regs = [0usize; SAVED];
                for (r, &n) in regs.iter_mut().zip(&SAVED_DWARF) {
                    *r = _Unwind_GetGR(ctx, n);
                }
                w.found = Some(Frame { sp: here, regs });
                return STOP;
            }
            if depth + 1 == w.past && w.through != 0 {
                // A return address lies just past its call, which may be the function's last
                // instruction: look up the byte before it.
                let pc = _Unwind_GetIP(ctx).wrapping_sub(1);
                if _Unwind_FindEnclosingFunction(pc as *mut c_void) as usize != w.through {
                    return STOP;
                }
            }
            CONTINUE
        }
    }

    let mut walk = Walk {
        sp,
        past,
        through,
        depth: None,
        found: None,
    };
    // SAFETY: `visit` has the callback's type and only touches `walk` through `arg`.
    unsafe { _Unwind_Backtrace(visit, (&mut walk as *mut Walk).cast()) };
    walk.found
}

#[cfg(not(target_arch = "x86_64"))]
pub fn above(_sp: usize, _past: usize, _through: usize) -> Option<Frame> {
    None
}
