//! `dmem flamegraph`: the folded stacks of an image (`outer;...;inner bytes`, one line per
//! allocation stack, as `dmem folded` writes them), drawn by inferno as an SVG flame graph.

use crate::analysis::escape::show;
use crate::cli;
use crate::{failed, usage, Result};
use inferno::flamegraph::{self as inferno_fg, color::BasicPalette, color::Palette};

pub fn main(args: cli::FlamegraphArgs) -> Result<i32> {
    let Some(output) = args.output.clone() else {
        return Err(usage("where should the SVG go? add -o OUT.svg"));
    };
    let leaks = args.leaks;
    let folded_args = cli::FoldedArgs {
        image: args.image.clone(),
        leaks,
        show: None,
        output: None,
        filters: cli::Filters::default(),
    };
    let folded = crate::commands::folded::folded(folded_args)?;
    let target = crate::source::image::Target::parse(&args.image.image)?;
    let (name, what_of) = match &target {
        crate::source::image::Target::Pid(pid) => (format!("pid {pid}"), format!("process {pid}")),
        crate::source::image::Target::Core { prog, core } => {
            let core_abs = core.canonicalize().unwrap_or_else(|_| core.clone());
            let name = prog
                .as_ref()
                .and_then(|p| p.file_name())
                .map(show)
                .unwrap_or_else(|| show(core));
            (name, show(&core_abs))
        }
    };
    let what = if leaks { "Leaked bytes" } else { "Live bytes" };
    let title = args
        .title
        .unwrap_or_else(|| format!("{what} by allocation stack: {name}"));
    let stacks = folded.lines().filter(|l| !l.trim().is_empty()).count();
    let bytes: u64 = folded
        .lines()
        .filter_map(|l| {
            l.trim_end()
                .rsplit_once(' ')
                .and_then(|(_, n)| n.parse::<u64>().ok())
        })
        .sum();
    let subtitle = format!("{bytes} bytes from {stacks} stacks in {what_of}");
    if stacks == 0 {
        return Err(failed(if leaks {
            "no leaked blocks: nothing to draw (without --leaks, the live ones are drawn)"
        } else {
            "no live blocks: nothing to draw"
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
