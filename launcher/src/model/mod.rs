//! The model and its formats: stacks grouped, symbolised, snapshots as JSON and pprof, growth classes, series over time and their charts.

pub mod answer;
pub mod bare;
pub mod chart;
pub mod frames;
pub mod growth;
pub mod heap;
pub mod histogram;
pub mod leaks;
pub mod names;
pub mod pprof;
pub mod roots;
pub mod series;
pub mod snapjson;
pub mod snapshot;
pub mod symbolize;
pub mod text;
