//! `dmem folded`: the live (or lost) bytes as folded stacks, for flame graphs.

use crate::cli;
use crate::steps::blocks::{self, groups, select};
use crate::steps::scan::{classes_of, Pool};
use crate::Result;

pub fn folded(args: cli::FoldedArgs) -> Result<String> {
    let classes = classes_of(args.leaks, &args.show);
    let mut pool = Pool::open(&args.image, &classes)?;
    pool.ins().needs_stacks("'dmem folded'")?;
    let blocks = pool.blocks(&classes);
    let sel = select(pool.ins(), &args.filters, Some(blocks))?;
    // The folded lines are data for other tools: what is wrong with the lists goes to stderr.
    for line in pool.warnings() {
        eprintln!("dmem folded: {line}");
    }
    let g = groups(pool.ins(), &sel);
    let (text, nstacks, nbytes) = blocks::fold(pool.ins(), &g);
    blocks::write_folded(args.output.as_deref(), text, nstacks, nbytes)
}
