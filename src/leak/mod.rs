//! The exit report's leak check: the report itself (`report.rs`: the live blocks, the roots, the
//! mark with the shared engine, the text) and stopping the other threads while it marks
//! (`stopworld.rs`).

pub mod report;
pub mod stopworld;

pub use report::{leak_report, Entry};
