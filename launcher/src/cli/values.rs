//! How the command line's option values are read and checked (numbers, process ids, intervals,
//! leak classes, heuristics), and the help layout every subcommand shares.

/// The same layout for every help text: usage first, so the first line says how to call it.
pub const TEMPLATE: &str = "{usage-heading} {usage}\n\n{about-with-newline}\n{all-args}{after-help}";

/// A number, decimal or 0x-prefixed hexadecimal.
pub fn parse_number(s: &str) -> Result<u64, String> {
    let v = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16),
        None => s.parse(),
    };
    v.map_err(|_| format!("'{s}' is not a number (decimal, or hexadecimal with 0x)"))
}

/// Leak classes a command picks, in the order output lists them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Classes(pub Vec<crate::analysis::reach::Class>);

/// A `--heuristics` list, as valgrind's `--leak-check-heuristics` spells it.
pub fn parse_heuristics(s: &str) -> Result<u8, String> {
    use crate::analysis::reach::Heuristic;
    Heuristic::parse_set(s).map_err(|w| format!("'{w}' is no heuristic: {}", Heuristic::WORDS))
}

/// A list of leak classes, separated by commas or `+` (`analysis::reach::Class::parse_set`), in
/// the order output lists them.
pub fn parse_show(s: &str) -> Result<Classes, String> {
    use crate::analysis::reach::Class;
    match Class::parse_set(s) {
        Ok(set) => Ok(Classes(Class::in_set(set).collect())),
        Err("") => Err(format!("needs at least one of {}", Class::WORDS)),
        Err(w) => Err(format!("'{w}' is not a leak class: {}", Class::WORDS)),
    }
}

/// A leak-kinds list as valgrind's --show-leak-kinds and --errors-for-leak-kinds take it: the
/// words of `parse_show`, or none.
pub fn parse_kinds(s: &str) -> Result<Classes, String> {
    if s == "none" {
        return Ok(Classes(Vec::new()));
    }
    parse_show(s).map_err(|e| e.replace(" or all", ", all or none"))
}

pub fn parse_pid(s: &str) -> Result<i32, String> {
    match s.parse::<i32>() {
        Ok(p) if p > 0 => Ok(p),
        _ => Err("a process id is a positive number, e.g. $(pidof PROG)".into()),
    }
}

pub fn parse_interval(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && (0.01..=86400.0).contains(&v) => Ok(v),
        _ => Err("the interval is seconds between 0.01 and 86400, e.g. 5 or 0.5".into()),
    }
}

pub fn parse_limit(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err("N is a count of stacks, at least 1".into()),
    }
}

pub fn parse_percent(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && (0.1..=10000.0).contains(&v) => Ok(v),
        _ => Err("the percentage is a number between 0.1 and 10000, e.g. 10".into()),
    }
}
