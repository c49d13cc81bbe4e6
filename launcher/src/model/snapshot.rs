//! The snapshot model: the live blocks of one process at one moment, grouped by allocation
//! stack, with every frame symbolised. `dmem snapshot` writes it (pprof, JSON or folded
//! stacks) and `dmem diff` compares two of them, whether each came from a running process, a
//! core file or a file written earlier.

use crate::model::frames::{folded_key, Folded, Namer};
use crate::model::symbolize::{self, Symbolizer};
use crate::source::heapwalk;
use crate::source::mappings::Mappings;
use crate::source::stack_counts::{Count, StackCounts};
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

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

/// What a stack allocated over the process's life, where the process counted it
/// (`DMEM_OPTS=count-allocs`): pprof's `alloc_objects` and `alloc_space`, and the temporary
/// allocations among them (blocks freed by their thread before it allocated again).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Allocated {
    pub blocks: i64,
    pub bytes: i64,
    pub temporary: i64,
}

/// The live blocks allocated from one stack. In a diff, the counts are NEW minus BASE and may be
/// negative. A process that counted its allocations also lists the stacks that hold no live
/// block, with what they allocated.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Stack {
    pub bytes: i64,
    pub blocks: i64,
    /// The threads that allocated them, ascending.
    pub tids: Vec<u32>,
    /// Innermost first.
    pub frames: Vec<Frame>,
    /// What it allocated ever, where that was counted.
    pub allocated: Option<Allocated>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Snapshot {
    /// When it was taken (a core: when the core was written), nanoseconds since the epoch.
    pub time_nanos: i64,
    /// What it was taken from, for people: "pid 1234 (server)", "server (core ./core.1234)".
    pub source: String,
    pub objects: Vec<Object>,
    /// Biggest first.
    pub stacks: Vec<Stack>,
    /// How long reading the lists took, in milliseconds (0 when read from a file).
    pub read_ms: f64,
    /// Lists that could not be read whole (a running process changed them throughout).
    pub inconsistent_lists: usize,
    /// What was wrong with the lists when they were read (broken links, sizes not believed),
    /// as every command words it; not kept in the files.
    pub warnings: Vec<String>,
    /// Allocations the process counted but its tables had no room to tell by stack.
    pub unattributed: Allocated,
}

impl Snapshot {
    pub fn live_bytes(&self) -> i64 {
        self.stacks.iter().map(|s| s.bytes).sum()
    }

    /// What to say when some lists could not be read whole.
    pub fn inconsistency(&self) -> Option<String> {
        (self.inconsistent_lists > 0).then(|| {
            format!(
                "{} lists changed too fast to be read whole; their blocks are as last read",
                self.inconsistent_lists
            )
        })
    }

    pub fn live_blocks(&self) -> i64 {
        self.stacks.iter().map(|s| s.blocks).sum()
    }

    /// Whether the process counted its allocations per stack (`count-allocs`).
    pub fn counted(&self) -> bool {
        self.stacks.iter().any(|s| s.allocated.is_some())
    }

