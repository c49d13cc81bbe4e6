//! The subcommands, one file each, and what only they need (finding the library, the core a run left).

pub mod answer;
pub mod blocks;
pub mod catalog;
pub mod corefile;
pub mod demo;
pub mod diff;
pub mod flamegraph;
pub mod heap;
pub mod history;
pub mod inspect;
pub mod install;
pub mod leaks;
pub mod locate;
pub mod record;
pub mod report;
pub mod run;
pub mod serve;
pub mod snapshot;
pub mod timeline;
pub mod top;
