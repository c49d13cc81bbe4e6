//! Which allocation function a block came from, as valgrind names it. A recorded stack starts at
//! the caller of malloc, `operator new` and the rest; valgrind's starts at the allocation
//! function itself (its replacement in `vgpreload_memcheck`), and its suppressions match from
//! there. The header has no room to say which function it was, so it is read back from the
//! code: the call instruction before the first return address, through the PLT stub or GOT slot
//! it goes through, to the dynamic relocation that names the slot's symbol. That works the same
//! in this process at exit, in a running process and in a core (whose GOT pages are dumped and
//! whose code the launcher reads from the mapped files).

use std::collections::HashMap;

/// The allocation function's frames at the top of valgrind's stack of a block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Alloc {
    /// Known: valgrind's frames for it, innermost first, by their `fun:` names.
    Frames(&'static [&'static str]),
    /// One frame, which valgrind names as one of `names`: the call could not be decoded (an
    /// indirect call, a tail call), or the function's name depends on its arguments
    /// (`realloc(NULL, n)` shows as `malloc`). `glob` covers them all, for a generated
    /// suppression.
    OneOf {
        names: &'static [&'static str],
        glob: &'static str,
    },
}

/// Every allocation function's name as valgrind 3.19 shows it.
const EVERY: &[&str] = &[
    "malloc",
    "calloc",
    "realloc",
    "memalign",
    "posix_memalign",
    "_Znwm",
    "_Znam",
    "_ZnwmRKSt9nothrow_t",
    "_ZnamRKSt9nothrow_t",
    "_ZnwmSt11align_val_t",
    "_ZnamSt11align_val_t",
    "_ZnwmSt11align_val_tRKSt9nothrow_t",
    "_ZnamSt11align_val_tRKSt9nothrow_t",
];

/// Nothing is known of the function: any of them.
pub const UNKNOWN: Alloc = Alloc::OneOf {
    names: EVERY,
    glob: "*",
};

impl Alloc {
    /// valgrind's frames for the function the program called by the symbol `called`, as
    /// valgrind 3.19 on glibc shows them: `aligned_alloc` and `valloc` are `memalign`,
    /// `posix_memalign` calls `memalign`, `realloc` of a null pointer is `malloc`.
    pub fn of(called: Option<&str>) -> Alloc {
        const REALLOC: Alloc = Alloc::OneOf {
            names: &["realloc", "malloc"],
            glob: "*alloc",
        };
        let Some(name) = called else {
            return UNKNOWN;
        };
        match name {
            "malloc" => Alloc::Frames(&["malloc"]),
            "calloc" => Alloc::Frames(&["calloc"]),
            "realloc" | "reallocarray" => REALLOC,
            "memalign" | "aligned_alloc" | "valloc" | "pvalloc" => Alloc::Frames(&["memalign"]),
            "posix_memalign" => Alloc::Frames(&["memalign", "posix_memalign"]),
            _ => match EVERY.iter().find(|&&n| n == name && n.starts_with("_Zn")) {
                Some(n) => Alloc::Frames(core::slice::from_ref(n)),
                None => UNKNOWN,
            },
        }
    }

    /// The frames, each as the names valgrind may give it (one name when known).
    pub fn frames(&self) -> Vec<&'static [&'static str]> {
        match *self {
            Alloc::Frames(names) => names.iter().map(core::slice::from_ref).collect(),
            Alloc::OneOf { names, .. } => vec![names],
        }
    }

    /// The `fun:` patterns of a suppression that matches these frames.
    pub fn patterns(&self) -> Vec<&'static str> {
        match *self {
            Alloc::Frames(names) => names.to_vec(),
            Alloc::OneOf { glob, .. } => vec![glob],
        }
    }
}

