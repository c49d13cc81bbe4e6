//! Heap profiles in pprof's format: a snapshot as a gzipped `perftools.profiles.Profile`, the
//! format `pprof -http`, Grafana Pyroscope, Parca, speedscope and the Perfetto UI read, and the
//! same profiles read back (for `dmem diff` of files written earlier).
//!
//! The messages are written out with prost's derive, so building needs no protoc. Field numbers
//! and types are exactly those of `proto/profile.proto` in github.com/google/pprof; messages and
//! fields dmem does not use are left out, which protobuf readers accept (a missing field is its
//! default), and fields it does not know are skipped when reading.

use crate::model::snapshot::{Allocated, Frame, Line, Object, Snapshot, Stack};
use prost::Message;
use std::collections::HashMap;
use std::io::{Read, Write};

/// `message Profile` of profile.proto.
#[derive(Clone, PartialEq, Message)]
pub struct Profile {
    #[prost(message, repeated, tag = "1")]
    pub sample_type: Vec<ValueType>,
    #[prost(message, repeated, tag = "2")]
    pub sample: Vec<Sample>,
    #[prost(message, repeated, tag = "3")]
    pub mapping: Vec<Mapping>,
    #[prost(message, repeated, tag = "4")]
    pub location: Vec<Location>,
    #[prost(message, repeated, tag = "5")]
    pub function: Vec<Function>,
    #[prost(string, repeated, tag = "6")]
    pub string_table: Vec<String>,
    #[prost(int64, tag = "7")]
    pub drop_frames: i64,
    #[prost(int64, tag = "8")]
    pub keep_frames: i64,
    #[prost(int64, tag = "9")]
    pub time_nanos: i64,
    #[prost(int64, tag = "10")]
    pub duration_nanos: i64,
    #[prost(message, optional, tag = "11")]
    pub period_type: Option<ValueType>,
    #[prost(int64, tag = "12")]
    pub period: i64,
    #[prost(int64, repeated, tag = "13")]
    pub comment: Vec<i64>,
    #[prost(int64, tag = "14")]
    pub default_sample_type: i64,
}

/// `message ValueType`: indices into the string table.
#[derive(Clone, PartialEq, Message)]
pub struct ValueType {
    #[prost(int64, tag = "1")]
    pub r#type: i64,
    #[prost(int64, tag = "2")]
    pub unit: i64,
}

/// `message Sample`: the leaf is at `location_id[0]`.
#[derive(Clone, PartialEq, Message)]
pub struct Sample {
    #[prost(uint64, repeated, tag = "1")]
    pub location_id: Vec<u64>,
    #[prost(int64, repeated, tag = "2")]
    pub value: Vec<i64>,
    #[prost(message, repeated, tag = "3")]
    pub label: Vec<Label>,
}

/// `message Label`: `str` or `num` is set.
#[derive(Clone, PartialEq, Message)]
pub struct Label {
    #[prost(int64, tag = "1")]
    pub key: i64,
    #[prost(int64, tag = "2")]
    pub str: i64,
    #[prost(int64, tag = "3")]
    pub num: i64,
    #[prost(int64, tag = "4")]
    pub num_unit: i64,
}

/// `message Mapping`.
#[derive(Clone, PartialEq, Message)]
pub struct Mapping {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(uint64, tag = "2")]
    pub memory_start: u64,
    #[prost(uint64, tag = "3")]
    pub memory_limit: u64,
    #[prost(uint64, tag = "4")]
    pub file_offset: u64,
    #[prost(int64, tag = "5")]
    pub filename: i64,
    #[prost(int64, tag = "6")]
    pub build_id: i64,
    #[prost(bool, tag = "7")]
    pub has_functions: bool,
    #[prost(bool, tag = "8")]
    pub has_filenames: bool,
    #[prost(bool, tag = "9")]
    pub has_line_numbers: bool,
    #[prost(bool, tag = "10")]
    pub has_inline_frames: bool,
}

/// `message Location`: with several lines, the last is the function the others were inlined
/// into.
#[derive(Clone, PartialEq, Message)]
pub struct Location {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(uint64, tag = "2")]
    pub mapping_id: u64,
    #[prost(uint64, tag = "3")]
    pub address: u64,
    #[prost(message, repeated, tag = "4")]
    pub line: Vec<ProtoLine>,
    #[prost(bool, tag = "5")]
    pub is_folded: bool,
}

