//! Reading another process's memory: the `Memory` trait the list walker reads through, and its
//! implementation for a running process, which copies with `process_vm_readv` and never stops it
//! (no ptrace attach: the target's threads run on while it is read).
//!
//! A core file can implement the same trait over its PT_LOAD segments, so one walker serves both.

use std::cell::RefCell;
use std::collections::HashMap;
use std::io;

/// Why a read failed.
#[derive(Debug)]
pub enum ReadError {
    /// Nothing is mapped there (or not all of it): a stale pointer, a torn read, a block freed
    /// and unmapped while we looked.
    Unmapped,
    /// The system refused (EPERM, ESRCH...); walking on is pointless.
    Denied(io::Error),
}

/// Bytes of a process's address space.
pub trait Memory {
    /// Fills `buf` with the bytes at `addr`, all of them or an error.
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), ReadError>;

    /// Forgets anything remembered from earlier reads: the walker calls this before every
    /// attempt at a list, so that what it reads is no older than the sequence counter it read
    /// first. Sources that do not change (a core file) have nothing to forget.
    fn forget(&self) {}

    /// Reads bypassing anything remembered, in a read of its own: for a word that changes under
    /// us and orders the reads around it (a list's sequence counter). A source that does not
    /// change reads it as any other.
    fn read_fresh(&self, addr: u64, buf: &mut [u8]) -> Result<(), ReadError> {
        self.read(addr, buf)
    }

    /// Forgets what was remembered of `len` bytes at `addr`, so the next read of them asks the
    /// process again.
    fn forget_range(&self, _addr: u64, _len: u64) {}

    fn u64_fresh(&self, addr: u64) -> Result<u64, ReadError> {
        let mut b = [0u8; 8];
        self.read_fresh(addr, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    fn u64_at(&self, addr: u64) -> Result<u64, ReadError> {
        // Where the source holds it in place, without the copy through `read`.
        if let Some(b) = self.borrow(addr, 8) {
            return Ok(u64::from_le_bytes(b.try_into().unwrap_or_default()));
        }
        let mut b = [0u8; 8];
        self.read(addr, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    /// Calls `f` with the bytes of `[start, end)`, piece by piece, each with its address, for
    /// scans of large ranges; what cannot be read is skipped. Returns false if some of the
    /// range could not be read (a `Denied` read counts as unreadable).
    fn pieces(&self, start: u64, end: u64, f: &mut dyn FnMut(u64, &[u8])) -> bool {
        let mut buf = vec![0u8; PAGE as usize];
        let mut all = true;
        let mut at = start;
        while at < end {
            let next = ((at & !(PAGE - 1)) + PAGE).min(end);
            let n = (next - at) as usize;
            match self.read(at, &mut buf[..n]) {
                Ok(()) => f(at, &buf[..n]),
                Err(_) => all = false,
            }
            at = next;
        }
        all
    }

    /// The `len` bytes at `addr` where they are, without a copy, when the source holds them in
    /// one piece that does not change (a core's segment, a stopped process's copy): what a walk
    /// reads a header's fields from. None: ask `read` for them.
    fn borrow(&self, _addr: u64, _len: u64) -> Option<&[u8]> {
        None
    }

    /// Every byte the source holds in place, as runs by address (a core's segments, a stopped
    /// process's copy), for readers on other threads; None where reads go elsewhere (a live
    /// process). What lies outside the runs is read through the source itself.
    fn shared(&self) -> Option<Vec<(u64, &[u8])>> {
        None
    }

    /// Asks the processor for the bytes of `[addr, addr + len)` ahead of a scan, where the
    /// source holds them in one piece (`borrow`); elsewhere it does nothing.
    fn prefetch(&self, addr: u64, len: u64) {
        if let Some(bytes) = self.borrow(addr, len) {
            prefetch_lines(bytes);
        }
    }

    /// The readable stretch of memory that holds `addr` (a mapping, a core's segment), if any.
    fn extent(&self, _addr: u64) -> Option<(u64, u64)> {
        None
    }

    /// Every mapping (a core's segments), sorted, for the rule of roots in
    /// `analysis::roots`; empty where unknown.
    fn regions(&self) -> Vec<crate::analysis::maps::Mapping> {
        Vec::new()
    }

    /// At most how many bytes the image holds: what bounds a walk whose own words (a list's
    /// count, a link) may say anything. A core: its file's size; a process: its mappings.
    fn bound(&self) -> u64 {
        u64::MAX
    }
}

/// Has the processor fetch the cache lines of `bytes` into its caches, without waiting for
/// them: what `Memory::prefetch` does with the bytes it holds.
pub fn prefetch_lines(bytes: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    {
        let Some(last) = bytes.len().checked_sub(1) else {
            return;
        };
        let start = bytes.as_ptr() as usize;
        let mut off = 0;
        // From the line holding the first byte to the one holding the last.
        while (start & !63) + off <= start + last {
            // SAFETY: a prefetch is only a hint: it cannot fault, and it changes no memory and
            // no register; the address is in (or on the first cache line of) a live slice.
            unsafe {
                core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(
                    bytes.as_ptr().wrapping_add(off).wrapping_sub(start & 63).cast(),
                )
            };
            off += 64;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = bytes;
}

/// The bytes of the readable mappings of `regions`.
fn readable_bytes(regions: &[crate::analysis::maps::Mapping]) -> u64 {
    regions
        .iter()
        .filter(|m| m.readable)
        .map(|m| (m.end - m.start) as u64)
        .sum()
}

/// A hasher for addresses: one multiplication. Keys are addresses read by this process, not
/// chosen by an adversary, and SipHash would cost more than the rest of a header's walk.
#[derive(Clone, Copy, Default)]
pub struct AddrHasher(u64);

impl std::hash::Hasher for AddrHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // Slices of addresses (a stack) come here whole: eight bytes at a time.
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.write_u64(u64::from_le_bytes(c.try_into().unwrap()));
        }
        for &b in chunks.remainder() {
            self.write_u64(b as u64);
        }
    }
    fn write_u64(&mut self, v: u64) {
        // Fibonacci hashing, rotated so that the high bits (which the table's control bytes
        // use) and the low bits (which pick the bucket) both carry every input bit.
        self.0 = (v ^ self.0).wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(26);
    }
}

pub type AddrHash = std::hash::BuildHasherDefault<AddrHasher>;

const PAGE: u64 = 4096;
/// Pages fetched per system call when a read misses. Headers of blocks allocated one after the
/// other sit close together and a list is walked newest first, so the pages just below the one
/// asked for are what the walk reads next: fetching 16 at a time cuts the system calls of a walk
/// of small blocks about sixteenfold. Larger batches stop paying off past the size of a block.
const BATCH_PAGES: u64 = 16;
/// Pages kept at most (64 MiB); past that the cache starts afresh, which costs a few re-reads
/// but bounds the reader's memory on a heap of any size.
const MAX_PAGES: usize = 16 * 1024;

/// The memory of a running process, read with `process_vm_readv`.
///
/// Reads go through a cache of whole pages. A miss fetches the page asked for and up to
/// `BATCH_PAGES - 1` pages below it in one call; the pages are separate iovec elements, listed
/// the wanted one first and then downwards, and the kernel stops at the first element it cannot
/// read, so a batch that runs off the bottom of a mapping still brings the page that was wanted.
pub struct LiveMemory {
    pid: i32,
    /// The process's mappings, for `extent`, read when first needed.
    maps: RefCell<Option<crate::source::mappings::Mappings>>,
    pages: RefCell<HashMap<u64, Box<[u8]>, AddrHash>>,
    /// Page buffers of a cache that was emptied, to fill again without asking the allocator
    /// (and the kernel, for fresh pages) for new ones.
    spare: RefCell<Vec<Box<[u8]>>>,
}

impl LiveMemory {
    pub fn new(pid: i32) -> LiveMemory {
        LiveMemory {
            pid,
            maps: RefCell::new(None),
            pages: RefCell::new(HashMap::default()),
            spare: RefCell::new(Vec::new()),
        }
    }

    /// One `process_vm_readv` of the remote ranges `remote` into `local`: the bytes copied.
    fn readv(&self, local: &mut [&mut [u8]], remote: &[(u64, usize)]) -> io::Result<usize> {
        let liov: Vec<libc::iovec> = local
            .iter_mut()
            .map(|b| libc::iovec {
                iov_base: b.as_mut_ptr().cast(),
                iov_len: b.len(),
            })
            .collect();
        let riov: Vec<libc::iovec> = remote
            .iter()
            .map(|&(a, n)| libc::iovec {
                iov_base: a as usize as *mut libc::c_void,
                iov_len: n,
            })
            .collect();
        // SAFETY: every local iovec points into a live, exclusively borrowed buffer of exactly
        // its length; the remote iovecs are only addresses in the other process, which the
        // kernel checks, never dereferenced here.
        let n = unsafe {
            libc::process_vm_readv(
                self.pid,
                liov.as_ptr(),
                liov.len() as libc::c_ulong,
                riov.as_ptr(),
                riov.len() as libc::c_ulong,
                0,
            )
        };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    }

    /// Brings the page at `page` into the cache, with the pages below it that are readable.
    fn fetch(&self, page: u64) -> Result<(), ReadError> {
        let mut pages = self.pages.borrow_mut();
        let mut spare = self.spare.borrow_mut();
        if pages.len() >= MAX_PAGES {
            spare.extend(pages.drain().map(|(_, b)| b));
        }
        let wanted: Vec<u64> = (0..BATCH_PAGES)
            .map_while(|i| page.checked_sub(i * PAGE))
            .filter(|p| *p == page || !pages.contains_key(p))
            .collect();
        let mut bufs: Vec<Box<[u8]>> = wanted
            .iter()
            .map(|_| spare.pop().unwrap_or_else(|| vec![0u8; PAGE as usize].into()))
            .collect();
        let remote: Vec<(u64, usize)> = wanted.iter().map(|&p| (p, PAGE as usize)).collect();
        let got = {
            let mut local: Vec<&mut [u8]> = bufs.iter_mut().map(|b| &mut b[..]).collect();
            self.readv(&mut local, &remote)
        };
        // Whole pages only: the kernel stops at the first page it cannot read.
        let whole = *got.as_ref().unwrap_or(&0) / PAGE as usize;
        let mut bufs = bufs.into_iter();
        for (p, b) in wanted.into_iter().zip(bufs.by_ref()).take(whole) {
            pages.insert(p, b);
        }
        spare.extend(bufs);
        match got {
            Ok(_) if whole > 0 => Ok(()),
            Ok(_) => Err(ReadError::Unmapped),
            Err(e) if e.raw_os_error() == Some(libc::EFAULT) => Err(ReadError::Unmapped),
            Err(e) => Err(ReadError::Denied(e)),
        }
    }
}

/// Bytes copied per system call by a bulk scan of a live process.
const SCAN_CHUNK: usize = 1 << 20;

impl Memory for LiveMemory {
    /// Straight from the process, a megabyte per system call, around the page cache (which a
    /// scan of hundreds of megabytes would only churn); a stretch that cannot be read whole is
    /// read page by page, so a hole costs only its own pages.
    fn pieces(&self, start: u64, end: u64, f: &mut dyn FnMut(u64, &[u8])) -> bool {
        let mut buf = vec![0u8; (end.saturating_sub(start) as usize).min(SCAN_CHUNK)];
        let mut all = true;
        let mut at = start;
        while at < end {
            let n = ((end - at) as usize).min(SCAN_CHUNK);
            match self.readv(&mut [&mut buf[..n]], &[(at, n)]) {
                Ok(got) if got == n => {
                    f(at, &buf[..n]);
                    at += n as u64;
                    continue;
                }
                Err(e) if e.raw_os_error() != Some(libc::EFAULT) => return false,
                _ => {}
            }
            // Page by page up to the end of this chunk.
            let stop = at + n as u64;
            while at < stop {
                let next = ((at & !(PAGE - 1)) + PAGE).min(stop);
                let k = (next - at) as usize;
                match self.readv(&mut [&mut buf[..k]], &[(at, k)]) {
                    Ok(got) if got == k => f(at, &buf[..k]),
                    _ => all = false,
                }
                at = next;
            }
        }
        all
    }

    fn extent(&self, addr: u64) -> Option<(u64, u64)> {
        let mut maps = self.maps.borrow_mut();
        if maps.is_none() {
            *maps = crate::source::mappings::Mappings::of_process(self.pid).ok();
        }
        let m = maps.as_ref()?.find(addr)?;
        m.readable.then_some((m.start, m.end))
    }

    fn regions(&self) -> Vec<crate::analysis::maps::Mapping> {
        crate::source::mappings::Mappings::of_process(self.pid)
            .map(|maps| maps.regions())
            .unwrap_or_default()
    }

    fn bound(&self) -> u64 {
        readable_bytes(&self.regions())
    }

    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), ReadError> {
        let mut done = 0usize;
        while done < buf.len() {
            let at = addr.checked_add(done as u64).ok_or(ReadError::Unmapped)?;
            let page = at & !(PAGE - 1);
            let off = (at - page) as usize;
            let n = (PAGE as usize - off).min(buf.len() - done);
            {
                let pages = self.pages.borrow();
                if let Some(src) = pages.get(&page) {
                    buf[done..done + n].copy_from_slice(&src[off..off + n]);
                    done += n;
                    continue;
                }
            }
            self.fetch(page)?;
            let pages = self.pages.borrow();
            let src = pages.get(&page).ok_or(ReadError::Unmapped)?;
            buf[done..done + n].copy_from_slice(&src[off..off + n]);
            done += n;
        }
        Ok(())
    }

    fn forget(&self) {
        let mut pages = self.pages.borrow_mut();
        self.spare.borrow_mut().extend(pages.drain().map(|(_, b)| b));
    }

    fn forget_range(&self, addr: u64, len: u64) {
        let mut pages = self.pages.borrow_mut();
        let mut spare = self.spare.borrow_mut();
        let mut page = addr & !(PAGE - 1);
        while page < addr.saturating_add(len) {
            spare.extend(pages.remove(&page));
            page += PAGE;
        }
    }

    /// One system call of its own, so it is ordered against the reads before and after it
    /// (several words copied by one call are not ordered among themselves).
    fn read_fresh(&self, addr: u64, buf: &mut [u8]) -> Result<(), ReadError> {
        let len = buf.len();
        match self.readv(&mut [buf], &[(addr, len)]) {
            Ok(n) if n == len => Ok(()),
            Ok(_) => Err(ReadError::Unmapped),
            Err(e) if e.raw_os_error() == Some(libc::EFAULT) => Err(ReadError::Unmapped),
            Err(e) => Err(ReadError::Denied(e)),
        }
    }
}

/// A stopped process's writable memory, copied whole while it is stopped, so that the walk and
/// the scan run after it is let go and it pauses only for the copy (a megabyte per system call,
/// at memory speed) instead of for the whole analysis. What is not writable (code, read-only
/// data) cannot change and is read from the running process when asked for.
pub struct CopiedMemory {
    /// Runs of pages copied, sorted by address, none overlapping.
    runs: Vec<(u64, Vec<u8>)>,
    live: LiveMemory,
    /// The mappings when copied.
    maps: crate::source::mappings::Mappings,
}

impl CopiedMemory {
    /// Copies every readable, writable mapping of `maps` (the kernel's own pages aside); a page
    /// that cannot be read ends a run and is left to the live reads.
    pub fn copy(
        live: LiveMemory,
        maps: &crate::source::mappings::Mappings,
    ) -> Result<CopiedMemory, ReadError> {
        let mut runs = Vec::new();
        for m in &maps.list {
            let kernel = matches!(
                m.special.as_deref(),
                Some("[vvar]" | "[vsyscall]" | "[vvar_vclock]")
            );
            if !m.readable || !m.writable || kernel {
                continue;
            }
            let mut at = m.start;
            let mut run: Option<(u64, Vec<u8>)> = None;
            while at < m.end {
                let n = ((m.end - at) as usize).min(SCAN_CHUNK);
                let (_, bytes) = run.get_or_insert_with(|| (at, Vec::new()));
                let have = bytes.len();
                // Zeroed memory from the allocator is fresh pages, never written before the
                // kernel copies into them.
                bytes.resize(have + n, 0);
                let got = match live.readv(&mut [&mut bytes[have..]], &[(at, n)]) {
                    Ok(got) => got,
                    Err(e) if e.raw_os_error() == Some(libc::EFAULT) => 0,
                    Err(e) => return Err(ReadError::Denied(e)),
                };
                let whole = got & !(PAGE as usize - 1);
                bytes.truncate(have + whole);
                at += whole as u64;
                if whole < n {
                    // A page that cannot be read: the run ends before it.
                    runs.extend(run.take().filter(|(_, b)| !b.is_empty()));
                    at += PAGE;
                }
            }
            runs.extend(run.filter(|(_, b)| !b.is_empty()));
        }
        Ok(CopiedMemory {
            runs,
            live,
            maps: maps.clone(),
        })
    }

    /// The copied bytes from `addr` to the end of its run.
    fn copied(&self, addr: u64) -> Option<&[u8]> {
        let i = self.runs.partition_point(|(s, _)| *s <= addr).checked_sub(1)?;
        let (start, bytes) = &self.runs[i];
        bytes.get((addr - start) as usize..).filter(|b| !b.is_empty())
    }
}

impl Memory for CopiedMemory {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), ReadError> {
        match self.copied(addr) {
            Some(b) if b.len() >= buf.len() => {
                buf.copy_from_slice(&b[..buf.len()]);
                Ok(())
            }
            _ => self.live.read(addr, buf),
        }
    }

    fn borrow(&self, addr: u64, len: u64) -> Option<&[u8]> {
        self.copied(addr)?.get(..usize::try_from(len).ok()?)
    }

    fn shared(&self) -> Option<Vec<(u64, &[u8])>> {
        Some(self.runs.iter().map(|(at, b)| (*at, &b[..])).collect())
    }

    fn pieces(&self, start: u64, end: u64, f: &mut dyn FnMut(u64, &[u8])) -> bool {
        let mut all = true;
        let mut at = start;
        while at < end {
            if let Some(b) = self.copied(at) {
                let n = (b.len() as u64).min(end - at);
                f(at, &b[..n as usize]);
                at += n;
                continue;
            }
            // Not copied: up to the next run, from the process.
            let i = self.runs.partition_point(|(s, _)| *s <= at);
            let next = self.runs.get(i).map_or(end, |(s, _)| (*s).min(end));
            all &= self.live.pieces(at, next, f);
            at = next;
        }
        all
    }

    fn extent(&self, addr: u64) -> Option<(u64, u64)> {
        self.live.extent(addr)
    }

    fn regions(&self) -> Vec<crate::analysis::maps::Mapping> {
        self.maps.regions()
    }

    fn bound(&self) -> u64 {
        readable_bytes(&self.regions())
    }
}

