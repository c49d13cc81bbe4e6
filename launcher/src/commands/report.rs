//! `dmem report IMAGE [SUBCOMMAND ARGS...]`: the analysis commands under one name, the
//! subcommand after the image (summary when none is given), as the gdb commands were called
//! through the launcher before it answered them itself.

use crate::analysis::escape::show;
use crate::cli::{ALIASES, ANALYSES};
use crate::source::image::Target;
use crate::{usage, Result};
use std::ffi::OsString;

/// The command line `dmem SUBCOMMAND IMAGE ARGS...` that `dmem report IMAGE SUBCOMMAND ARGS...`
/// stands for; `report help [SUBCOMMAND]` asks for help.
pub fn rewrite(words: &[OsString]) -> Result<Vec<OsString>> {
    if words.first().is_some_and(|w| w == "help") {
        return Ok(match words.get(1) {
            Some(sub) => vec![sub.clone(), "--help".into()],
            None => vec!["--help".into()],
        });
    }
    if let Some(opt) = words
        .iter()
        .take(2)
        .find(|w| w.to_string_lossy().starts_with('-'))
    {
        return Err(usage(format!(
            "unknown option '{}'; see 'dmem report --help'",
            show(opt)
        )));
    }
    let (_, used) = Target::take(words)?;
    let (image, rest) = words.split_at(used);
    let (sub, args) = match rest.split_first() {
        None => (OsString::from("summary"), &[][..]),
        Some((sub, args)) => (sub.clone(), args),
    };
    // The original libdmem's gdb command names, kept as aliases: the words they stand for,
    // with the image after the command's name.
    let (sub, extra): (OsString, &[&str]) = match ALIASES.iter().find(|(a, _)| sub == **a) {
        Some((_, words)) => (words[0].into(), &words[1..]),
        None => (sub, &[]),
    };
    if !ANALYSES.iter().any(|a| sub == **a) {
        return Err(usage(format!(
            "'{}' is not a report; the reports are {}",
            show(&sub),
            ANALYSES.join(", ")
        )));
    }
    let mut out = vec![sub];
    out.extend(extra.iter().map(OsString::from));
    out.extend(image.iter().cloned());
    out.extend(args.iter().cloned());
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_subcommand_moves_in_front_of_the_image() {
        let w = |v: &[&str]| v.iter().map(OsString::from).collect::<Vec<_>>();
        assert_eq!(rewrite(&w(&["42"])).unwrap(), w(&["summary", "42"]));
        assert_eq!(
            rewrite(&w(&["42", "leaks", "--json"])).unwrap(),
            w(&["leaks", "42", "--json"])
        );
        assert_eq!(
            rewrite(&w(&["42", "walk_alloc_entries"])).unwrap(),
            w(&["walk", "--headers", "42"])
        );
        assert_eq!(rewrite(&w(&["help", "why"])).unwrap(), w(&["why", "--help"]));
        assert!(rewrite(&w(&["42", "nonsense"]))
            .unwrap_err()
            .msg
            .contains("not a report"));
        assert!(rewrite(&w(&["--json"])).is_err());
    }
}
