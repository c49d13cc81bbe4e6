//! The exit report's leak check. `report.rs` runs it in order: the live blocks copied under
//! the list locks (`live.rs`), the roots (`roots.rs`, the exiting thread's from where the
//! program entered the exit path, `exit_entry.rs`), the threads stopped (`stopworld.rs`), the mark
//! with the shared engine over this process's memory (`memory.rs`), the threads released, then
//! the text (`text.rs`), less what the suppression files read at start-up (`suppress.rs`) leave
//! out.

mod live;
mod memory;
pub mod report;
mod roots;
pub mod stopworld;
pub mod suppress;
mod text;

pub use crate::exit_entry::Entry;
pub use memory::readable;
pub use report::leak_report;
