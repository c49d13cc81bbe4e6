//! Numbers, sizes, times and plurals as every command writes them, and JSON documents.

use serde::Serialize;
use std::time::{SystemTime, UNIX_EPOCH};

pub use crate::analysis::words::plural;

/// A JSON document as the analysis commands print it: indented by one space, a newline after.
pub fn dump(doc: &impl Serialize) -> String {
    let mut out = Vec::new();
    let fmt = serde_json::ser::PrettyFormatter::with_indent(b" ");
    let mut ser = serde_json::Serializer::with_formatter(&mut out, fmt);
    doc.serialize(&mut ser).expect("JSON of plain data");
    let mut s = String::from_utf8(out).expect("serde_json writes UTF-8");
    s.push('\n');
    s
}

/// `0x1234`.
pub fn hex(v: u64) -> String {
    format!("{v:#x}")
}

pub fn thousands(v: u64) -> String {
    let s = v.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

pub fn signed(v: i64) -> String {
    let sign = if v > 0 {
        "+"
    } else if v < 0 {
        "-"
    } else {
        ""
    };
    format!("{sign}{}", thousands(v.unsigned_abs()))
}

pub fn bytes_text(v: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if v < 1024 {
        return format!("{v} bytes");
    }
    let (mut x, mut unit) = (v as f64 / 1024.0, 0);
    while x >= 1024.0 && unit < UNITS.len() - 1 {
        x /= 1024.0;
        unit += 1;
    }
    format!("{x:.1} {} ({} bytes)", UNITS[unit], thousands(v))
}

/// A size in the unit that suits it, to a tenth: `512 B`, `4.8 MiB`, for charts and tables
/// where the exact count is elsewhere.
pub fn size_short(v: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let (mut x, mut unit) = (v as f64, 0);
    while x >= 1024.0 && unit < UNITS.len() - 1 {
        x /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{v} B")
    } else {
        format!("{x:.1} {}", UNITS[unit])
    }
}

/// A sparkline of `values` in Unicode's eight block characters, from nothing (a space) to the
/// greatest value (a full block): the height says how much of the most it holds, so a steady
/// series reads as a flat bar and a growing one as a ramp.
pub fn sparkline(values: &[u64]) -> String {
    const BLOCKS: [char; 9] = [' ', '▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let top = values.iter().copied().max().unwrap_or(0);
    values
        .iter()
        .map(|&v| {
            if top == 0 || v == 0 {
                BLOCKS[0]
            } else {
                // Anything above nothing shows at least the lowest block.
                BLOCKS[((v as u128 * 8).div_ceil(top as u128) as usize).clamp(1, 8)]
            }
        })
        .collect()
}

/// `HH:MM:SS` of a time, UTC: the launcher carries no time-zone database.
pub fn clock(t: SystemTime) -> String {
    let s = t.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs() % 86_400;
    format!("{:02}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn numbers_read_well() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(1234567), "1,234,567");
        assert_eq!(signed(-4096), "-4,096");
        assert_eq!(signed(12), "+12");
        assert_eq!(bytes_text(512), "512 bytes");
        assert_eq!(bytes_text(3 << 20), "3.0 MiB (3,145,728 bytes)");
        assert_eq!(size_short(512), "512 B");
        assert_eq!(size_short(5 << 20 | 1 << 19), "5.5 MiB");
        assert_eq!(sparkline(&[0, 1, 4, 8]), " ▁▄█");
        assert_eq!(sparkline(&[7, 7]), "██");
        assert_eq!(sparkline(&[]), "");
        assert_eq!(clock(UNIX_EPOCH + Duration::from_secs(86_400 + 3661)), "01:01:01");
    }
}