/// `message Line`.
#[derive(Clone, PartialEq, Message)]
pub struct ProtoLine {
    #[prost(uint64, tag = "1")]
    pub function_id: u64,
    #[prost(int64, tag = "2")]
    pub line: i64,
}

/// `message Function`.
#[derive(Clone, PartialEq, Message)]
pub struct Function {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(int64, tag = "2")]
    pub name: i64,
    #[prost(int64, tag = "3")]
    pub system_name: i64,
    #[prost(int64, tag = "4")]
    pub filename: i64,
    #[prost(int64, tag = "5")]
    pub start_line: i64,
}

/// The label key under which each sample carries the ids of the threads that allocated it.
pub const THREAD_LABEL: &str = "thread_id";

/// The string table: index 0 is the empty string, as profile.proto requires.
struct Strings {
    table: Vec<String>,
    index: HashMap<String, i64>,
}

impl Strings {
    fn new() -> Strings {
        let mut s = Strings {
            table: Vec::new(),
            index: HashMap::new(),
        };
        s.get("");
        s
    }

    fn get(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.table.len() as i64;
        self.table.push(s.to_owned());
        self.index.insert(s.to_owned(), i);
        i
    }
}

/// The sample type of the temporary allocations, after Go's four: blocks freed by their thread
/// before it allocated again.
pub const TEMPORARY: &str = "temporary_objects";

/// The snapshot as a Profile message. Counts may be negative (a diff), as `pprof -diff_base`
/// produces too. A snapshot of a process that counted its allocations carries Go's heap profile
/// sample types, `alloc_objects`, `alloc_space`, `inuse_objects` and `inuse_space`, and then
/// `temporary_objects`; otherwise only the two `inuse` ones.
pub fn to_profile(snap: &Snapshot) -> Profile {
    // The order strings are first asked for is the order of the string table: the sample types'
    // first, then the mappings', the functions', the comments', as dmem has always written them.
    let mut strings = Strings::new();
    let counted = snap.counted();
    let objects = strings.get("inuse_objects");
    let count = strings.get("count");
    let space = strings.get("inuse_space");
    let bytes = strings.get("bytes");
    let thread = strings.get(THREAD_LABEL);
    let (mapping, mapping_id) = mappings(snap, &mut strings);
    let mut places = Places::new(mapping_id);
    let sample = snap
        .stacks
        .iter()
        .map(|s| Sample {
            location_id: s
                .frames
                .iter()
                .map(|f| places.location(f, &mut strings))
                .collect(),
            value: values(s, counted),
            label: s
                .tids
                .iter()
                .map(|&t| Label {
                    key: thread,
                    num: t as i64,
                    ..Label::default()
                })
                .collect(),
        })
        .collect();
    let comment = comments(snap, counted, &mut strings);
    let vt = |r#type, unit| ValueType { r#type, unit };
    let sample_type = if counted {
        vec![
            vt(strings.get("alloc_objects"), count),
            vt(strings.get("alloc_space"), bytes),
            vt(objects, count),
            vt(space, bytes),
            vt(strings.get(TEMPORARY), count),
        ]
    } else {
        vec![vt(objects, count), vt(space, bytes)]
    };
    Profile {
        sample_type,
        sample,
        mapping,
        location: places.location,
        function: places.function,
        string_table: strings.table,
        time_nanos: snap.time_nanos,
        // Every block is counted: no sampling, so one event per byte.
        period_type: Some(vt(space, bytes)),
        period: 1,
        comment,
        default_sample_type: space,
        ..Profile::default()
    }
}

