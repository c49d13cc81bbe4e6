//! The arguments of the commands that watch a running process or write and compare heap
//! profiles: flamegraph, top, snapshot, serve, record, timeline and diff.

use super::analysis::ImageArgs;
use super::values::{parse_interval, parse_limit, parse_percent, parse_pid, TEMPLATE};
use clap::Args;
use std::ffi::OsString;
use std::path::PathBuf;

/// Draw the live bytes of a core or a process by allocation stack as an SVG flame graph
///
/// Draws the live bytes by allocation stack as an interactive SVG flame graph (open it in a
/// browser): each box is a function, as wide as the bytes allocated under it.
#[derive(Args, Debug)]
#[command(help_template = TEMPLATE)]
pub struct FlamegraphArgs {
    #[command(flatten)]
    pub image: ImageArgs,
    /// Where to write the SVG (required)
    #[arg(short = 'o', long = "output", value_name = "OUT.svg")]
    pub output: Option<PathBuf>,
    /// Draw only the lost blocks (see 'dmem leaks')
    #[arg(long)]
    pub leaks: bool,
    /// The title at the top (default: what is drawn, and PROG)
    #[arg(long, value_name = "TEXT")]
    pub title: Option<String>,
}

/// Watch a running process's heap by allocation stack, without stopping it
///
/// Every INTERVAL seconds, reads the live-block lists of process PID (which must run with
/// libdmem.so preloaded) straight from its memory, without stopping it (no ptrace attach:
/// process_vm_readv, the same permission gdb needs), and prints the stacks holding the most
/// bytes: their live bytes and blocks, the change since the first sample, the rate per minute
/// and a growth class decided from all samples so far: steady (no net growth), levelling (grows
/// ever slower, like a cache filling), linear, accelerating. Ctrl-C prints a summary.
///
/// The header line gives the totals, how long the read took and how many of the lists changed
/// too fast to be read whole (their blocks are counted as read). Each stack's last column is a
/// sparkline of its live bytes over the samples. For a process run with
/// DMEM_OPTS=count-allocs, each sample after the first also lists the stacks that allocated
/// most since the one before: allocations, temporary allocations (blocks freed by their thread
/// before it allocated again) and frees, and per second (with history-allocs instead, the same
/// from the free history, as lower bounds).
#[derive(Args, Debug)]
#[command(help_template = TEMPLATE)]
pub struct TopArgs {
    /// The process to watch
    #[arg(value_name = "PID", value_parser = parse_pid)]
    pub pid: i32,
    /// Seconds between samples; fractions allowed
    #[arg(short = 'i', long, value_name = "SECS", default_value = "5", value_parser = parse_interval)]
    pub interval: f64,
    /// How many stacks to show per sample
    #[arg(short = 'n', long, value_name = "N", default_value_t = 10)]
    pub limit: usize,
    /// Stop after N samples (default: until Ctrl-C or the process ends)
    #[arg(short = 'c', long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub count: Option<u64>,
    /// One JSON object per sample, one per line
    #[arg(long)]
    pub json: bool,
}

/// Write the live heap of a process or a core as a pprof profile (or JSON, or folded stacks)
///
/// Reads the live-block lists of process PID without stopping it (as 'dmem top' does), or of
/// CORE, a core file of PROG, straight from the core (no gdb), groups the blocks by allocation
/// stack, symbolises the frames and writes the snapshot. A pprof profile is gzipped
/// profile.proto with the sample types inuse_objects/count and inuse_space/bytes (the default),
/// one sample per stack labelled with the allocating threads' ids (thread_id), functions, files
/// and lines (inlined functions too), and the mapped objects with their build ids. A process
/// run with DMEM_OPTS=count-allocs adds Go's alloc_objects and alloc_space (and
/// temporary_objects), with a sample for every stack that ever allocated. Open it with
/// 'pprof -http=: FILE' or in speedscope.
#[derive(Args, Debug)]
#[command(
    help_template = TEMPLATE,
    override_usage = "dmem snapshot PID -o FILE [--format FORMAT]\n       dmem snapshot PROG CORE -o FILE [--format FORMAT]"
)]
pub struct SnapshotArgs {
    /// A process id, or a program and its core
    #[arg(value_name = "PID | PROG CORE", required = true)]
    pub source: Vec<OsString>,
    /// Where to write the snapshot; '-' for standard output
    #[arg(short = 'o', long = "output", value_name = "FILE", required = true)]
    pub output: PathBuf,
    /// pprof: a gzipped profile; json: the shape of a 'dmem top --json' sample, with threads and
    /// objects; folded: 'outer;...;inner bytes' lines for flame-graph tools
    #[arg(long, value_enum, value_name = "FORMAT", default_value = "pprof")]
    pub format: SnapshotFormat,
}

