//! The leak report printed at exit (`leak-report`).
//!
//! Roots are what LeakSanitizer uses at exit: the writable segments and thread-local blocks of
//! every loaded object except libdmem itself (whose list heads point at every block), and the
//! exiting thread's stack from its current stack pointer up. The live blocks are copied out of
//! the lists under their locks, classified by `reach`, grouped by allocation stack and
//! symbolised in-process with the `backtrace` crate. Everything here runs once, at exit, so it
//! may allocate (on libdmem's own heap).

use crate::diag::Out;
use crate::header::{self, Header, NFRAMES};
use crate::lists::{self, LISTS};
use crate::reach::{self, Blocks, Class};
use crate::{options, thread, unwind};
use core::fmt::Write;
use std::collections::HashMap;

struct Live {
    start: usize,
    size: usize,
    frames: [usize; NFRAMES],
}

/// Copies every live block out of the lists. Holding all locks makes the copy consistent even
/// if other threads still allocate during exit.
fn snapshot() -> Vec<Live> {
    let mut out = Vec::new();
    lists::lock_all();
    for list in LISTS.iter() {
        // SAFETY: we hold every list lock, so heads and links are stable and every header on a
        // list is a valid live header.
        let mut h = unsafe { *list.head.get() };
        while !h.is_null() {
            // SAFETY: as above.
            let hr: &Header = unsafe { &*h };
            out.push(Live {
                start: header::to_user(h) as usize,
                size: hr.size(),
                frames: hr.frames,
            });
            h = hr.next;
        }
    }
    lists::unlock_all();
    out.sort_unstable_by_key(|b| b.start);
    out
}

/// The address ranges that count as roots.
fn roots() -> Vec<(usize, usize)> {
    let mut roots: Vec<(usize, usize)> = Vec::new();
    unsafe extern "C" fn visit(
        info: *mut libc::dl_phdr_info,
        _: usize,
        data: *mut libc::c_void,
    ) -> libc::c_int {
        // SAFETY: the loader passes a valid dl_phdr_info for the callback's duration, and `data`
        // is the Vec passed below.
        unsafe {
            let info = &*info;
            let roots = &mut *(data as *mut Vec<(usize, usize)>);
            let base = info.dlpi_addr as usize;
            for i in 0..info.dlpi_phnum as usize {
                let ph = &*info.dlpi_phdr.add(i);
                let start = base + ph.p_vaddr as usize;
                if unwind::is_own(start) {
                    continue;
                }
                if ph.p_type == libc::PT_LOAD && ph.p_flags & libc::PF_W != 0 {
                    roots.push((start, start + ph.p_memsz as usize));
                } else if ph.p_type == libc::PT_TLS && !info.dlpi_tls_data.is_null() {
                    let tls = info.dlpi_tls_data as usize;
                    roots.push((tls, tls + ph.p_memsz as usize));
                }
            }
        }
        0
    }
    // SAFETY: `visit` matches the callback type and only appends to the Vec behind `data`.
    unsafe { libc::dl_iterate_phdr(Some(visit), (&mut roots as *mut Vec<(usize, usize)>).cast()) };
    if let Some(stack) = own_stack() {
        roots.push(stack);
    }
    roots
}

/// The exiting thread's stack from here to its top: the mapping that holds our stack pointer,
/// found without `pthread_getattr_np`, which holds the thread's lock while it allocates (see
/// `procmaps`).
fn own_stack() -> Option<(usize, usize)> {
    let marker = 0usize;
    let sp = core::ptr::addr_of!(marker) as usize;
    let (_, top) = crate::procmaps::mapping_containing(sp)?;
    Some((sp & !7, top))
}

/// Calls `emit` with every aligned word in `[start, end)` of this process's memory.
fn scan_words(start: usize, end: usize, emit: &mut dyn FnMut(usize)) {
    let mut a = (start + 7) & !7;
    while a + 8 <= end {
        // SAFETY: roots are mapped segments of loaded objects or our own stack, and block ranges
        // are live blocks held in place by the list snapshot (other threads are not expected to
        // free during exit); all are readable and the address is 8-byte aligned.
        emit(unsafe { (a as *const usize).read_volatile() });
        a += 8;
    }
}

