//! Profiles decoded independently of dmem's own encoder: Google's protobuf package for Python,
//! through `tests/python/pprof_decode.py`.
#![allow(dead_code)]

use crate::common::{missing, run::run_limited, text, which};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// A python3 that can import Google's protobuf package: Debian's (python3-protobuf), else the
/// first on PATH. None, with a line saying so, when neither can.
pub fn protobuf_python() -> Option<PathBuf> {
    let candidates = [Some(PathBuf::from("/usr/bin/python3")), which("python3")];
    for py in candidates.into_iter().flatten() {
        let ok = Command::new(&py)
            .args(["-c", "import google.protobuf"])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            return Some(py);
        }
    }
    missing("a python3 that can import google.protobuf (python3-protobuf)");
    None
}

/// The profile at `path` decoded by the Python helper: its tables, and `stacks` resolved.
pub fn decode(py: &Path, path: &Path) -> Value {
    let helper = crate::common::top().join("tests/python/pprof_decode.py");
    let out = run_limited(Command::new(py).arg(helper).arg(path), Duration::from_secs(120));
    assert!(
        out.status.success(),
        "protobuf could not decode {}:\n{}",
        path.display(),
        text(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("the decoder prints JSON")
}

/// The string at `index` of a decoded profile's string table.
pub fn string<'a>(p: &'a Value, index: &Value) -> &'a str {
    p["string_table"][index.as_u64().expect("a string index") as usize]
        .as_str()
        .unwrap()
}

/// Which column of a decoded profile's sample values holds the sample type `name`.
pub fn column(p: &Value, name: &str) -> Option<usize> {
    p["sample_type"]
        .as_array()?
        .iter()
        .position(|t| string(p, &t["type"]) == name)
}

/// The sum of one sample type over every sample of a decoded profile.
pub fn total(p: &Value, name: &str) -> i64 {
    let c = column(p, name).unwrap_or_else(|| panic!("no sample type {name}"));
    p["sample"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["value"][c].as_i64().unwrap())
        .sum()
}
