//! `dmem commands --json` (hidden): the analysis commands with their help, the aliases and the
//! register names the engine reads, for the gdb commands. gdb/dmem.py registers what this lists
//! instead of keeping lists and help texts of its own, so the two cannot drift apart.

use crate::cli::{self, ALIASES, ANALYSES};
use crate::model::text::dump;
use crate::source::threads::REG_NAMES;
use serde::Serialize;

/// The version of this document's shape.
pub const FORMAT: u32 = 1;

#[derive(Serialize)]
pub struct Catalog {
    pub format: u32,
    pub command: &'static str,
    pub commands: Vec<Entry>,
    pub aliases: Vec<Alias>,
    /// Every option of the analysis commands that takes a value, as `--name`.
    pub value_options: Vec<String>,
    /// The registers `--registers` names, in `user_regs_struct`'s order.
    pub registers: &'static [&'static str],
}

/// One analysis command as the gdb side shows it: the image is what gdb has open, so its help
/// leaves the image and `--registers` out.
#[derive(Serialize)]
pub struct Entry {
    pub name: &'static str,
    /// The first line of its help.
    pub about: String,
    /// Its whole help, the first line first.
    pub help: String,
    /// What follows its options in gdb: an address expression, a file, or nothing.
    pub operand: Option<&'static str>,
}

#[derive(Serialize)]
pub struct Alias {
    pub name: &'static str,
    pub words: &'static [&'static str],
}

/// The arguments gdb supplies itself, hidden from its help.
const GDB_SUPPLIES: [&str; 3] = ["image", "registers", "words"];

pub fn catalog() -> Catalog {
    let root = cli::declared();
    let mut value_options = Vec::new();
    let commands = ANALYSES
        .iter()
        .map(|&name| {
            let sub = root
                .find_subcommand(name)
                .expect("an analysis is a subcommand")
                .clone();
            add_value_options(&sub, &mut value_options);
            entry(name, sub)
        })
        .collect();
    value_options.sort();
    Catalog {
        format: FORMAT,
        command: "commands",
        commands,
        aliases: ALIASES
            .iter()
            .map(|&(name, words)| Alias { name, words })
            .collect(),
        value_options,
        registers: &REG_NAMES,
    }
}

/// What follows the command's options in gdb: an address expression, a file, or nothing.
fn operand(sub: &clap::Command) -> Option<&'static str> {
    if sub.get_arguments().any(|a| a.get_id() == "words") {
        Some("address")
    } else if sub.get_arguments().any(|a| a.get_id() == "output") {
        Some("file")
    } else {
        None
    }
}

/// Adds the command's options that take a value, as `--name`, unless gdb supplies them or
/// they are listed already.
fn add_value_options(sub: &clap::Command, value_options: &mut Vec<String>) {
    for a in sub.get_arguments() {
        let long = a.get_long().map(|l| format!("--{l}"));
        if let Some(long) = long.filter(|_| a.get_action().takes_values()) {
            if !value_options.contains(&long) && !GDB_SUPPLIES.contains(&a.get_id().as_str()) {
                value_options.push(long);
            }
        }
    }
}

/// The analysis `name` as the gdb side shows it, with what gdb supplies hidden from its help.
fn entry(name: &'static str, sub: clap::Command) -> Entry {
    let operand = operand(&sub);
    let about = sub.get_about().map(|a| a.to_string()).unwrap_or_default();
    // The long help starts with the first line, as gdb lists it in `help dmem`.
    let long = sub
        .get_long_about()
        .map_or_else(|| about.clone(), |a| a.to_string());
    let mut shown = sub
        .help_template("{usage-heading} {usage}\n\n{all-args}")
        .override_usage(format!(
            "dmem {name} [OPTIONS]{}",
            match operand {
                Some("address") => " ADDR",
                Some(_) => " FILE",
                None => "",
            }
        ));
    for id in GDB_SUPPLIES
        .iter()
        .chain(operand.filter(|o| *o == "file").map(|_| &"output"))
    {
        if shown.get_arguments().any(|a| a.get_id() == *id) {
            shown = shown.mut_arg(*id, |a| a.hide(true));
        }
    }
    let help = format!("{long}\n\n{}", shown.render_long_help());
    Entry {
        name,
        about,
        help: help.trim_end().to_owned(),
        operand,
    }
}

pub fn main(args: cli::CommandsArgs) -> crate::Result<i32> {
    if !args.json {
        return Err(crate::usage(
            "only --json is written; this command is for the gdb side",
        ));
    }
    print!("{}", dump(&catalog()));
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_analysis_has_its_own_help_without_the_image() {
        let c = catalog();
        assert_eq!(c.commands.len(), ANALYSES.len());
        for e in &c.commands {
            assert!(e.help.starts_with(&e.about), "{}", e.help);
            assert!(
                e.help.contains(&format!("Usage: dmem {} [OPTIONS]", e.name)),
                "{}",
                e.help
            );
            assert!(
                !e.help.contains("--registers") && !e.help.contains("aliases"),
                "{}",
                e.help
            );
            assert_eq!(e.help.matches(&e.about).count(), 1, "{}", e.help);
        }
        let about = |n: &str| &c.commands.iter().find(|e| e.name == n).unwrap().about;
        assert_ne!(about("summary"), about("stacks"));
        assert_ne!(about("whatis"), about("why"));
        assert_ne!(about("verify"), about("stats"));
        let operand = |n: &str| c.commands.iter().find(|e| e.name == n).unwrap().operand;
        assert_eq!(
            (operand("why"), operand("folded"), operand("leaks")),
            (Some("address"), Some("file"), None)
        );
        assert!(c.value_options.iter().any(|o| o == "--min-size"));
        assert!(!c
            .value_options
            .iter()
            .any(|o| o == "--registers" || o == "--json"));
    }
}