/// valgrind's demangled name of an allocation function, as its text and XML stacks show it.
pub fn demangled(name: &str) -> &str {
    match name {
        "_Znwm" => "operator new(unsigned long)",
        "_Znam" => "operator new[](unsigned long)",
        "_ZnwmRKSt9nothrow_t" => "operator new(unsigned long, std::nothrow_t const&)",
        "_ZnamRKSt9nothrow_t" => "operator new[](unsigned long, std::nothrow_t const&)",
        "_ZnwmSt11align_val_t" => "operator new(unsigned long, std::align_val_t)",
        "_ZnamSt11align_val_t" => "operator new[](unsigned long, std::align_val_t)",
        "_ZnwmSt11align_val_tRKSt9nothrow_t" => {
            "operator new(unsigned long, std::align_val_t, std::nothrow_t const&)"
        }
        "_ZnamSt11align_val_tRKSt9nothrow_t" => {
            "operator new[](unsigned long, std::align_val_t, std::nothrow_t const&)"
        }
        other => other,
    }
}

/// Reads `buf.len()` bytes at an address of the image; false if any of them cannot be read.
pub type Read<'a> = dyn FnMut(u64, &mut [u8]) -> bool + 'a;

/// The symbols behind the GOT slots of each loaded object, read once per object.
#[derive(Default)]
pub struct Callees {
    /// By the object's load address: GOT slot address to the symbol its relocation names.
    slots: HashMap<u64, HashMap<u64, String>>,
}

impl Callees {
    /// The symbol that the call returning to `ret` called, through a PLT stub or a GOT slot of
    /// the object loaded at `base` (the address its ELF header is mapped at), and the address
    /// the slot holds (0 if unread). None for a call that goes elsewhere (a direct call inside
    /// the object, an indirect call, a jump).
    pub fn called(&mut self, read: &mut Read, ret: u64, base: u64) -> Option<(&str, u64)> {
        let slot = slot_of_call(read, ret)?;
        let table = self.slots.entry(base).or_insert_with(|| got_symbols(read, base));
        let name = table.get(&slot)?;
        Some((name.as_str(), u64_at(read, slot).unwrap_or(0)))
    }
}

fn le32(b: &[u8]) -> i64 {
    i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as i64
}

fn u64_at(read: &mut Read, addr: u64) -> Option<u64> {
    let mut b = [0u8; 8];
    read(addr, &mut b).then(|| u64::from_le_bytes(b))
}

/// The GOT slot the call before `ret` goes through: `call rel32` to a PLT stub that jumps
/// through it, or `call *disp32(%rip)` (code built with -fno-plt).
fn slot_of_call(read: &mut Read, ret: u64) -> Option<u64> {
    let mut b = [0u8; 6];
    if !read(ret.checked_sub(6)?, &mut b) {
        return None;
    }
    if b[0] == 0xff && b[1] == 0x15 {
        return Some(ret.wrapping_add(le32(&b[2..]) as u64));
    }
    if b[1] != 0xe8 {
        return None;
    }
    let stub = ret.wrapping_add(le32(&b[2..]) as u64);
    let mut s = [0u8; 11];
    if !read(stub, &mut s) {
        return None;
    }
    // The PLT's forms on x86-64: `jmp *slot(%rip)`, and with CET's .plt.sec an `endbr64` (and a
    // `bnd` prefix) in front of it.
    let at = |skip: usize, len: u64| stub + skip as u64 + len;
    if s[0] == 0xff && s[1] == 0x25 {
        return Some(at(6, le32(&s[2..]) as u64));
    }
    let endbr = s[..4] == [0xf3, 0x0f, 0x1e, 0xfa];
    let rest = if endbr { &s[4..] } else { &s[..] };
    let skip = if endbr { 4 } else { 0 };
    if rest[0] == 0xf2 && rest[1] == 0xff && rest[2] == 0x25 {
        return Some(at(skip + 7, le32(&rest[3..]) as u64));
    }
    if rest[0] == 0xff && rest[1] == 0x25 {
        return Some(at(skip + 6, le32(&rest[2..]) as u64));
    }
    None
}

