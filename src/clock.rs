//! The library's one clock: CLOCK_MONOTONIC in nanoseconds, read through the vDSO (no system
//! call). The free history's events are stamped with it, and every deadline of the library (a
//! list lock waited for, threads stopped for the report) is measured on it.

/// The monotonic clock now, in nanoseconds.
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec; clock_gettime (vDSO) does not allocate.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