/// Serve heap profiles and metrics over HTTP, for pprof, Parca, Pyroscope and Prometheus
///
/// Answers, for processes running with libdmem.so preloaded, read without stopping them (as
/// 'dmem top' reads):
///   GET /debug/pprof/heap?pid=PID  the gzipped pprof profile 'dmem snapshot' writes (pid may be
///                                  left out when one process is served)
///   GET /debug/pprof/              the processes served, with links to their profiles
///   GET /metrics                   Prometheus text: dmem_live_bytes, dmem_live_blocks,
///                                  dmem_allocations_total, dmem_frees_total per process
///                                  (labels pid and comm), and how long the reads took
///
/// Without PIDs it serves every process on the host that has libdmem.so loaded and that dmem may
/// read, found again at each request. A client on this host gets only the processes its own user
/// could read with 'dmem snapshot' (its user found in the kernel's socket table); with
/// --token-file every request must carry the token instead, and then reads what dmem may.
/// Listening beyond loopback needs --token-file or --no-token. A process that has ended or
/// refuses the read gets an HTTP error and one line on standard error. Runs until Ctrl-C.
#[derive(Args, Debug)]
#[command(help_template = TEMPLATE)]
pub struct ServeArgs {
    /// Where to listen; loopback unless told otherwise
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:6060")]
    pub listen: std::net::SocketAddr,
    /// Answer only requests carrying the token in FILE as 'Authorization: Bearer TOKEN' (what
    /// Prometheus' and Parca's authorization credentials_file and Alloy's bearer_token_file send)
    #[arg(long, value_name = "FILE", conflicts_with = "no_token")]
    pub token_file: Option<PathBuf>,
    /// Listen beyond loopback without a token: every host that reaches the port reads what dmem
    /// may read
    #[arg(long)]
    pub no_token: bool,
    /// Serve only these processes (default: every one with libdmem.so loaded that dmem may read)
    #[arg(value_name = "PID", value_parser = parse_pid)]
    pub pids: Vec<i32>,
}

/// Write heap profiles of a running process periodically, and at each new peak of live bytes
///
/// Every SECS seconds, reads process PID's live-block lists without stopping it and writes a
/// pprof profile (as 'dmem snapshot' does) to DIR, named PROG.PID.YYYYmmddTHHMMSSZ.pb.gz. With
/// --at-peak it also watches the library's counters ten times a second and writes a profile
/// named ...peak.pb.gz each time live bytes pass the highest seen so far by PCT percent, so the
/// last peak profile shows what held memory at the peak, even if an OOM kill ends the process
/// later. Ends on Ctrl-C or when the process ends, with a line saying what was written and the
/// peak.
#[derive(Args, Debug)]
#[command(help_template = TEMPLATE)]
pub struct RecordArgs {
    /// The process to record
    #[arg(value_name = "PID", value_parser = parse_pid)]
    pub pid: i32,
    /// Seconds between profiles; fractions allowed
    #[arg(long, value_name = "SECS", required = true, value_parser = parse_interval)]
    pub every: f64,
    /// The directory to write the profiles to (created if missing)
    #[arg(short = 'o', long = "output", value_name = "DIR", required = true)]
    pub output: PathBuf,
    /// Keep only the N newest periodic profiles, and the N newest peak profiles (default: all)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub keep: Option<u64>,
    /// Also write a profile each time live bytes pass the highest seen by PCT percent
    #[arg(long, value_name = "PCT", num_args = 0..=1, default_missing_value = "10", value_parser = parse_percent)]
    pub at_peak: Option<f64>,
    /// Also draw every profile so far as a timeline (see 'dmem timeline') after each one, so
    /// the chart can be kept open while the process runs: FILE.html for the page, FILE.json
    /// for the series, else SVG
    #[arg(long, value_name = "FILE")]
    pub timeline: Option<PathBuf>,
}