const PT_LOAD: u32 = 1;
const PT_DYNAMIC: u32 = 2;
const DT_PLTRELSZ: u64 = 2;
const DT_STRTAB: u64 = 5;
const DT_SYMTAB: u64 = 6;
const DT_RELA: u64 = 7;
const DT_RELASZ: u64 = 8;
const DT_JMPREL: u64 = 23;
const R_X86_64_GLOB_DAT: u64 = 6;
const R_X86_64_JUMP_SLOT: u64 = 7;
/// Bounds on what is read of an object's tables, against a corrupt image.
const MAX_RELOCS: u64 = 1 << 20;
const MAX_NAME: usize = 1024;

/// GOT slot address to symbol name, for every JUMP_SLOT and GLOB_DAT relocation of the object
/// at `base`, read from its dynamic section in memory. The loader relocates that section's
/// addresses in place, and a core or a file read where memory is missing may have them as
/// offsets still: an address below the load bias is taken as an offset.
fn got_symbols(read: &mut Read, base: u64) -> HashMap<u64, String> {
    let mut out = HashMap::new();
    let mut eh = [0u8; 64];
    if !read(base, &mut eh) || eh[..4] != *b"\x7fELF" || eh[4] != 2 {
        return out;
    }
    let phoff = u64::from_le_bytes(eh[32..40].try_into().unwrap());
    let phentsize = u16::from_le_bytes([eh[54], eh[55]]) as u64;
    let phnum = u16::from_le_bytes([eh[56], eh[57]]) as u64;
    if phentsize < 56 || phnum > 256 {
        return out;
    }
    let (mut dynamic, mut first_load) = (None, None);
    for i in 0..phnum {
        let mut ph = [0u8; 56];
        if !read(base + phoff + i * phentsize, &mut ph) {
            return out;
        }
        let kind = u32::from_le_bytes(ph[..4].try_into().unwrap());
        let vaddr = u64::from_le_bytes(ph[16..24].try_into().unwrap());
        let memsz = u64::from_le_bytes(ph[40..48].try_into().unwrap());
        match kind {
            PT_DYNAMIC => dynamic = Some((vaddr, memsz)),
            PT_LOAD if first_load.is_none() => first_load = Some(vaddr & !0xfff),
            _ => {}
        }
    }
    let (Some((dyn_vaddr, dyn_size)), Some(first)) = (dynamic, first_load) else {
        return out;
    };
    let bias = base.wrapping_sub(first);
    let abs = |v: u64| if v < bias { v.wrapping_add(bias) } else { v };
    let mut tags: HashMap<u64, u64> = HashMap::new();
    for i in 0..(dyn_size / 16).min(4096) {
        let mut d = [0u8; 16];
        if !read(bias + dyn_vaddr + 16 * i, &mut d) {
            break;
        }
        let tag = u64::from_le_bytes(d[..8].try_into().unwrap());
        if tag == 0 {
            break;
        }
        tags.entry(tag)
            .or_insert(u64::from_le_bytes(d[8..].try_into().unwrap()));
    }
    let (Some(&symtab), Some(&strtab)) = (tags.get(&DT_SYMTAB), tags.get(&DT_STRTAB)) else {
        return out;
    };
    let (symtab, strtab) = (abs(symtab), abs(strtab));
    let tables = [(DT_JMPREL, DT_PLTRELSZ), (DT_RELA, DT_RELASZ)];
    for (at, size) in tables {
        let (Some(&at), Some(&size)) = (tags.get(&at), tags.get(&size)) else {
            continue;
        };
        let at = abs(at);
        let count = (size / 24).min(MAX_RELOCS);
        let mut chunk = vec![0u8; 24 * 170];
        let mut i = 0;
        while i < count {
            let n = (count - i).min(170) as usize;
            let buf = &mut chunk[..24 * n];
            if !read(at + 24 * i, buf) {
                break;
            }
            for r in buf.chunks_exact(24) {
                let offset = u64::from_le_bytes(r[..8].try_into().unwrap());
                let info = u64::from_le_bytes(r[8..16].try_into().unwrap());
                let (sym, kind) = (info >> 32, info & 0xffff_ffff);
                if sym == 0 || (kind != R_X86_64_JUMP_SLOT && kind != R_X86_64_GLOB_DAT) {
                    continue;
                }
                let mut s = [0u8; 4];
                if !read(symtab + 24 * sym, &mut s) {
                    continue;
                }
                if let Some(name) = c_string(read, strtab + u32::from_le_bytes(s) as u64) {
                    out.insert(bias.wrapping_add(offset), name);
                }
            }
            i += n as u64;
        }
    }
    out
}

