//! Words both sides write the same way: the library's exit report and the launcher's answers.

/// `1 block`, `2 blocks`.
pub fn plural(n: u64, word: &str) -> String {
    format!("{n} {word}{}", if n == 1 { "" } else { "s" })
}
