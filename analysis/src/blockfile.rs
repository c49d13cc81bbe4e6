//! A file read in blocks that are kept once read, for object's `ReadCache`. The cache reads
//! each symbol's name with a seek and reads of 256 bytes of its own: thousands of system calls
//! for glibc's symbol tables, which made every exit report that names a frame cost a second on
//! a busy machine (a forked child's report in each child). Through the blocks, names close to
//! each other come from memory and a string table costs one read per block.

use std::collections::HashMap;
use std::fs::File;
use std::io::{Error, ErrorKind, Read, Result, Seek, SeekFrom};
use std::os::unix::fs::FileExt;

/// The block size. A read at least this long goes to the file directly and is kept by no block:
/// the callers keep what they read whole (the cache keeps every range it is asked for).
const BLOCK: usize = 16 << 10;

/// A file with a position, read through blocks.
pub struct BlockFile {
    file: File,
    len: u64,
    pos: u64,
    blocks: HashMap<u64, Vec<u8>>,
}

impl BlockFile {
    pub fn new(file: File) -> Result<BlockFile> {
        let len = file.metadata()?.len();
        Ok(BlockFile {
            file,
            len,
            pos: 0,
            blocks: HashMap::new(),
        })
    }

    /// Block `index`, read from the file the first time (shorter at the end of the file).
    fn block(&mut self, index: u64) -> Result<&[u8]> {
        if !self.blocks.contains_key(&index) {
            let mut bytes = vec![0; BLOCK];
            let n = read_full_at(&self.file, &mut bytes, index * BLOCK as u64)?;
            bytes.truncate(n);
            self.blocks.insert(index, bytes);
        }
        Ok(&self.blocks[&index])
    }
}

/// Reads at `offset` until `buf` is full or the file ends; how much was read.
fn read_full_at(file: &File, buf: &mut [u8], offset: u64) -> Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match file.read_at(&mut buf[n..], offset + n as u64) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

impl Read for BlockFile {
    fn read(&mut self, buf: &mut [u8]) -> Result<usize> {
        if buf.is_empty() || self.pos >= self.len {
            return Ok(0);
        }
        let n = if buf.len() >= BLOCK {
            read_full_at(&self.file, buf, self.pos)?
        } else {
            let off = (self.pos % BLOCK as u64) as usize;
            let block = self.block(self.pos / BLOCK as u64)?;
            let n = buf.len().min(block.len().saturating_sub(off));
            buf[..n].copy_from_slice(&block[off..off + n]);
            n
        };
        self.pos += n as u64;
        Ok(n)
    }
}

impl Seek for BlockFile {
    fn seek(&mut self, to: SeekFrom) -> Result<u64> {
        let pos = match to {
            SeekFrom::Start(p) => Some(p),
            SeekFrom::End(d) => self.len.checked_add_signed(d),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
        };
        self.pos =
            pos.ok_or_else(|| Error::new(ErrorKind::InvalidInput, "a seek before the start of the file"))?;
        Ok(self.pos)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every read, short or long, aligned or across blocks, after any seek, gives the file's bytes.
    #[test]
    fn reads_the_files_bytes_wherever_it_is_read() {
        let path = std::env::temp_dir().join(format!("blockfile-{}", std::process::id()));
        let data: Vec<u8> = (0..3 * BLOCK + 123).map(|i| (i * 7 % 251) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let mut f = BlockFile::new(File::open(&path).unwrap()).unwrap();
        std::fs::remove_file(&path).unwrap();
        for (start, len) in [
            (0, 10),
            (BLOCK - 3, 10),
            (5, BLOCK + 9),
            (3 * BLOCK + 100, 50),
            (2 * BLOCK, 1),
        ] {
            f.seek(SeekFrom::Start(start as u64)).unwrap();
            let mut got = Vec::new();
            let want = &data[start..(start + len).min(data.len())];
            let mut buf = vec![0; len];
            while got.len() < want.len() {
                let n = f.read(&mut buf[..len - got.len()]).unwrap();
                assert!(n > 0, "a read at {start} ended early");
                got.extend_from_slice(&buf[..n]);
            }
            assert_eq!(got, want, "at {start}, {len} bytes");
        }
        assert_eq!(f.seek(SeekFrom::End(0)).unwrap(), data.len() as u64);
        assert_eq!(f.read(&mut [0; 8]).unwrap(), 0);
        assert!(f.seek(SeekFrom::Current(-(data.len() as i64) - 1)).is_err());
    }
}
