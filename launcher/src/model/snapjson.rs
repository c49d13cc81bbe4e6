//! The heap as JSON in one shape, `Sample`: a snapshot (`dmem snapshot --format json`, read back
//! for `dmem diff`), a sample of `dmem top --json` and a diff (`dmem diff --json`). A snapshot
//! carries the threads of each stack and the objects (path, build id, where mapped) so that
//! nothing of it is lost. An address inside inlined code gives one frame per function, all
//! with its `pc`, the inlined ones first and marked `"inlined": true`; frames are
//! `model::frames::JsonFrame`, as every command writes them.

use crate::model::frames::{self, JsonFrame};
use crate::model::snapshot::{self as snapshot_model, Allocated, Frame, Line, Object, Snapshot, Stack};
use serde::{Deserialize, Serialize};

/// One sample of the heap as JSON, the one shape of `dmem top --json` (one per line), `dmem
/// snapshot --format json` and `dmem diff --json`. Each fills what it knows: a snapshot adds the
/// objects and each stack's threads; `top` and `diff` add the changes, `diff` the base's time.
#[derive(Serialize, Deserialize)]
pub struct Sample {
    /// Unix seconds.
    pub time: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_time: Option<f64>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub source: String,
    pub live_bytes: i64,
    pub live_blocks: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delta_bytes: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delta_blocks: Option<i64>,
    #[serde(default)]
    pub read_ms: f64,
    #[serde(default)]
    pub inconsistent_lists: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unchanged_stacks: Option<usize>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub objects: Vec<JsonObject>,
    pub stacks: Vec<SampleStack>,
    /// `top` of a process with `history-allocs`: the stacks that allocated most since the
    /// sample before, and how many of those blocks were freed again within that interval.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub temporary: Vec<TemporaryStack>,
}

/// One stack's allocations between two samples: counted by the library (`count-allocs`), or
/// from the history.
#[derive(Serialize, Deserialize)]
pub struct TemporaryStack {
    pub allocs: u64,
    pub allocs_per_s: f64,
    /// From the history: of those, freed again before the interval ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub freed_in_interval: Option<u64>,
    /// Counted: of those, freed by their thread before it allocated again (heaptrack's
    /// temporary allocations), and the stack's blocks freed in the interval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temporary: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temporary_per_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frees: Option<u64>,
    pub frames: Vec<JsonFrame>,
}

/// One stack of a sample, with its frames as `frames` lists them.
#[derive(Serialize, Deserialize)]
pub struct SampleStack {
    pub bytes: i64,
    pub blocks: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delta_bytes: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delta_blocks: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_bytes_per_min: Option<i64>,
    /// `top`'s growth class, or `diff`'s kind of change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tids: Vec<u32>,
    /// Where the process counted its allocations (`count-allocs`): the blocks and bytes the
    /// stack allocated ever, and the temporary allocations among them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocs: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alloc_bytes: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temporary_allocs: Option<i64>,
    pub frames: Vec<JsonFrame>,
}

impl SampleStack {
    /// A stack with its totals and frames only; callers add what else they know.
    pub fn new(bytes: i64, blocks: i64, frames: Vec<JsonFrame>) -> SampleStack {
        SampleStack {
            bytes,
            blocks,
            delta_bytes: None,
            delta_blocks: None,
            rate_bytes_per_min: None,
            class: None,
            tids: Vec::new(),
            allocs: None,
            alloc_bytes: None,
            temporary_allocs: None,
            frames,
        }
    }

    /// With what the stack allocated, where that was counted.
    pub fn with_allocated(self, a: Option<Allocated>) -> SampleStack {
        SampleStack {
            allocs: a.map(|a| a.blocks),
            alloc_bytes: a.map(|a| a.bytes),
            temporary_allocs: a.map(|a| a.temporary),
            ..self
        }
    }
}

#[derive(Serialize, Deserialize)]
pub struct JsonObject {
    path: String,
    build_id: String,
    start: String,
    end: String,
    file_offset: String,
}

fn hex(v: u64) -> String {
    format!("{v:#x}")
}

fn unhex(s: &str) -> Result<u64, String> {
    let digits = s.strip_prefix("0x").unwrap_or(s);
    u64::from_str_radix(digits, 16).map_err(|_| format!("'{s}' is not a hexadecimal address"))
}

/// A stack's frames as `dmem top --json` lists them.
pub fn frames(objects: &[Object], stack: &[Frame]) -> Vec<JsonFrame> {
    snapshot_model::symbolic(objects, stack)
        .iter()
        .map(frames::json)
        .collect()
}

pub fn write(snap: &Snapshot, mut out: impl std::io::Write) -> std::io::Result<()> {
    let doc = Sample {
        time: seconds(snap.time_nanos),
        base_time: None,
        source: snap.source.clone(),
        live_bytes: snap.live_bytes(),
        live_blocks: snap.live_blocks(),
        delta_bytes: None,
        delta_blocks: None,
        read_ms: snap.read_ms,
        inconsistent_lists: snap.inconsistent_lists,
        unchanged_stacks: None,
        objects: snap
            .objects
            .iter()
            .map(|o| JsonObject {
                path: o.path.clone(),
                build_id: o.build_id.clone(),
                start: hex(o.start),
                end: hex(o.end),
                file_offset: hex(o.file_offset),
            })
            .collect(),
        temporary: Vec::new(),
        stacks: snap
            .stacks
            .iter()
            .map(|s| {
                SampleStack {
                    tids: s.tids.clone(),
                    ..SampleStack::new(s.bytes, s.blocks, frames(&snap.objects, &s.frames))
                }
                .with_allocated(s.allocated)
            })
            .collect(),
    };
    print(&doc, &mut out)
}