/// The NUL-terminated string at `addr`, read in small pieces (it may end just before
/// unreadable memory).
fn c_string(read: &mut Read, addr: u64) -> Option<String> {
    let mut out = Vec::new();
    let mut piece = [0u8; 16];
    while out.len() < MAX_NAME {
        let at = addr + out.len() as u64;
        if !read(at, &mut piece) {
            // Byte by byte near the end of a mapping.
            let mut one = [0u8; 1];
            if !read(at, &mut one) {
                return None;
            }
            if one[0] == 0 {
                break;
            }
            out.push(one[0]);
            continue;
        }
        match piece.iter().position(|&b| b == 0) {
            Some(n) => {
                out.extend_from_slice(&piece[..n]);
                break;
            }
            None => out.extend_from_slice(&piece),
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valgrinds_names_of_each_function() {
        assert_eq!(Alloc::of(Some("malloc")).patterns(), ["malloc"]);
        assert_eq!(Alloc::of(Some("aligned_alloc")).patterns(), ["memalign"]);
        assert_eq!(
            Alloc::of(Some("posix_memalign")).patterns(),
            ["memalign", "posix_memalign"]
        );
        assert_eq!(
            Alloc::of(Some("_ZnamRKSt9nothrow_t")).patterns(),
            ["_ZnamRKSt9nothrow_t"]
        );
        assert_eq!(Alloc::of(Some("realloc")).patterns(), ["*alloc"]);
        assert_eq!(Alloc::of(Some("strdup")), UNKNOWN);
        assert_eq!(Alloc::of(None).frames(), vec![EVERY]);
        assert_eq!(demangled("_Znam"), "operator new[](unsigned long)");
    }

    /// A call through a PLT stub and one through a GOT slot, decoded from bytes laid out as
    /// the linker writes them.
    #[test]
    fn calls_lead_to_their_got_slots() {
        let mut mem: HashMap<u64, u8> = HashMap::new();
        let mut put = |at: u64, bytes: &[u8]| {
            for (i, &b) in bytes.iter().enumerate() {
                mem.insert(at + i as u64, b);
            }
        };
        // call rel32 at 0x1000 to a .plt.sec stub at 0x2000: endbr64; bnd jmp *0x3000(%rip).
        put(0xfff, &[0x90]);
        put(0x1000, &[0xe8, 0xfb, 0x0f, 0x00, 0x00]);
        let disp = (0x3000i64 - (0x2000 + 11)) as i32;
        put(0x2000, &[0xf3, 0x0f, 0x1e, 0xfa, 0xf2, 0xff, 0x25]);
        put(0x2007, &disp.to_le_bytes());
        // call *disp(%rip) at 0x1100.
        put(0x1100, &[0xff, 0x15]);
        put(0x1102, &((0x3008i64 - 0x1106) as i32).to_le_bytes());
        let mut read = |at: u64, buf: &mut [u8]| {
            for (i, b) in buf.iter_mut().enumerate() {
                match mem.get(&(at + i as u64)) {
                    Some(&v) => *b = v,
                    None => return false,
                }
            }
            true
        };
        assert_eq!(slot_of_call(&mut read, 0x1005), Some(0x3000));
        assert_eq!(slot_of_call(&mut read, 0x1106), Some(0x3008));
        assert_eq!(slot_of_call(&mut read, 0x1001), None);
    }
}
