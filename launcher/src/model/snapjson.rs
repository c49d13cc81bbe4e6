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

/// The most bytes of JSON a snapshot may be: a snapshot of a million-block heap takes a few
/// tens of megabytes, so this leaves room and keeps a hostile file from costing gigabytes.
pub const MAX_BYTES: usize = 256 << 20;
/// The most JSON values (objects, arrays, strings) a snapshot may hold. Each becomes a struct
/// or a `String`/`Vec` of a few dozen bytes whatever its text's length (`{"pc":"0"}` is ten
/// bytes and a frame of a hundred and fifty), so the count, not the size, bounds the memory a
/// file expands to: about a gigabyte at most.
const MAX_VALUES: usize = 4 << 20;
/// The most mapped objects a snapshot may name: more than Linux's default limit on a
/// process's mappings (`vm.max_map_count`, 65530).
const MAX_OBJECTS: usize = 1 << 16;
/// The most bytes or blocks all stacks may hold together (and each count's bound): far above
/// any heap, and low enough that no sum or difference of two snapshots' counts overflows.
const MAX_TOTAL: i64 = 1 << 60;

/// The JSON values in `data` (objects, arrays and strings), counted up to `MAX_VALUES + 1`
/// without parsing: a scan that knows only where strings begin and end.
fn values(data: &[u8]) -> usize {
    let (mut n, mut in_string, mut escaped) = (0, false, false);
    for &b in data {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'{' | b'[' => n += 1,
            b'"' => {
                n += 1;
                in_string = true;
            }
            _ => {}
        }
        if n > MAX_VALUES {
            break;
        }
    }
    n
}