/// The objects some frame lies in, as mappings (pprof wants the main program first, which the
/// snapshot's object list already puts there); and each object's mapping id, 0 for none.
fn mappings(snap: &Snapshot, strings: &mut Strings) -> (Vec<Mapping>, Vec<u64>) {
    // Per object: used, and whether any of its frames has a function, a file, a line.
    let mut seen: Vec<Option<(bool, bool, bool)>> = vec![None; snap.objects.len()];
    for f in snap.stacks.iter().flat_map(|s| &s.frames) {
        if let Some(s) = f.object.and_then(|i| seen.get_mut(i)) {
            let s = s.get_or_insert((false, false, false));
            s.0 |= f.function().is_some();
            s.1 |= f.lines.iter().any(|l| !l.file.is_empty());
            s.2 |= f.lines.iter().any(|l| l.line != 0);
        }
    }
    let mut mapping = Vec::new();
    let mut mapping_id = vec![0u64; snap.objects.len()];
    for (i, o) in snap.objects.iter().enumerate() {
        let Some((has_functions, has_filenames, has_line_numbers)) = seen[i] else {
            continue;
        };
        mapping_id[i] = mapping.len() as u64 + 1;
        mapping.push(Mapping {
            id: mapping_id[i],
            memory_start: o.start,
            memory_limit: o.end,
            file_offset: o.file_offset,
            filename: strings.get(&o.path),
            build_id: strings.get(&o.build_id),
            has_functions,
            has_filenames,
            has_line_numbers,
            has_inline_frames: has_functions,
        });
    }
    (mapping, mapping_id)
}

/// The locations and functions of a profile, each written once, numbered from 1.
struct Places<'a> {
    mapping_id: Vec<u64>,
    location: Vec<Location>,
    location_ids: HashMap<(u64, u64, &'a [Line]), u64>,
    function: Vec<Function>,
    function_ids: HashMap<(&'a str, &'a str), u64>,
}

impl<'a> Places<'a> {
    fn new(mapping_id: Vec<u64>) -> Places<'a> {
        Places {
            mapping_id,
            location: Vec::new(),
            location_ids: HashMap::new(),
            function: Vec::new(),
            function_ids: HashMap::new(),
        }
    }

    /// The id of the location of frame `f`.
    fn location(&mut self, f: &'a Frame, strings: &mut Strings) -> u64 {
        let map = f
            .object
            .and_then(|i| self.mapping_id.get(i).copied())
            .unwrap_or(0);
        let key = (map, f.pc, f.lines.as_slice());
        if let Some(&id) = self.location_ids.get(&key) {
            return id;
        }
        let line = f
            .lines
            .iter()
            .map(|l| ProtoLine {
                function_id: self.function(l, strings),
                line: l.line as i64,
            })
            .collect();
        let id = self.location.len() as u64 + 1;
        self.location.push(Location {
            id,
            mapping_id: map,
            address: f.pc,
            line,
            is_folded: false,
        });
        self.location_ids.insert(key, id);
        id
    }

    /// The id of the function of line `l`.
    fn function(&mut self, l: &'a Line, strings: &mut Strings) -> u64 {
        let key = (l.function.as_str(), l.file.as_str());
        if let Some(&id) = self.function_ids.get(&key) {
            return id;
        }
        let id = self.function.len() as u64 + 1;
        let name = strings.get(&l.function);
        self.function.push(Function {
            id,
            name,
            system_name: name,
            filename: strings.get(&l.file),
            start_line: 0,
        });
        self.function_ids.insert(key, id);
        id
    }
}

/// A stack's values, in the order of the sample types.
fn values(s: &Stack, counted: bool) -> Vec<i64> {
    if counted {
        let a = s.allocated.unwrap_or_default();
        vec![a.blocks, a.bytes, s.blocks, s.bytes, a.temporary]
    } else {
        vec![s.blocks, s.bytes]
    }
}

/// What the profile says of itself: whose heap it is, and what it could not tell.
fn comments(snap: &Snapshot, counted: bool, strings: &mut Strings) -> Vec<i64> {
    let mut comment = vec![strings.get(&format!("dmem: live heap of {}", snap.source))];
    if let Some(note) = snap.inconsistency() {
        comment.push(strings.get(&format!("dmem: {note}")));
    }
    let u = snap.unattributed;
    if counted && u.blocks != 0 {
        comment.push(strings.get(&format!(
            "dmem: {} allocations ({} bytes, {} temporary) could not be told by stack",
            u.blocks, u.bytes, u.temporary
        )));
    }
    comment
}

/// The snapshot as a gzipped profile, as pprof writes them to disk.
pub fn write(snap: &Snapshot, out: impl Write) -> std::io::Result<()> {
    let raw = to_profile(snap).encode_to_vec();
    let mut gz = flate2::write::GzEncoder::new(out, flate2::Compression::default());
    gz.write_all(&raw)?;
    gz.finish()?.flush()
}

