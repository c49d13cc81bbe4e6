//! What the analysis commands share between the command line and the model: opening what they
//! read (`inspect`), and selecting, grouping and writing the blocks they show (`blocks`). They
//! take the command line's arguments, which `model/` and `source/` never see.

pub mod blocks;
pub mod counts;
pub mod fields;
pub mod inspect;
pub mod scan;
pub mod suppress;