/// Runs the report and returns how many blocks leaked. Never inlined: its locals (block
/// addresses) must die with its frame, below the stack that `abort-shutdown` scrubs.
#[inline(never)]
pub fn leak_report() -> usize {
    let _guard = thread::Guard::enter();
    let roots = roots();
    let live = snapshot();
    let ranges: Vec<(usize, usize)> = live.iter().map(|b| (b.start, b.start + b.size)).collect();
    let classes = reach::classify(&Blocks::new(&ranges), &roots, scan_words);

    #[derive(Default)]
    struct Group {
        direct: usize,
        indirect: usize,
        bytes: usize,
        example: usize,
    }
    let mut groups: HashMap<[usize; NFRAMES], Group> = HashMap::new();
    let (mut reachable, mut reachable_bytes) = (0, 0);
    for (b, c) in live.iter().zip(&classes) {
        if *c == Class::Reachable {
            reachable += 1;
            reachable_bytes += b.size;
            continue;
        }
        let g = groups.entry(b.frames).or_default();
        match c {
            Class::Direct => g.direct += 1,
            _ => g.indirect += 1,
        }
        g.bytes += b.size;
        if g.example == 0 {
            g.example = b.start;
        }
    }
    let mut groups: Vec<_> = groups.into_iter().collect();
    groups.sort_by(|a, b| b.1.bytes.cmp(&a.1.bytes).then(a.0.cmp(&b.0)));

    let direct: usize = groups.iter().map(|g| g.1.direct).sum();
    let indirect: usize = groups.iter().map(|g| g.1.indirect).sum();
    let bytes: usize = groups.iter().map(|g| g.1.bytes).sum();
    let mut out = open_output();
    let _ = writeln!(
        out,
        "dmem: {} leaked ({direct} direct, {indirect} indirect), {bytes} bytes; {} ({reachable_bytes} bytes) \
         still reachable",
        blocks(direct + indirect),
        blocks(reachable)
    );
    for (frames, g) in &groups {
        let _ = writeln!(
            out,
            "\n{} bytes in {} ({} direct, {} indirect), e.g. {:#x}, allocated at:",
            g.bytes,
            blocks(g.direct + g.indirect),
            g.direct,
            g.indirect,
            g.example
        );
        for (i, &pc) in frames.iter().take_while(|&&pc| pc != 0).enumerate() {
            let _ = write!(out, "    #{i} {pc:#x} ");
            describe(&mut out, pc);
            let _ = writeln!(out);
        }
    }
    out.flush();
    direct + indirect
}

fn blocks(n: usize) -> String {
    format!("{n} block{}", if n == 1 { "" } else { "s" })
}

fn describe(out: &mut Out, pc: usize) {
    let mut done = false;
    backtrace::resolve((pc - 1) as *mut libc::c_void, |sym| {
        if done {
            return;
        }
        if let Some(name) = sym.name() {
            let _ = write!(out, "{name:#}");
            if let (Some(file), Some(line)) = (sym.filename(), sym.lineno()) {
                let _ = write!(out, " ({}:{line})", file.display());
            }
            done = true;
        }
    });
    if !done {
        let _ = write!(out, "??");
    }
}

/// stderr, or `report-file=PATH` when given (created or truncated).
fn open_output() -> Out {
    let path = &options::get().report_file;
    if path[0] == 0 {
        return Out::stderr();
    }
    // SAFETY: the path is NUL-terminated (the parser keeps it shorter than its buffer).
    let fd = unsafe {
        libc::open(
            path.as_ptr().cast(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC,
            0o644,
        )
    };
    if fd < 0 {
        let _ = writeln!(
            Out::stderr(),
            "dmem: cannot open report-file; writing the leak report to stderr"
        );
        return Out::stderr();
    }
    Out::to_fd(fd)
}
