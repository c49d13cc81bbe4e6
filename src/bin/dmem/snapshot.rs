//! The snapshot model: the live blocks of one process at one moment, grouped by allocation
//! stack, with every frame symbolised. `dmem snapshot` writes it (pprof, JSON or folded
//! stacks) and `dmem diff` compares two of them, whether each came from a running process, a
//! core file or a file written earlier.

use std::collections::HashMap;

/// Where a snapshot's code addresses lie: one mapped object file.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Object {
    pub path: String,
    /// The GNU build id in lower-case hex, or empty when the object has none (or is gone).
    pub build_id: String,
    /// The address range of its executable mapping and the file offset that range starts at.
    pub start: u64,
    pub end: u64,
    pub file_offset: u64,
}

/// One source line of a frame.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Line {
    pub function: String,
    pub file: String,
    /// 0 when not known.
    pub line: u32,
}

/// One return address of a stack.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Frame {
    pub pc: u64,
    /// Index into `Snapshot::objects`.
    pub object: Option<usize>,
    /// What the address symbolises to: functions inlined at it first, the function whose code it
    /// is last (pprof's order). Empty when nothing is known about it.
    pub lines: Vec<Line>,
}

impl Frame {
    /// The function the address's code belongs to (the outermost of an inlined chain).
    pub fn function(&self) -> Option<&str> {
        self.lines
            .last()
            .map(|l| l.function.as_str())
            .filter(|f| !f.is_empty())
    }
}

/// The live blocks allocated from one stack. In a diff, the counts are NEW minus BASE and may be
/// negative.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Stack {
    pub bytes: i64,
    pub blocks: i64,
    /// The threads that allocated them, ascending.
    pub tids: Vec<u32>,
    /// Innermost first.
    pub frames: Vec<Frame>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Snapshot {
    /// When it was taken (a core: when the core was written), nanoseconds since the epoch.
    pub time_nanos: i64,
    /// What it was taken from, for people: "pid 1234", "core ./core.1234 of ./server".
    pub source: String,
    pub objects: Vec<Object>,
    /// Biggest first.
    pub stacks: Vec<Stack>,
}

impl Snapshot {
    pub fn live_bytes(&self) -> i64 {
        self.stacks.iter().map(|s| s.bytes).sum()
    }

    pub fn live_blocks(&self) -> i64 {
        self.stacks.iter().map(|s| s.blocks).sum()
    }

    /// Biggest first, then most blocks, then by first frame: the order every output uses.
    pub fn sort(&mut self) {
        self.stacks.sort_by(|a, b| {
            (b.bytes, b.blocks).cmp(&(a.bytes, a.blocks)).then_with(|| {
                a.frames
                    .first()
                    .map(|f| f.pc)
                    .cmp(&b.frames.first().map(|f| f.pc))
            })
        });
    }

    /// A stack's identity across snapshots, even of different runs of a program (where the
    /// addresses move): per frame, the object's path and the address's offset in that object,
    /// or the bare address when no object is known.
    pub fn stack_key(&self, stack: &Stack) -> Vec<(String, u64)> {
        stack
            .frames
            .iter()
            .map(|f| match f.object.and_then(|i| self.objects.get(i)) {
                Some(o) => (
                    o.path.clone(),
                    f.pc.wrapping_sub(o.start).wrapping_add(o.file_offset),
                ),
                None => (String::new(), f.pc),
            })
            .collect()
    }

    /// Folded stacks (`outer;...;inner bytes`, one line per stack, sorted), as gdb's
    /// `dmem folded` writes them for flame-graph tools; inlined functions get a frame each.
    pub fn folded(&self) -> String {
        let mut acc: HashMap<String, i64> = HashMap::new();
        for s in &self.stacks {
            let mut names: Vec<String> = Vec::new();
            for f in s.frames.iter().rev() {
                if f.lines.is_empty() || f.function().is_none() {
                    names.push(format!("{:#x}", f.pc));
                    continue;
                }
                for l in f.lines.iter().rev() {
                    names.push(l.function.replace(';', ":").replace('\n', " "));
                }
            }
            let key = if names.is_empty() {
                "[no stack]".to_owned()
            } else {
                names.join(";")
            };
            *acc.entry(key).or_default() += s.bytes;
        }
        let mut lines: Vec<(String, i64)> = acc.into_iter().collect();
        lines.sort();
        lines.into_iter().map(|(k, v)| format!("{k} {v}\n")).collect()
    }
}