/// Prints a sample on one line.
pub fn print(sample: &Sample, mut out: impl std::io::Write) -> std::io::Result<()> {
    serde_json::to_writer(&mut out, sample)?;
    writeln!(out)
}

/// Unix seconds to the millisecond, as `dmem top --json` gives its times.
pub fn seconds(nanos: i64) -> f64 {
    (nanos as f64 / 1e6).round() / 1e3
}

pub fn read(data: &[u8]) -> Result<Snapshot, String> {
    let doc: Sample = serde_json::from_slice(data).map_err(|e| format!("not a dmem JSON snapshot: {e}"))?;
    let mut objects = Vec::with_capacity(doc.objects.len());
    for o in &doc.objects {
        objects.push(Object {
            path: o.path.clone(),
            build_id: o.build_id.clone(),
            start: unhex(&o.start)?,
            end: unhex(&o.end)?,
            file_offset: unhex(&o.file_offset)?,
        });
    }
    let mut stacks = Vec::with_capacity(doc.stacks.len());
    for s in doc.stacks {
        let mut frames: Vec<Frame> = Vec::new();
        // An entry marked inlined continues into the next, which has the same address.
        let mut open = false;
        for jf in s.frames {
            let pc = unhex(&jf.pc)?;
            if !open {
                let object = objects
                    .iter()
                    .position(|o| Some(&o.path) == jf.object.as_ref() && o.start <= pc && pc < o.end);
                frames.push(Frame {
                    pc,
                    object,
                    lines: Vec::new(),
                });
            }
            let frame = frames.last_mut().expect("a frame was just pushed");
            if jf.function.is_some() || jf.file.is_some() {
                frame.lines.push(Line {
                    function: jf.function.unwrap_or_default(),
                    file: jf.file.unwrap_or_default(),
                    line: jf.line.unwrap_or(0),
                });
            }
            open = jf.inlined;
        }
        let allocated = s.allocs.map(|blocks| Allocated {
            blocks,
            bytes: s.alloc_bytes.unwrap_or(0),
            temporary: s.temporary_allocs.unwrap_or(0),
        });
        stacks.push(Stack {
            bytes: s.bytes,
            blocks: s.blocks,
            tids: s.tids,
            frames,
            allocated,
        });
    }
    let mut snap = Snapshot {
        time_nanos: (doc.time * 1e3).round() as i64 * 1_000_000,
        source: if doc.source.is_empty() {
            "a JSON snapshot".into()
        } else {
            doc.source
        },
        objects,
        stacks,
        read_ms: doc.read_ms,
        inconsistent_lists: doc.inconsistent_lists,
        warnings: Vec::new(),
        unattributed: Allocated::default(),
    };
    snap.sort();
    Ok(snap)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_reads_back_as_written() {
        let snap = crate::model::snapshot::tests::sample();
        let mut text = Vec::new();
        write(&snap, &mut text).unwrap();
        let mut back = read(&text).unwrap();
        // JSON keeps times to the millisecond.
        assert_eq!(back.time_nanos, 1_700_000_000_123_000_000);
        back.time_nanos = snap.time_nanos;
        let mut want = snap.clone();
        want.sort();
        assert_eq!(back, want);
    }

    #[test]
    fn a_snapshot_of_the_shape_before_text_and_offset_reads() {
        // Frames as snapshots were written before every command wrote them alike: no offset,
        // no text, `inlined` only when true.
        let old = br#"{"time":1700000000.123,"source":"pid 42","live_bytes":64,"live_blocks":2,
            "read_ms":1.5,"inconsistent_lists":0,"stacks":[{"bytes":64,"blocks":2,"tids":[7],
            "frames":[{"pc":"0x1010","function":"inlined","file":"a.h","line":3,"object":null,
            "inlined":true},{"pc":"0x1010","function":"main","file":"main.c","line":15,
            "object":null},{"pc":"0x2020","function":null,"file":null,"line":null,"object":null}]}]}"#;
        let snap = read(old).unwrap();
        let frames = &snap.stacks[0].frames;
        assert_eq!(frames.len(), 2);
        let names: Vec<&str> = frames[0].lines.iter().map(|l| l.function.as_str()).collect();
        assert_eq!((frames[0].pc, names), (0x1010, vec!["inlined", "main"]));
        assert_eq!((frames[1].pc, frames[1].lines.len()), (0x2020, 0));
    }

    #[test]
    fn inlined_frames_are_listed_as_dmem_top_lists_them() {
        let snap = crate::model::snapshot::tests::sample();
        let f = frames(&snap.objects, &snap.stacks[0].frames);
        let v = serde_json::to_value(&f).unwrap();
        assert_eq!(v[0]["function"], "inlined");
        assert_eq!(v[0]["inlined"], true);
        assert_eq!(
            (v[1]["function"].as_str(), v[1]["line"].as_u64()),
            (Some("main"), Some(15))
        );
        assert_eq!(v[1]["inlined"], false);
        assert_eq!(v[1]["text"], "main (a.c:15) in prog");
        assert_eq!(
            (v[2]["pc"].as_str(), &v[2]["function"]),
            (Some("0x7010"), &serde_json::Value::Null)
        );
        assert_eq!(v[2]["object"], "/lib/libc.so.6");
    }
}