/// An image's memory as the shared analysis reads words.
pub struct ImageWords<'a>(pub &'a dyn Memory);

impl crate::analysis::arena::Words for ImageWords<'_> {
    fn read_words(&self, addr: usize, buf: &mut [usize]) -> usize {
        // Where the source holds them in one piece, straight from there: the glibc walk asks
        // for a word or two at a time, and the pieces' machinery would cost more than the read.
        if let Some(bytes) = self.0.borrow(addr as u64, 8 * buf.len() as u64) {
            for (w, b) in buf.iter_mut().zip(bytes.chunks_exact(8)) {
                *w = u64::from_le_bytes(b.try_into().unwrap()) as usize;
            }
            return buf.len();
        }
        let mut n = 0;
        let end = addr as u64 + 8 * buf.len() as u64;
        self.0.pieces(addr as u64, end, &mut |at, bytes| {
            // Only what comes without a gap counts.
            if at != addr as u64 + 8 * n as u64 {
                return;
            }
            for w in bytes.chunks_exact(8) {
                if n < buf.len() {
                    buf[n] = u64::from_le_bytes(w.try_into().unwrap()) as usize;
                    n += 1;
                }
            }
        });
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads this very process through the system call, across a page boundary and at the
    /// bottom edge of a mapping, and sees what is there.
    #[test]
    fn reads_own_memory_through_the_kernel() {
        let data: Vec<u8> = (0..3 * PAGE as usize).map(|i| (i % 251) as u8).collect();
        let mem = LiveMemory::new(std::process::id() as i32);
        let base = data.as_ptr() as u64;
        let mut buf = vec![0u8; 5000];
        mem.read(base + 100, &mut buf).unwrap();
        assert_eq!(&buf[..], &data[100..5100]);
        assert_eq!(
            mem.u64_at(base + 8).unwrap(),
            u64::from_le_bytes(data[8..16].try_into().unwrap())
        );
        assert!(matches!(mem.read(8, &mut buf[..8]), Err(ReadError::Unmapped)));
        mem.forget();
        let mut word = [0u8; 8];
        mem.read_fresh(base, &mut word).unwrap();
        assert_eq!(word, data[..8]);
    }

    /// A copy of this process's writable memory reads as the memory did when copied, in one
    /// piece per copied run, and what is not copied (code) still reads from the process.
    #[test]
    fn a_copy_reads_as_the_memory_did() {
        let mut data: Vec<u64> = (0..4096).collect();
        let pid = std::process::id() as i32;
        let maps = crate::source::mappings::Mappings::of_process(pid).unwrap();
        let copy = CopiedMemory::copy(LiveMemory::new(pid), &maps).unwrap();
        let base = data.as_ptr() as u64;
        data[7] = 0xdead;
        assert_eq!(
            copy.u64_at(base + 7 * 8).unwrap(),
            7,
            "the copy keeps the old value"
        );
        let mut pieces = 0;
        let mut words = Vec::new();
        assert!(copy.pieces(base, base + 8 * 4096, &mut |_, b| {
            pieces += 1;
            words.extend(
                b.chunks_exact(8)
                    .map(|w| u64::from_le_bytes(w.try_into().unwrap())),
            );
        }));
        assert_eq!(words, (0..4096).collect::<Vec<u64>>());
        assert!(pieces <= 2, "{pieces} pieces for a range inside one mapping");
        let code = a_copy_reads_as_the_memory_did as *const () as u64;
        let mut b = [0u8; 16];
        copy.read(code, &mut b).unwrap();
        let mut c = [0u8; 16];
        LiveMemory::new(pid).read(code, &mut c).unwrap();
        assert_eq!(b, c);
    }
}