/// Draw live bytes over time by allocation stack, from recorded profiles (SVG, HTML or JSON)
///
/// Reads the profiles 'dmem record' wrote to DIR (or snapshot files that 'dmem snapshot'
/// wrote, each with its time) and draws a stacked area chart of live bytes over time: a band
/// for each of the N stacks that held the most at their peak, labelled by the innermost frame
/// of the program's own code, and the rest of the stacks summed as "other". The legend lists
/// them by peak size; hovering over an entry or a band shows the whole stack. The profiles
/// 'dmem record --at-peak' wrote at new peaks are marked, the highest of them in red.
/// --format html writes one self-contained page (the chart, a table of the stacks with all
/// their frames, and the profiles), which needs no network and no script. --json writes the
/// series: every profile's time and totals, and each stack's bytes and blocks per profile.
#[derive(Args, Debug)]
#[command(
    help_template = TEMPLATE,
    override_usage = "dmem timeline DIR | FILE... -o OUT.svg [--format svg|html|json] [-n N]\n       dmem timeline DIR | FILE... --json"
)]
pub struct TimelineArgs {
    /// A directory of profiles 'dmem record' wrote (its .pb.gz files), or profile files
    #[arg(value_name = "DIR | FILE", required = true)]
    pub inputs: Vec<PathBuf>,
    /// Where to write the chart; '-' for standard output (the default with --json)
    #[arg(short = 'o', long = "output", value_name = "OUT")]
    pub output: Option<PathBuf>,
    /// svg: the chart; html: a page with the chart and tables of the stacks and profiles;
    /// json: the series. Default: from OUT's extension (.html, .json), else svg
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub format: Option<TimelineFormat>,
    /// The series as JSON (the same as --format json)
    #[arg(long, conflicts_with = "format")]
    pub json: bool,
    /// How many stacks get a band of their own; the rest are summed as "other"
    #[arg(short = 'n', long, value_name = "N", default_value_t = 10, value_parser = parse_limit)]
    pub limit: usize,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimelineFormat {
    Svg,
    Html,
    Json,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum SnapshotFormat {
    Pprof,
    Json,
    Folded,
}

/// Compare two snapshots: which allocation stacks grew, by how much, and which shrank
///
/// BASE and NEW are each a process id (read now), a program and its core (PROG CORE), or a
/// snapshot file written earlier by 'dmem snapshot' (pprof or json). Prints the totals, then
/// every stack that changed, the most grown first and the shrunk ones last: its bytes and
/// blocks in NEW, the change in bytes and in blocks, the rate per minute between the two
/// snapshots' times, and new, grew, shrank or gone. Stacks are matched by their frames as
/// offsets in their objects, so cores of two runs of a program compare too.
#[derive(Args, Debug)]
#[command(
    help_template = TEMPLATE,
    override_usage = "dmem diff BASE NEW [--json] [--pprof OUT] [--limit N]\n       (BASE and NEW: PID, PROG CORE or FILE)"
)]
pub struct DiffArgs {
    /// BASE, then NEW
    #[arg(value_name = "BASE NEW", required = true)]
    pub sources: Vec<OsString>,
    /// Print one JSON object, in the shape of a 'dmem top --json' sample
    #[arg(long)]
    pub json: bool,
    /// Also write NEW - BASE as a pprof profile (values may be negative, as with
    /// 'pprof -diff_base')
    #[arg(long, value_name = "OUT")]
    pub pprof: Option<PathBuf>,
    /// Show only the N biggest changes, growth or shrinkage
    #[arg(short = 'n', long, value_name = "N")]
    pub limit: Option<usize>,
}
