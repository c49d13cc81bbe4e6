//! Where the fixtures are: the build script compiles every C and C++ program in this folder into
//! `DIR`. It is a dev-dependency of dmem, so `cargo build` of the library and the launcher never
//! compiles them; `cargo test` (and the bench scripts, with `-p dmem-fixtures`) does.

/// The folder holding the compiled fixtures, one executable (or `lib….so`) per source file.
pub const DIR: &str = env!("DMEM_FIXTURES_DIR");
