//! A snapshot as JSON (`dmem snapshot --format json`), and read back for `dmem diff`.
//!
//! The shape is that of a sample of `dmem top --json`, with the threads of each stack and the
//! objects (path, build id, where mapped) added so that nothing of the snapshot is lost. Frames
//! are listed as `dmem top` lists them: an address inside inlined code gives one entry per
//! function, all with its `pc`, the inlined ones first and marked `"inlined": true`.

use crate::model::snapshot::{Frame, Line, Object, Snapshot, Stack};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
struct JsonSnapshot {
    /// Unix seconds.
    time: f64,
    #[serde(default)]
    source: String,
    live_bytes: i64,
    live_blocks: i64,
    #[serde(default)]
    read_ms: f64,
    #[serde(default)]
    inconsistent_lists: usize,
    #[serde(default)]
    objects: Vec<JsonObject>,
    stacks: Vec<JsonStack>,
}

#[derive(Serialize, Deserialize)]
struct JsonObject {
    path: String,
    build_id: String,
    start: String,
    end: String,
    file_offset: String,
}

#[derive(Serialize, Deserialize)]
struct JsonStack {
    bytes: i64,
    blocks: i64,
    #[serde(default)]
    tids: Vec<u32>,
    frames: Vec<JsonFrame>,
}

#[derive(Serialize, Deserialize)]
pub struct JsonFrame {
    pc: String,
    function: Option<String>,
    file: Option<String>,
    line: Option<u32>,
    object: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    inlined: bool,
}

fn hex(v: u64) -> String {
    format!("{v:#x}")
}

fn unhex(s: &str) -> Result<u64, String> {
    let digits = s.strip_prefix("0x").unwrap_or(s);
    u64::from_str_radix(digits, 16).map_err(|_| format!("'{s}' is not a hexadecimal address"))
}

fn some(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_owned())
}

/// A stack's frames as `dmem top --json` lists them.
pub fn frames(objects: &[Object], frames: &[Frame]) -> Vec<JsonFrame> {
    let mut out = Vec::with_capacity(frames.len());
    for f in frames {
        let pc = hex(f.pc);
        let object = f.object.and_then(|i| objects.get(i)).map(|o| o.path.clone());
        if f.lines.is_empty() {
            out.push(JsonFrame {
                pc,
                function: None,
                file: None,
                line: None,
                object,
                inlined: false,
            });
            continue;
        }
        let last = f.lines.len() - 1;
        for (i, l) in f.lines.iter().enumerate() {
            out.push(JsonFrame {
                pc: pc.clone(),
                function: some(&l.function),
                file: some(&l.file),
                line: (l.line != 0).then_some(l.line),
                object: object.clone(),
                inlined: i < last,
            });
        }
    }
    out
}

pub fn write(snap: &Snapshot, mut out: impl std::io::Write) -> std::io::Result<()> {
    let doc = JsonSnapshot {
        time: seconds(snap.time_nanos),
        source: snap.source.clone(),
        live_bytes: snap.live_bytes(),
        live_blocks: snap.live_blocks(),
        read_ms: snap.read_ms,
        inconsistent_lists: snap.inconsistent_lists,
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
        stacks: snap
            .stacks
            .iter()
            .map(|s| JsonStack {
                bytes: s.bytes,
                blocks: s.blocks,
                tids: s.tids.clone(),
                frames: frames(&snap.objects, &s.frames),
            })
            .collect(),
    };
    serde_json::to_writer(&mut out, &doc)?;
    writeln!(out)
}

/// Unix seconds to the millisecond, as `dmem top --json` gives its times.
pub fn seconds(nanos: i64) -> f64 {
    (nanos as f64 / 1e6).round() / 1e3
}

pub fn read(data: &[u8]) -> Result<Snapshot, String> {
    let doc: JsonSnapshot =
        serde_json::from_slice(data).map_err(|e| format!("not a dmem JSON snapshot: {e}"))?;
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
        stacks.push(Stack {
            bytes: s.bytes,
            blocks: s.blocks,
            tids: s.tids,
            frames,
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
        assert!(v[1].get("inlined").is_none());
        assert_eq!(
            (v[2]["pc"].as_str(), &v[2]["function"]),
            (Some("0x7010"), &serde_json::Value::Null)
        );
        assert_eq!(v[2]["object"], "/lib/libc.so.6");
    }
}
