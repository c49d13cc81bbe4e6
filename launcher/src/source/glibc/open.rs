//! Opening a core or a process that has no libdmem lists through glibc's heap instead: the one
//! place where an image becomes a glibc one, with one line when it cannot.

use super::Glibc;
use crate::source::coredump::CoreDump;
use crate::source::heapwalk::{self, LocateError};
use crate::source::image::Image;
use crate::source::mappings::Mappings;
use crate::source::memory::LiveMemory;
use crate::{failed, Result};
use std::path::PathBuf;
use std::time::SystemTime;

/// A core whose program ran without libdmem.
pub fn open_core(dump: CoreDump, maps: Mappings, exe: PathBuf, name: String) -> Result<Image> {
    let g = super::find(&dump, &maps, &name).map_err(failed)?;
    Ok(Image {
        threads: dump.threads.clone(),
        when: dump.mtime,
        mem: Box::new(dump),
        maps,
        layout: super::layout(),
        exe: Some(exe),
        name,
        pid: None,
        still: true,
        glibc: Some(g),
    })
}

/// A running process without libdmem, read through glibc's heap; None when it does have the
/// library (or cannot be looked at), so that the reason the list reader gave stands.
pub fn open_process(pid: i32) -> Option<Result<Image>> {
    // A zombie has no memory: the list reader's own line says so.
    if !crate::source::live::alive(pid) {
        return None;
    }
    let maps = Mappings::of_process(pid).ok()?;
    let mem = LiveMemory::new(pid);
    if !matches!(heapwalk::locate(&mem, &maps), Err(LocateError::NotLoaded)) {
        return None;
    }
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim_end().to_owned())
        .unwrap_or_default();
    let name = format!("pid {pid} ({comm})");
    Some(open_live(pid, mem, maps, name))
}

fn open_live(pid: i32, mem: LiveMemory, maps: Mappings, name: String) -> Result<Image> {
    let g: Glibc = super::find(&mem, &maps, &name).map_err(failed)?;
    Ok(Image {
        mem: Box::new(mem),
        maps,
        layout: super::layout(),
        exe: std::fs::read_link(format!("/proc/{pid}/exe")).ok(),
        name,
        when: SystemTime::now(),
        threads: Vec::new(),
        pid: Some(pid),
        still: false,
        glibc: Some(g),
    })
}