/// Whether `data` starts like a gzipped file.
pub fn is_gzip(data: &[u8]) -> bool {
    data.starts_with(&[0x1f, 0x8b])
}

/// A profile (gzipped or not) read back as a snapshot: the counts come from the
/// `inuse_objects` and `inuse_space` sample types, the threads from the `thread_id` labels.
pub fn read(data: &[u8]) -> Result<Snapshot, String> {
    let p = decode(data)?;
    let cols = columns(&p)?;
    let (objects, object_of) = objects(&p)?;
    let frames = frames(&p, &object_of)?;
    let mut expanded = 0u64;
    let stacks = p
        .sample
        .iter()
        .map(|smp| stack(&p, smp, &frames, &cols, &mut expanded))
        .collect::<Result<Vec<_>, _>>()?;
    let mut snap = Snapshot {
        time_nanos: p.time_nanos,
        source: source(&p),
        objects,
        stacks,
        ..Snapshot::default()
    };
    snap.sort();
    Ok(snap)
}

/// The most a profile may unzip to: far above any heap profile (Go's of a large service are a
/// few megabytes), while a gzip bomb of one megabyte unzips to a gigabyte.
pub const MAX_UNZIPPED: u64 = 64 << 20;

/// The most messages of each kind (samples, locations, lines, functions, strings, mappings)
/// a profile may hold, and the most location ids its samples may name in all: what prost
/// decodes a message into is some ten times its encoding, so the encoding is counted first.
const MAX_MESSAGES: u64 = 2 << 20;
const MAX_SAMPLE_LOCATIONS: u64 = 16 << 20;

/// The most bytes the stacks read from a profile may take: each sample's frames are copied
/// from the locations it names, so a few locations with long names named by many samples would
/// otherwise expand without bound.
const MAX_EXPANDED: u64 = 512 << 20;

/// The profile in `data`, unzipped if it is gzipped, once its string table starts as
/// profile.proto requires.
fn decode(data: &[u8]) -> Result<Profile, String> {
    let mut unzipped = Vec::new();
    let raw = if is_gzip(data) {
        flate2::read::GzDecoder::new(data)
            .take(MAX_UNZIPPED + 1)
            .read_to_end(&mut unzipped)
            .map_err(|e| format!("not a gzipped profile: {e}"))?;
        &unzipped[..]
    } else {
        data
    };
    if raw.len() as u64 > MAX_UNZIPPED {
        return Err(format!(
            "the profile unzips to more than {} MiB, more than a heap profile has",
            MAX_UNZIPPED >> 20
        ));
    }
    count(raw)?;
    let p = Profile::decode(raw).map_err(|e| format!("not a pprof profile: {e}"))?;
    if p.string_table.first().map(String::as_str) != Some("") {
        return Err("not a pprof profile: its string table does not start with \"\"".into());
    }
    Ok(p)
}

