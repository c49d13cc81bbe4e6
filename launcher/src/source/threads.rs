//! The threads of a process image and their registers: from a core's NT_PRSTATUS notes, from
//! ptrace for a process dmem stopped itself, or from a file a debugger that holds the process
//! stopped wrote (the gdb adapter). Registers are x86-64's `user_regs_struct`, in its order.

/// The names of `user_regs_struct`'s words, in order (as in NT_PRSTATUS and PTRACE_GETREGS).
pub const REG_NAMES: [&str; 27] = [
    "r15", "r14", "r13", "r12", "rbp", "rbx", "r11", "r10", "r9", "r8", "rax", "rcx", "rdx", "rsi", "rdi",
    "orig_rax", "rip", "cs", "eflags", "rsp", "ss", "fs_base", "gs_base", "ds", "es", "fs", "gs",
];

/// The registers that can hold a pointer, which the leak scan takes as roots: the general ones,
/// the instruction pointer and the thread-pointer bases (segment selectors and flags cannot).
pub const POINTER_REGS: [&str; 20] = [
    "rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rbp", "rsp", "r8", "r9", "r10", "r11", "r12", "r13", "r14",
    "r15", "rip", "orig_rax", "fs_base", "gs_base",
];

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Thread {
    /// The kernel's thread id (the LWP).
    pub tid: u32,
    pub regs: [u64; 27],
}

impl Thread {
    pub fn reg(&self, name: &str) -> Option<u64> {
        REG_NAMES.iter().position(|&n| n == name).map(|i| self.regs[i])
    }

    pub fn sp(&self) -> u64 {
        self.reg("rsp").unwrap_or(0)
    }

    pub fn fs_base(&self) -> u64 {
        self.reg("fs_base").unwrap_or(0)
    }

    /// A thread from `user_regs_struct` as little-endian bytes (at least 27 words).
    pub fn from_user_regs(tid: u32, bytes: &[u8]) -> Option<Thread> {
        let mut regs = [0u64; 27];
        for (i, r) in regs.iter_mut().enumerate() {
            *r = u64::from_le_bytes(bytes.get(8 * i..8 * i + 8)?.try_into().ok()?);
        }
        Some(Thread { tid, regs })
    }
}

/// Offsets in the kernel's `struct elf_prstatus` on x86-64: the thread id (`pr_pid`) and the
/// registers (`pr_reg`).
const PRSTATUS_PID: usize = 32;
const PRSTATUS_REGS: usize = 112;

/// The thread of one NT_PRSTATUS note's descriptor.
pub fn from_prstatus(desc: &[u8]) -> Option<Thread> {
    let tid = u32::from_le_bytes(desc.get(PRSTATUS_PID..PRSTATUS_PID + 4)?.try_into().ok()?);
    Thread::from_user_regs(tid, desc.get(PRSTATUS_REGS..)?)
}

/// Threads from the JSON a debugger wrote: `[{"tid": N, "regs": {"rax": N, ...}}, ...]`, the
/// values numbers or "0x..." strings. Registers not named are 0.
pub fn from_json(text: &str) -> Result<Vec<Thread>, String> {
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let list = v.as_array().ok_or("not a JSON list of threads")?;
    let number = |v: &serde_json::Value| -> Option<u64> {
        v.as_u64().or_else(|| {
            let s = v.as_str()?;
            match s.strip_prefix("0x") {
                Some(h) => u64::from_str_radix(h, 16).ok(),
                None => s.parse().ok(),
            }
        })
    };
    let mut out = Vec::new();
    for t in list {
        let tid = t
            .get("tid")
            .and_then(number)
            .ok_or("a thread without a \"tid\" number")?;
        let mut regs = [0u64; 27];
        if let Some(map) = t.get("regs").and_then(|r| r.as_object()) {
            for (name, value) in map {
                let Some(i) = REG_NAMES.iter().position(|n| n == name) else {
                    continue;
                };
                regs[i] = number(value)
                    .ok_or_else(|| format!("register {name} of thread {tid} is not a number"))?;
            }
        }
        out.push(Thread {
            tid: u32::try_from(tid).map_err(|_| format!("thread id {tid} is out of range"))?,
            regs,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prstatus_gives_the_thread_and_its_registers() {
        let mut desc = vec![0u8; PRSTATUS_REGS + 27 * 8 + 8];
        desc[PRSTATUS_PID..PRSTATUS_PID + 4].copy_from_slice(&4242u32.to_le_bytes());
        let rsp = 19;
        desc[PRSTATUS_REGS + 8 * rsp..PRSTATUS_REGS + 8 * rsp + 8]
            .copy_from_slice(&0x7ffe_1000u64.to_le_bytes());
        let t = from_prstatus(&desc).unwrap();
        assert_eq!((t.tid, t.sp(), t.fs_base()), (4242, 0x7ffe_1000, 0));
        assert!(from_prstatus(&desc[..100]).is_none());
    }

    #[test]
    fn json_threads_take_numbers_and_hex_strings() {
        let t = from_json(r#"[{"tid": 7, "regs": {"rsp": "0x1000", "fs_base": 4096, "xmm0": 1}}]"#).unwrap();
        assert_eq!((t[0].tid, t[0].sp(), t[0].fs_base()), (7, 0x1000, 4096));
        assert!(from_json(r#"[{"regs": {}}]"#).is_err());
        assert!(from_json("{").is_err());
    }
}
