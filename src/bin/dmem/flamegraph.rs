//! `dmem flamegraph`: the gdb script writes folded stacks (`outer;...;inner bytes`, one line
//! per allocation stack), and inferno draws them as an SVG flame graph.

use crate::cli::{self, show};
use crate::gdb_driver::{self, Sink};
use crate::{failed, usage, Result};
use inferno::flamegraph::{self as inferno_fg, color::BasicPalette, color::Palette};
use std::path::Path;

pub fn main(args: cli::FlamegraphArgs) -> Result<i32> {
    let (words, output, leaks, title) = (args.words, args.output, args.leaks, args.title);
    let [prog, core] = words.as_slice() else {
        return Err(usage(format!(
            "{}; usage: dmem flamegraph PROG CORE -o OUT.svg",
            if words.len() < 2 {
                "needs a program and its core"
            } else {
                "too many arguments"
            }
        )));
    };
    let Some(output) = output else {
        return Err(usage("where should the SVG go? add -o OUT.svg"));
    };
    let (prog, core) = gdb_driver::check_pair(Path::new(prog), Path::new(core))?;
    let folded = folded_stacks(&prog, &core, leaks)?;
    let what = if leaks { "Leaked bytes" } else { "Live bytes" };
    let title = title.unwrap_or_else(|| {
        format!(
            "{what} by allocation stack: {}",
            prog.file_name().map(show).unwrap_or_default()
        )
    });
    let stacks = folded.lines().filter(|l| !l.trim().is_empty()).count();
    let bytes: u64 = folded
        .lines()
        .filter_map(|l| {
            l.trim_end()
                .rsplit_once(' ')
                .and_then(|(_, n)| n.parse::<u64>().ok())
        })
        .sum();
    let core_abs = core.canonicalize().unwrap_or_else(|_| core.clone());
    let subtitle = format!("{bytes} bytes from {stacks} stacks in {}", show(&core_abs));
    if stacks == 0 {
        return Err(failed(if leaks {
            "no leaked blocks in the core: nothing to draw (without --leaks, the live ones are drawn)"
        } else {
            "no live blocks in the core: nothing to draw"
        }));
    }
    let svg = render(&folded, &title, &subtitle)?;
    std::fs::write(&output, svg).map_err(|e| failed(format!("cannot write {}: {e}", show(&output))))?;
    eprintln!(
        "dmem: wrote {} ({stacks} allocation stack{}); open it in a browser",
        show(&output),
        if stacks == 1 { "" } else { "s" }
    );
    Ok(0)
}

/// Asks the gdb script for the folded stacks of the core: of every live block, or of the
/// leaked ones with `--leaks`.
fn folded_stacks(prog: &Path, core: &Path, leaks: bool) -> Result<String> {
    let dir = std::env::temp_dir().join(format!("dmem-flamegraph-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| failed(format!("cannot create {}: {e}", show(&dir))))?;
    let file = dir.join("stacks.folded");
    let mut words = vec!["dmem".to_owned(), "folded".to_owned()];
    if leaks {
        words.push("--leaks".to_owned());
    }
    words.push(show(&file));
    let result = gdb_driver::gdb_command(Some((prog, core)), &gdb_driver::gdb_line(&words)?, Sink::Capture)
        .and_then(|_| {
            std::fs::read_to_string(&file).map_err(|e| failed(format!("gdb wrote no folded stacks: {e}")))
        });
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// Draws folded stacks as an SVG flame graph.
pub fn render(folded: &str, title: &str, subtitle: &str) -> Result<Vec<u8>> {
    if !folded.lines().any(|l| !l.trim().is_empty()) {
        return Err(failed(
            "the core holds no blocks to draw (no live allocations were recorded)",
        ));
    }
    let mut opts = inferno_fg::Options::default();
    opts.title = title.to_owned();
    opts.subtitle = Some(subtitle.to_owned());
    opts.count_name = "bytes".to_owned();
    opts.name_type = "Function:".to_owned();
    // inferno's palette for memory profiles, as Brendan Gregg's memory flame graphs use.
    opts.colors = Palette::Basic(BasicPalette::Mem);
    // The same core gives the same picture.
    opts.hash = true;
    opts.deterministic = true;
    let mut svg = Vec::new();
    inferno_fg::from_lines(&mut opts, folded.lines(), &mut svg)
        .map_err(|e| failed(format!("cannot draw the flame graph: {e}")))?;
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::render;

    #[test]
    fn folded_stacks_become_an_svg_naming_their_frames() {
        let svg = render("main;alloc_node 4096\nmain;parse 100\n", "t", "s").unwrap();
        let svg = String::from_utf8(svg).unwrap();
        assert!(svg.starts_with("<?xml"));
        assert!(svg.contains("alloc_node") && svg.contains("parse"));
    }

    #[test]
    fn nothing_to_draw_is_an_error() {
        assert!(render("\n", "t", "s").is_err());
    }
}