/// A varint of the protobuf encoding at `*at`, moving past it.
fn varint(b: &[u8], at: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *b.get(*at)?;
        *at += 1;
        v |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

/// The fields of one message's encoding: (field number, wire type, the bytes of a
/// length-delimited field), or None where the encoding breaks (prost then says why).
fn fields(b: &[u8]) -> impl Iterator<Item = (u64, u64, &[u8])> {
    let mut at = 0;
    std::iter::from_fn(move || {
        if at >= b.len() {
            return None;
        }
        let key = varint(b, &mut at)?;
        let body: &[u8] = match key & 7 {
            0 => {
                varint(b, &mut at)?;
                &[]
            }
            1 => {
                at = at.checked_add(8).filter(|&e| e <= b.len())?;
                &[]
            }
            2 => {
                let len = usize::try_from(varint(b, &mut at)?).ok()?;
                let end = at.checked_add(len).filter(|&e| e <= b.len())?;
                let body = &b[at..end];
                at = end;
                body
            }
            5 => {
                at = at.checked_add(4).filter(|&e| e <= b.len())?;
                &[]
            }
            _ => return None,
        };
        Some((key >> 3, key & 7, body))
    })
}

/// Counts a profile's messages in its encoding, before prost decodes it, and refuses one with
/// more than `MAX_MESSAGES` of a kind or `MAX_SAMPLE_LOCATIONS` location ids in its samples.
fn count(raw: &[u8]) -> Result<(), String> {
    let mut kinds = [0u64; 7];
    let mut ids = 0u64;
    for (field, wire, body) in fields(raw) {
        if (1..=6).contains(&field) {
            kinds[field as usize] += 1;
        }
        match (field, wire) {
            // A sample's location ids, packed (a varint each) or one field each.
            (2, 2) => {
                for (f, w, ids_body) in fields(body) {
                    ids += match (f, w) {
                        (1, 2) => ids_body.iter().filter(|&&b| b & 0x80 == 0).count() as u64,
                        (1, _) => 1,
                        _ => 0,
                    };
                }
            }
            // A location's lines.
            (4, 2) => kinds[0] += fields(body).filter(|f| f.0 == 4).count() as u64,
            _ => {}
        }
        if kinds.iter().any(|&n| n > MAX_MESSAGES) {
            return Err(format!(
                "the profile has more than {MAX_MESSAGES} samples, locations, lines, functions, strings or mappings"
            ));
        }
        if ids > MAX_SAMPLE_LOCATIONS {
            return Err(format!(
                "the profile's samples name more than {MAX_SAMPLE_LOCATIONS} locations in all"
            ));
        }
    }
    Ok(())
}

/// String `i` of the profile's string table.
fn string(p: &Profile, i: i64) -> Result<&str, String> {
    usize::try_from(i)
        .ok()
        .and_then(|i| p.string_table.get(i))
        .map(String::as_str)
        .ok_or_else(|| format!("a string index ({i}) is outside the string table"))
}

/// Where in each sample's values the counts are: the live ones always, the allocated ones
/// (blocks, bytes, temporary) when the profile has them.
struct Columns {
    blocks: usize,
    bytes: usize,
    allocated: (Option<usize>, Option<usize>, Option<usize>),
}

/// The value columns, from the sample types' names; a profile without the live ones is not a
/// heap profile.
fn columns(p: &Profile) -> Result<Columns, String> {
    let mut col = (None, None);
    let mut alloc_col = (None, None, None);
    for (i, t) in p.sample_type.iter().enumerate() {
        match string(p, t.r#type)? {
            "inuse_objects" => col.0 = Some(i),
            "inuse_space" => col.1 = Some(i),
            "alloc_objects" => alloc_col.0 = Some(i),
            "alloc_space" => alloc_col.1 = Some(i),
            TEMPORARY => alloc_col.2 = Some(i),
            _ => {}
        }
    }
    let (Some(blocks), Some(bytes)) = col else {
        return Err(
            "the profile has no inuse_objects and inuse_space sample types: not a heap profile".into(),
        );
    };
    Ok(Columns {
        blocks,
        bytes,
        allocated: alloc_col,
    })
}

/// The mappings as objects, and each mapping id's index among them.
fn objects(p: &Profile) -> Result<(Vec<Object>, HashMap<u64, usize>), String> {
    let mut objects = Vec::new();
    let mut object_of: HashMap<u64, usize> = HashMap::new();
    for m in &p.mapping {
        object_of.insert(m.id, objects.len());
        objects.push(Object {
            path: string(p, m.filename)?.to_owned(),
            build_id: string(p, m.build_id)?.to_owned(),
            start: m.memory_start,
            end: m.memory_limit,
            file_offset: m.file_offset,
        });
    }
    Ok((objects, object_of))
}

/// The locations as frames by location id, their lines named from the functions.
fn frames(p: &Profile, object_of: &HashMap<u64, usize>) -> Result<HashMap<u64, Frame>, String> {
    let functions: HashMap<u64, &Function> = p.function.iter().map(|f| (f.id, f)).collect();
    let mut frames: HashMap<u64, Frame> = HashMap::new();
    for l in &p.location {
        let mut lines = Vec::with_capacity(l.line.len());
        for ln in &l.line {
            let f = functions.get(&ln.function_id).ok_or_else(|| {
                format!(
                    "location {} names a function ({}) the profile lacks",
                    l.id, ln.function_id
                )
            })?;
            lines.push(Line {
                function: string(p, f.name)?.to_owned(),
                file: string(p, f.filename)?.to_owned(),
                line: u32::try_from(ln.line).unwrap_or(0),
            });
        }
        let object = object_of.get(&l.mapping_id).copied();
        frames.insert(
            l.id,
            Frame {
                pc: l.address,
                object,
                lines,
            },
        );
    }
    Ok(frames)
}

/// One sample as a stack: its counts from the columns, its threads from its labels, its frames
/// from the locations it names.
/// `expanded` counts the bytes the stacks read so far take, which `MAX_EXPANDED` bounds.
fn stack(
    p: &Profile,
    smp: &Sample,
    frames: &HashMap<u64, Frame>,
    cols: &Columns,
    expanded: &mut u64,
) -> Result<Stack, String> {
    let value = |c: usize| smp.value.get(c).copied().unwrap_or(0);
    let tids = thread_ids(p, smp)?;
    let frames = smp
        .location_id
        .iter()
        .map(|id| {
            let f = frames
                .get(id)
                .ok_or_else(|| format!("a sample names a location ({id}) the profile lacks"))?;
            *expanded += (std::mem::size_of::<Frame>()
                + f.lines
                    .iter()
                    .map(|l| std::mem::size_of::<Line>() + l.function.len() + l.file.len())
                    .sum::<usize>()) as u64;
            if *expanded > MAX_EXPANDED {
                return Err(format!(
                    "the profile's stacks would take more than {} MiB: its samples name its locations too often",
                    MAX_EXPANDED >> 20
                ));
            }
            Ok(f.clone())
        })
        .collect::<Result<Vec<_>, _>>()?;
    let allocated = match cols.allocated {
        (Some(b), Some(y), t) => Some(Allocated {
            blocks: value(b),
            bytes: value(y),
            temporary: t.map_or(0, value),
        }),
        _ => None,
    };
    Ok(Stack {
        blocks: value(cols.blocks),
        bytes: value(cols.bytes),
        tids,
        frames,
        allocated,
    })
}

/// The ids of the threads a sample's `thread_id` labels name, sorted, each once.
fn thread_ids(p: &Profile, smp: &Sample) -> Result<Vec<u32>, String> {
    let mut tids: Vec<u32> = Vec::new();
    for l in &smp.label {
        if string(p, l.key)? == THREAD_LABEL {
            tids.push(u32::try_from(l.num).unwrap_or(0));
        }
    }
    tids.sort_unstable();
    tids.dedup();
    Ok(tids)
}

/// What the profile is of, from the comment dmem writes, or "a profile".
fn source(p: &Profile) -> String {
    p.comment
        .iter()
        .filter_map(|&c| string(p, c).ok()?.strip_prefix("dmem: live heap of "))
        .next()
        .unwrap_or("a profile")
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gzip(raw: &[u8]) -> Vec<u8> {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        gz.write_all(raw).unwrap();
        gz.finish().unwrap()
    }

    /// A heap profile of one function with a long name, one location, and `samples` samples
    /// naming that location `depth` times each.
    fn amplifier(samples: usize, depth: usize) -> Profile {
        let name = "f".repeat(64 << 10);
        let mut p = Profile {
            string_table: vec![
                String::new(),
                "inuse_objects".into(),
                "inuse_space".into(),
                "count".into(),
                name,
            ],
            ..Profile::default()
        };
        p.sample_type = vec![ValueType { r#type: 1, unit: 3 }, ValueType { r#type: 2, unit: 3 }];
        p.function.push(Function {
            id: 1,
            name: 4,
            ..Function::default()
        });
        p.location.push(Location {
            id: 1,
            line: vec![ProtoLine {
                function_id: 1,
                line: 1,
            }],
            ..Location::default()
        });
        p.sample = (0..samples)
            .map(|_| Sample {
                location_id: vec![1; depth],
                value: vec![1, 1],
                label: Vec::new(),
            })
            .collect();
        p
    }

    #[test]
    fn a_small_profile_that_would_expand_without_bound_is_refused() {
        // About 100 KB gzipped; its stacks would copy the 64 KiB name ten million times.
        let gz = gzip(&amplifier(100_000, 100).encode_to_vec());
        assert!(gz.len() < 1 << 20, "{}", gz.len());
        let e = read(&gz).unwrap_err();
        assert!(e.contains("would take more than 512 MiB"), "{e}");
        // The same shape within bounds reads, every frame of it.
        let small = read(&gzip(&amplifier(10, 3).encode_to_vec())).unwrap();
        assert_eq!(small.stacks.iter().map(|s| s.frames.len()).sum::<usize>(), 30);
    }

    #[test]
    fn a_gzip_bomb_and_too_many_messages_are_refused() {
        let bomb = gzip(&vec![0u8; (MAX_UNZIPPED + 1) as usize]);
        let e = read(&bomb).unwrap_err();
        assert!(e.contains("unzips to more than 64 MiB"), "{e}");
        // Three million empty samples: six megabytes encoded, some 200 MB decoded.
        let many = [0x12u8, 0x00].repeat(3 << 20);
        let e = read(&gzip(&many)).unwrap_err();
        assert!(e.contains("more than 2097152 samples"), "{e}");
        let ids = [0x12u8, 0x84, 0x80, 0x08, 0x0a, 0x80, 0x80, 0x08]
            .iter()
            .copied()
            .chain(std::iter::repeat_n(1u8, 1 << 17))
            .collect::<Vec<_>>();
        let mut deep = Vec::new();
        for _ in 0..130 {
            deep.extend_from_slice(&ids);
        }
        let e = read(&gzip(&deep)).unwrap_err();
        assert!(e.contains("name more than"), "{e}");
    }

    #[test]
    fn any_bytes_read_to_an_answer() {
        // A real profile with seeded random bytes changed, cut or added: never a panic.
        let snap = crate::model::snapshot::tests::sample();
        let raw = to_profile(&snap).encode_to_vec();
        let mut seed = 0x243f6a8885a308d3u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..20_000 {
            let mut b = raw.clone();
            for _ in 0..1 + next() % 4 {
                let at = (next() as usize) % b.len();
                match next() % 3 {
                    0 => b[at] = next() as u8,
                    1 => b.truncate(at.max(1)),
                    _ => b.insert(at, next() as u8),
                }
            }
            let _ = read(&b);
            if next() % 8 == 0 {
                let _ = read(&gzip(&b));
            }
        }
    }

    #[test]
    fn a_snapshot_reads_back_as_written() {
        let snap = crate::model::snapshot::tests::sample();
        let mut gz = Vec::new();
        write(&snap, &mut gz).unwrap();
        assert!(is_gzip(&gz));
        let mut back = read(&gz).unwrap();
        back.sort();
        let mut want = snap.clone();
        want.sort();
        assert_eq!(back, want);
        // Go's four heap sample types and the temporary allocations, for a counted process.
        let p = to_profile(&snap);
        let names: Vec<&str> = p
            .sample_type
            .iter()
            .map(|t| p.string_table[t.r#type as usize].as_str())
            .collect();
        assert_eq!(
            names,
            [
                "alloc_objects",
                "alloc_space",
                "inuse_objects",
                "inuse_space",
                TEMPORARY
            ]
        );
        // One that did not count has the two inuse ones only.
        let mut uncounted = snap.clone();
        uncounted.stacks.iter_mut().for_each(|s| s.allocated = None);
        assert_eq!(to_profile(&uncounted).sample_type.len(), 2);
    }

    #[test]
    fn tables_are_shared_and_the_string_table_starts_empty() {
        let p = to_profile(&crate::model::snapshot::tests::sample());
        assert_eq!(p.string_table[0], "");
        // Both stacks start at the same address: one location, two functions for its lines.
        assert_eq!(p.location.len(), 2);
        assert_eq!(p.function.len(), 2);
        assert_eq!(p.sample[0].location_id[0], p.sample[1].location_id[0]);
        assert_eq!(p.string_table[p.default_sample_type as usize], "inuse_space");
        // Each string once.
        let mut seen = p.string_table.clone();
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), p.string_table.len());
    }

    #[test]
    fn garbage_is_refused_with_a_reason() {
        assert!(read(b"\x1f\x8b\x08garbage").unwrap_err().contains("gzip"));
        assert!(read(&[0xff, 0xff, 0xff])
            .unwrap_err()
            .contains("not a pprof profile"));
        // A valid message that is not a heap profile.
        let p = Profile {
            string_table: vec!["".into(), "cpu".into(), "nanoseconds".into()],
            sample_type: vec![ValueType { r#type: 1, unit: 2 }],
            ..Profile::default()
        };
        assert!(read(&p.encode_to_vec())
            .unwrap_err()
            .contains("not a heap profile"));
    }
}