    /// Biggest first, then most blocks, then by first frame: the order every output uses.
    pub fn sort(&mut self) {
        self.stacks.sort_by(|a, b| {
            (b.bytes, b.blocks).cmp(&(a.bytes, a.blocks)).then_with(|| {
                let first = |s: &Stack| s.frames.first().map(|f| (f.pc, f.function().map(str::to_owned)));
                first(a).cmp(&first(b))
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
                // A frame with no object is its address, or, where it has none (a group of a
                // heap read without stacks: by type and size), its name.
                None if f.pc == 0 => (f.function().unwrap_or_default().to_owned(), 0),
                None => (String::new(), f.pc),
            })
            .collect()
    }

    /// Folded stacks (`outer;...;inner bytes`, one line per stack, sorted), as gdb's
    /// `dmem folded` writes them for flame-graph tools; inlined functions get a frame each.
    pub fn folded(&self) -> String {
        let mut folded = Folded::default();
        for s in self.stacks.iter().filter(|s| s.bytes != 0 || s.blocks != 0) {
            let mut names: Vec<String> = Vec::new();
            for f in s.frames.iter().rev() {
                if f.lines.is_empty() || f.function().is_none() {
                    names.push(format!("{:#x}", f.pc));
                    continue;
                }
                names.extend(f.lines.iter().rev().map(|l| l.function.clone()));
            }
            folded.add(folded_key(names), s.bytes);
        }
        folded.text()
    }
}

/// Groups and symbolises the blocks a walk found, with what each stack allocated where the
/// process counted it (`counts`): then the stacks that hold no live block are listed too.
pub fn from_walk(
    walk: &heapwalk::Walk,
    counts: Option<&StackCounts>,
    maps: Mappings,
    main: Option<&Path>,
    source: String,
    when: SystemTime,
    read_ms: f64,
) -> Snapshot {
    let listed = listed(walk, counts);
    let mut maps = maps;
    maps.fill_build_ids();
    let mut sym = Symbolizer::new(maps.clone());
    let (mut objects, mut stacks) = symbolised(listed, counts, &maps, &mut sym);
    if let Some(main) = main {
        main_first(main, &mut objects, &mut stacks);
    }
    let mut snap = Snapshot {
        time_nanos: nanos_since_epoch(when),
        source,
        objects,
        stacks,
        read_ms,
        inconsistent_lists: walk.moving(),
        warnings: Vec::new(),
        unattributed: counts.map_or_else(Allocated::default, |c| allocated(c.overflow)),
    };
    let problems = walk.problems();
    if !problems.is_empty() {
        let mut namer = Namer::new(sym);
        snap.warnings = crate::model::heap::warnings(&problems, &walk.blocks, &walk.stacks, &mut namer);
    }
    snap.sort();
    snap
}

/// The snapshot of a heap read without libdmem's stacks (through glibc's heap): its groups by
/// C++ type and size (`model::bare`), each a stack of one frame named for the group, with no
/// address and no thread; `warnings` are what the reading said (the note on glibc's heap
/// among them).
pub fn from_groups(
    heap: &crate::model::heap::Heap,
    source: String,
    when: SystemTime,
    read_ms: f64,
    warnings: Vec<String>,
) -> Snapshot {
    let groups = crate::model::heap::group(&heap.blocks, &heap.stacks);
    let stacks = groups
        .iter()
        .filter(|g| g.blocks > 0)
        .map(|g| Stack {
            bytes: g.bytes as i64,
            blocks: g.blocks as i64,
            tids: Vec::new(),
            frames: vec![Frame {
                pc: 0,
                object: None,
                lines: vec![Line {
                    function: heap.labels.get(g.stack as usize).cloned().unwrap_or_default(),
                    file: String::new(),
                    line: 0,
                }],
            }],
            allocated: None,
        })
        .collect();
    let mut snap = Snapshot {
        time_nanos: nanos_since_epoch(when),
        source,
        objects: Vec::new(),
        stacks,
        read_ms,
        inconsistent_lists: 0,
        warnings,
        unattributed: Allocated::default(),
    };
    snap.sort();
    snap
}

/// One stack to list: its return addresses, live bytes, live blocks and allocating threads.
type Listed<'a> = (&'a [u64], u64, u64, Vec<u32>);

/// Each stack with its live blocks, then those of the counted stacks that hold none.
fn listed<'a>(walk: &'a heapwalk::Walk, counts: Option<&'a StackCounts>) -> Vec<Listed<'a>> {
    let groups = crate::model::heap::group(&walk.blocks, &walk.stacks);
    let mut listed: Vec<Listed> = groups
        .iter()
        .map(|g| {
            (
                &walk.stacks[g.stack as usize][..],
                g.bytes,
                g.blocks,
                g.tids.clone(),
            )
        })
        .collect();
    if let Some(c) = counts {
        let live: HashSet<&[u64]> = listed.iter().map(|l| l.0).collect();
        let mut gone: Vec<&[u64]> = c
            .stacks
            .keys()
            .map(|k| &k[..])
            .filter(|k| !live.contains(k))
            .collect();
        gone.sort_unstable();
        listed.extend(gone.into_iter().map(|k| (k, 0, 0, Vec::new())));
    }
    listed
}

/// A count of the process's as the snapshot keeps it.
fn allocated(n: Count) -> Allocated {
    Allocated {
        blocks: n.allocs as i64,
        bytes: n.bytes as i64,
        temporary: n.temporary as i64,
    }
}

/// The listed stacks with their frames symbolised, and the objects those frames lie in, in the
/// order first seen.
fn symbolised(
    listed: Vec<Listed>,
    counts: Option<&StackCounts>,
    maps: &Mappings,
    sym: &mut Symbolizer,
) -> (Vec<Object>, Vec<Stack>) {
    let mut objects: Vec<Object> = Vec::new();
    // The executable mapping's start, to its index in `objects`.
    let mut object_at: HashMap<u64, usize> = HashMap::new();
    let mut stacks = Vec::with_capacity(listed.len());
    for (pcs, bytes, blocks, tids) in listed {
        let mut frames = Vec::with_capacity(pcs.len());
        for &pc in pcs.iter() {
            let object = object_of(maps, pc, &mut objects, &mut object_at);
            frames.push(Frame {
                pc,
                object,
                lines: lines_of(&sym.frames(pc)),
            });
        }
        stacks.push(Stack {
            bytes: bytes as i64,
            blocks: blocks as i64,
            tids,
            frames,
            allocated: counts.map(|c| allocated(c.stacks.get(pcs).copied().unwrap_or_default())),
        });
    }
    (objects, stacks)
}

/// The main program's object moved to the front, as pprof wants its mapping first, and the
/// frames renumbered to match.
fn main_first(main: &Path, objects: &mut Vec<Object>, stacks: &mut [Stack]) {
    let Some(i) = objects.iter().position(|o| Path::new(&o.path) == main) else {
        return;
    };
    let order: Vec<usize> = std::iter::once(i)
        .chain((0..objects.len()).filter(|&j| j != i))
        .collect();
    let mut new_index = vec![0; objects.len()];
    for (new, &old) in order.iter().enumerate() {
        new_index[old] = new;
    }
    *objects = order.iter().map(|&j| objects[j].clone()).collect();
    for f in stacks.iter_mut().flat_map(|s| s.frames.iter_mut()) {
        f.object = f.object.map(|j| new_index[j]);
    }
}

/// `when` in nanoseconds since the epoch, or 0 before it.
fn nanos_since_epoch(when: SystemTime) -> i64 {
    when.duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

/// The object `pc` lies in, added to `objects` when first seen.
fn object_of(
    maps: &Mappings,
    pc: u64,
    objects: &mut Vec<Object>,
    object_at: &mut HashMap<u64, usize>,
) -> Option<usize> {
    let m = maps.find(pc)?;
    let path = m.path.as_ref()?;
    if let Some(&i) = object_at.get(&m.start) {
        return Some(i);
    }
    objects.push(Object {
        path: path.to_string_lossy().into_owned(),
        build_id: m.build_id.clone().unwrap_or_default(),
        start: m.start,
        end: m.end,
        file_offset: m.offset,
    });
    object_at.insert(m.start, objects.len() - 1);
    Some(objects.len() - 1)
}

/// The symboliser's frames of one address (inlined first, as pprof wants them) as lines.
fn lines_of(frames: &[symbolize::Frame]) -> Vec<Line> {
    if frames.iter().all(|f| f.function.is_none()) {
        return Vec::new();
    }
    frames
        .iter()
        .map(|f| Line {
            function: f.function.clone().unwrap_or_default(),
            file: f.file.clone().unwrap_or_default(),
            line: f.line.unwrap_or(0),
        })
        .collect()
}

/// A stack's frames for people, one line each, as `dmem top` prints them: inlined functions get
/// a line of their own.
pub fn describe_frames(objects: &[Object], frames: &[Frame]) -> Vec<String> {
    symbolic(objects, frames)
        .iter()
        .map(crate::model::frames::text)
        .collect()
}

/// A stack's frames as the symboliser gives them, which every writer of frames takes: one per
/// function, the inlined ones first, each with its address and object.
pub fn symbolic(objects: &[Object], frames: &[Frame]) -> Vec<symbolize::Frame> {
    let mut out = Vec::new();
    for f in frames {
        let object: Option<std::rc::Rc<Path>> = f
            .object
            .and_then(|i| objects.get(i))
            .map(|o| std::rc::Rc::from(Path::new(&o.path)));
        let bare = symbolize::Frame::bare(f.pc, object);
        if f.lines.is_empty() {
            out.push(bare);
            continue;
        }
        let last = f.lines.len() - 1;
        for (i, l) in f.lines.iter().enumerate() {
            out.push(symbolize::Frame {
                function: Some(l.function.clone()).filter(|f| !f.is_empty()),
                file: Some(l.file.clone()).filter(|f| !f.is_empty()),
                line: (l.line != 0).then_some(l.line),
                inlined: i < last,
                ..bare.clone()
            });
        }
    }
    out
}

#[cfg(test)]
pub mod tests {
    use super::*;

    /// A small snapshot with inlined frames, an unsymbolised one and a negative count.
    pub fn sample() -> Snapshot {
        let line = |function: &str, file: &str, line: u32| Line {
            function: function.into(),
            file: file.into(),
            line,
        };
        Snapshot {
            time_nanos: 1_700_000_000_123_456_789,
            source: "pid 42".into(),
            objects: vec![
                Object {
                    path: "/bin/prog".into(),
                    build_id: "abcd".into(),
                    start: 0x1000,
                    end: 0x2000,
                    file_offset: 0x1000,
                },
                Object {
                    path: "/lib/libc.so.6".into(),
                    build_id: String::new(),
                    start: 0x7000,
                    end: 0x8000,
                    file_offset: 0,
                },
            ],
            stacks: vec![
                Stack {
                    bytes: 2048,
                    blocks: 1,
                    tids: vec![7, 9],
                    frames: vec![
                        Frame {
                            pc: 0x1010,
                            object: Some(0),
                            lines: vec![line("inlined", "a.h", 3), line("main", "a.c", 15)],
                        },
                        Frame {
                            pc: 0x7010,
                            object: Some(1),
                            lines: vec![],
                        },
                    ],
                    allocated: Some(Allocated {
                        blocks: 10,
                        bytes: 20480,
                        temporary: 3,
                    }),
                },
                Stack {
                    bytes: -96,
                    blocks: -3,
                    tids: vec![7],
                    frames: vec![Frame {
                        pc: 0x1010,
                        object: Some(0),
                        lines: vec![line("inlined", "a.h", 3), line("main", "a.c", 15)],
                    }],
                    allocated: Some(Allocated::default()),
                },
            ],
            ..Snapshot::default()
        }
    }

    #[test]
    fn folded_stacks_name_every_function_outermost_first() {
        assert_eq!(sample().folded(), "0x7010;main;inlined 2048\nmain;inlined -96\n");
    }
}
