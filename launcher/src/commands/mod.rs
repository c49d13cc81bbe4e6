//! The subcommands, one file each (`serve/` holds the parts of `dmem serve`). What several of
//! them share lives below them: `steps/`, `locate.rs`, `model/` and `source/`.

pub mod catalog;
pub mod demo;
pub mod diff;
pub mod flamegraph;
pub mod folded;
pub mod heap;
pub mod history;
pub mod install;
pub mod leaks;
pub mod record;
pub mod report;
pub mod run;
pub mod serve;
pub mod snapshot;
pub mod timeline;
pub mod top;
pub mod types;
pub mod why;
pub mod words;
