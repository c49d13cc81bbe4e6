//! errno as the program left it. libdmem's own system calls (its output, its descriptors, its
//! bookkeeping around the calls it wraps) fail now and then, and each failure writes errno; a
//! program that reads errno after a call that succeeded must find what it would find bare.

/// The calling thread's errno.
pub fn get() -> i32 {
    // SAFETY: __errno_location returns the calling thread's errno slot, valid for its lifetime.
    unsafe { *libc::__errno_location() }
}

/// Sets the calling thread's errno.
pub fn set(value: i32) {
    // SAFETY: as in `get`.
    unsafe { *libc::__errno_location() = value };
}

/// Puts errno back as it was when this was made, when it goes out of scope.
pub struct Keep(i32);

impl Keep {
    #[inline]
    pub fn new() -> Keep {
        Keep(get())
    }
}

impl Drop for Keep {
    #[inline]
    fn drop(&mut self) {
        set(self.0);
    }
}

// SAFETY (of the declaration): glibc 2.32 and later export `const char *strerrordesc_np(int)`,
// which returns the untranslated description of an errno value, or null for an unknown one,
// without allocating or reading the locale; the libc crate does not declare it.
unsafe extern "C" {
    fn strerrordesc_np(errnum: libc::c_int) -> *const libc::c_char;
}

/// The description of an errno value ("No space left on device"), for a one-line message; empty
/// for a value glibc does not know.
pub fn describe(errnum: i32) -> &'static [u8] {
    // SAFETY: strerrordesc_np takes any int and returns a static string or null.
    let p = unsafe { strerrordesc_np(errnum) };
    if p.is_null() {
        return b"";
    }
    // SAFETY: a NUL-terminated string in glibc's read-only data, which lives as long as the
    // process.
    unsafe { core::ffi::CStr::from_ptr(p) }.to_bytes()
}