/// A snapshot as `write` wrote it, from outside input (`dmem diff`'s arguments): bounded in
/// size, in the values it holds (see `MAX_VALUES`), in nesting (serde_json's limit of 128
/// levels) and in its counts; each refusal one line saying why.
pub fn read(data: &[u8]) -> Result<Snapshot, String> {
    if data.len() > MAX_BYTES {
        return Err(format!(
            "the snapshot is more than the {} MiB of JSON one may be",
            MAX_BYTES >> 20
        ));
    }
    if values(data) > MAX_VALUES {
        return Err(format!(
            "the snapshot holds more than {MAX_VALUES} JSON objects, arrays and strings, more than one may"
        ));
    }
    let doc: Sample = serde_json::from_slice(data).map_err(|e| format!("not a dmem JSON snapshot: {e}"))?;
    if doc.objects.len() > MAX_OBJECTS {
        return Err(format!(
            "the snapshot names {} mapped objects, more than the {MAX_OBJECTS} a process may have",
            doc.objects.len()
        ));
    }
    check_counts(&doc.stacks)?;
    if !doc.time.is_finite() || !(0.0..=9e9).contains(&doc.time) {
        return Err(format!(
            "the snapshot's time {} is no time in Unix seconds",
            doc.time
        ));
    }
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
    let stacks = stacks_of(doc.stacks, &objects)?;
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

/// Counts may be negative (a snapshot made from a diff); their sizes are what is bounded, each
/// and in all, so that no sum or difference of them overflows.
fn check_counts(stacks: &[SampleStack]) -> Result<(), String> {
    let (mut all_bytes, mut all_blocks) = (0u64, 0u64);
    let limit = MAX_TOTAL.unsigned_abs();
    for s in stacks {
        let counts = [
            Some(s.bytes),
            Some(s.blocks),
            s.allocs,
            s.alloc_bytes,
            s.temporary_allocs,
        ];
        let bad = counts.into_iter().flatten().any(|v| v.unsigned_abs() > limit);
        all_bytes = all_bytes.saturating_add(s.bytes.unsigned_abs());
        all_blocks = all_blocks.saturating_add(s.blocks.unsigned_abs());
        if bad || all_bytes > limit || all_blocks > limit {
            return Err(format!(
                "a stack of the snapshot holds {} bytes in {} blocks: counts must be within 2^60 either way, in all too",
                s.bytes, s.blocks
            ));
        }
    }
    Ok(())
}

/// The stacks with their frames, each frame's object found by path and address.
fn stacks_of(json: Vec<SampleStack>, objects: &[Object]) -> Result<Vec<Stack>, String> {
    // Each path's objects by start address, to find a frame's object in log time: a file of
    // many objects and many frames must not cost their product.
    let mut by_path: std::collections::HashMap<&str, Vec<(u64, u64, usize)>> = Default::default();
    for (i, o) in objects.iter().enumerate() {
        by_path.entry(&o.path).or_default().push((o.start, o.end, i));
    }
    for spans in by_path.values_mut() {
        spans.sort_unstable();
    }
    let object_of = |path: Option<&String>, pc: u64| {
        let spans = by_path.get(path?.as_str())?;
        let (start, end, i) = spans[spans.partition_point(|s| s.0 <= pc).checked_sub(1)?];
        (start <= pc && pc < end).then_some(i)
    };
    let mut stacks = Vec::with_capacity(json.len());
    for s in json {
        let mut frames: Vec<Frame> = Vec::new();
        // An entry marked inlined continues into the next, which has the same address.
        let mut open = false;
        for jf in s.frames {
            let pc = unhex(&jf.pc)?;
            if !open {
                frames.push(Frame {
                    pc,
                    object: object_of(jf.object.as_ref(), pc),
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
    Ok(stacks)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A seeded xorshift generator, so that a failure repeats.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n.max(1) as u64) as usize
        }
    }

    /// What a snapshot read from JSON holding `values` values may hold: no more stacks, frames
    /// and objects than values, counts within bounds.
    fn within_bounds(snap: &Snapshot, values: usize) {
        let frames: usize = snap.stacks.iter().map(|s| s.frames.len()).sum();
        assert!(snap.stacks.len() + frames + snap.objects.len() <= values);
        assert!(snap.objects.len() <= MAX_OBJECTS);
        assert!(snap.live_bytes().unsigned_abs() <= MAX_TOTAL.unsigned_abs());
        assert!(snap.live_blocks().unsigned_abs() <= MAX_TOTAL.unsigned_abs());
        for s in &snap.stacks {
            for f in &s.frames {
                assert!(f.object.is_none_or(|o| o < snap.objects.len()));
            }
            // What `dmem diff` does with each stack.
            let _ = snap.stack_key(s);
        }
    }

    /// Seeded mutations of a real snapshot's JSON (bytes changed to JSON's own characters or
    /// any, cut, inserted, a piece copied elsewhere so that values nest and repeat): every
    /// one reads to a snapshot within bounds or to one line saying why not, never a panic.
    #[test]
    fn mutated_snapshots_read_to_an_answer_within_bounds() {
        let mut text = Vec::new();
        write(&crate::model::snapshot::tests::sample(), &mut text).unwrap();
        let alphabet = b"{}[]\",:0123456789-+.eE \\tnul";
        let mut rng = Rng(0x6a09_e667_f3bc_c908);
        let (mut read_ok, mut refused) = (0, 0);
        for _ in 0..20_000 {
            let mut b = text.clone();
            for _ in 0..1 + rng.below(4) {
                let at = rng.below(b.len());
                match rng.below(5) {
                    0 => b[at] = alphabet[rng.below(alphabet.len())],
                    1 => b[at] = rng.next() as u8,
                    2 => b.truncate(at.max(1)),
                    3 => b.insert(at, alphabet[rng.below(alphabet.len())]),
                    _ => {
                        let from = rng.below(b.len());
                        let piece: Vec<u8> = b[from..(from + rng.below(200)).min(b.len())].to_vec();
                        let at = rng.below(b.len());
                        b.splice(at..at, piece);
                    }
                }
            }
            match read(&b) {
                Ok(snap) => {
                    within_bounds(&snap, values(&b));
                    read_ok += 1;
                }
                Err(why) => {
                    assert!(!why.contains('\n') && !why.is_empty(), "{why:?}");
                    refused += 1;
                }
            }
        }
        // The mutations reach both ends: some still read, most are refused.
        assert!(
            read_ok > 500 && refused > 5_000,
            "{read_ok} read, {refused} refused"
        );
    }

    /// The bounds, each at its edge: size, values, nesting, objects, counts and time; and a
    /// file of many objects and frames is read in time linear in them.
    #[test]
    fn what_exceeds_a_bound_is_refused_in_one_line() {
        let refused = |data: &[u8], want: &str| {
            let why = read(data)
                .err()
                .unwrap_or_else(|| panic!("read, wanted {want:?}"));
            assert!(why.contains(want) && !why.contains('\n'), "{why}");
        };
        let mut big = vec![b' '; MAX_BYTES + 1];
        big[0] = b'{';
        refused(&big, "256 MiB");
        drop(big);
        let mut many = b"[".to_vec();
        for _ in 0..=MAX_VALUES {
            many.extend_from_slice(b"\"\",");
        }
        refused(&many, "more than 4194304 JSON");
        drop(many);
        // Nesting deeper than serde_json's limit is refused, not a stack overflow.
        refused(&b"[".repeat(100_000), "not a dmem JSON snapshot");
        let doc = |stacks: &str, objects: &str, time: &str| {
            format!(
                r#"{{"time":{time},"live_bytes":0,"live_blocks":0,"objects":[{objects}],"stacks":[{stacks}]}}"#
            )
        };
        let stack = |bytes: i64, blocks: i64| format!(r#"{{"bytes":{bytes},"blocks":{blocks},"frames":[]}}"#);
        assert!(read(doc(&stack(64, 1), "", "1").as_bytes()).is_ok());
        assert!(read(doc(&stack(-64, -1), "", "1").as_bytes()).is_ok());
        refused(
            doc(&stack(-MAX_TOTAL - 1, 1), "", "1").as_bytes(),
            "counts must be",
        );
        let two = [stack(MAX_TOTAL, 1), stack(MAX_TOTAL, 1)].join(",");
        refused(doc(&two, "", "1").as_bytes(), "in all too");
        refused(doc("", "", "1e300").as_bytes(), "no time");
        let object = |i: usize| {
            format!(
                r#"{{"path":"/lib/x.so","build_id":"","start":"{:#x}","end":"{:#x}","file_offset":"0x0"}}"#,
                i * 0x1000,
                i * 0x1000 + 0x1000
            )
        };
        let objects: Vec<String> = (0..=MAX_OBJECTS).map(object).collect();
        refused(doc("", &objects.join(","), "1").as_bytes(), "mapped objects");
        // As many objects of one path as allowed, and as many frames: each frame finds its own.
        let n = MAX_OBJECTS;
        let frames: Vec<String> = (0..n)
            .map(|i| format!(r#"{{"pc":"{:#x}","object":"/lib/x.so"}}"#, i * 0x1000 + 8))
            .collect();
        let one = format!(r#"{{"bytes":1,"blocks":1,"frames":[{}]}}"#, frames.join(","));
        let snap = read(doc(&one, &objects[..n].join(","), "1").as_bytes()).unwrap();
        let found: Vec<Option<usize>> = snap.stacks[0].frames.iter().map(|f| f.object).collect();
        assert!(found.iter().enumerate().all(|(i, o)| *o == Some(i)));
    }

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
