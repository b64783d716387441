//! The value scan where `check` reads a model: fused with the hash of an installed file
//! ([`hash_and_scan`]), or on its own for the model files of a directory no receipt lists
//! ([`scan_tree`]).

use std::collections::HashSet;
use std::fs::File;
use std::io;
use std::path::Path;

use rayon::prelude::*;
use sha2::{Digest, Sha256};

use super::{FileScan, Layout, Scanner};
use crate::fsio;
use crate::inspect::format;
use crate::paths::RECEIPT_DIR;
use crate::progress::Progress;
use crate::writeback::ReadBehind;

/// Bytes read per step.
const PIECE: usize = 1 << 20;

/// A scanner for `file` (`len` bytes), the file `rel` (`/`-separated) of a model: when its
/// name or first bytes make it a safetensors or GGUF file and its header gives a layout
/// ([`Layout::of`]). Reads the header through positioned reads.
///
/// # Errors
///
/// Reading the header failed.
pub fn scanner_for(rel: &str, file: &File, len: u64) -> io::Result<Option<Scanner>> {
    Ok(Layout::of(rel, file, len)?.map(Scanner::new))
}

/// [`scanner_for`] the file `rel` open as `f`, decided from `head`, the first bytes read from
/// it: the file's size (an `fstat`) and its header are read only when its name or `head` may
/// make it a model file, so a pass over many small files pays nothing more for the others.
fn scanner_from_head(rel: &str, f: &File, head: &[u8]) -> io::Result<Option<Scanner>> {
    if !format::has_values_in(rel, head, u64::MAX) {
        return Ok(None);
    }
    scanner_for(rel, f, f.metadata()?.len())
}

/// SHA-256 (hex) of the open file `f`, the file `rel` of a model, from its start to its end
/// with positioned reads, and the number of bytes hashed, as [`fsio::hash_file`]; with `scan`
/// the value scan of a model file in the same read. `advance` is told of each piece.
///
/// # Errors
///
/// Reading failed.
pub fn hash_and_scan(
    f: &File,
    rel: &str,
    scan: bool,
    advance: &dyn Fn(u64),
) -> io::Result<(String, u64, Option<FileScan>)> {
    // Decided from the first piece read (no read more for a file that is no model file).
    let mut scanner = None;
    let mut decide = scan;
    let mut h = Sha256::new();
    let mut pos = 0u64;
    // An install read cold leaves the page cache as it found it: without this, hashing a
    // model of gigabytes spent more system time taking fresh page cache than the single-stream
    // peer spent reading (docs/PERFORMANCE.md, 16 GiB cold); a warm install stays cached.
    let mut behind = ReadBehind::new();
    PIECE_BUFFER.with_borrow_mut(|buf| {
        // One buffer per thread, reused: zeroing a fresh 1 MiB for every file was a third of
        // the time `check` spent on a tree of 100,000 small files.
        buf.resize(PIECE, 0);
        loop {
            let n = match behind.read_at(f, buf, pos) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            h.update(&buf[..n]);
            if std::mem::take(&mut decide) {
                scanner = scanner_from_head(rel, f, &buf[..n])?;
            }
            if let Some(s) = &mut scanner {
                s.update(&buf[..n]);
            }
            pos += n as u64;
            advance(n as u64);
        }
        Ok(())
    })?;
    behind.finish(f, pos);
    Ok((
        hex::encode(h.finalize()),
        pos,
        scanner.and_then(Scanner::finish),
    ))
}

thread_local! {
    /// [`hash_and_scan`]'s buffer.
    static PIECE_BUFFER: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Scans every model file below `root` whose relative path is not in `skip` (files another
/// pass scanned), in parallel: regular files only, opened below a handle on `root` without
/// following a link (a link is the model checks' business), the receipt directory left out,
/// each read as [`Layout::of`] says (a safetensors or GGUF file by its name or its first
/// bytes; nothing more is read of the others). Each file is read once, up to the size it had
/// when opened. Returns the files with a layout and their scans, in path order.
///
/// # Errors
///
/// The walk or a read failed; the message names the path.
pub fn scan_tree(
    root: &Path,
    skip: &HashSet<String>,
    progress: &dyn Progress,
) -> io::Result<Vec<(String, FileScan)>> {
    let named = |p: &Path, e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", p.display()));
    let mut files = Vec::new();
    let mut total = 0u64;
    let walk = walkdir::WalkDir::new(root)
        .follow_links(false)
        .min_depth(1)
        .sort_by_file_name()
        .into_iter()
        .filter_entry(|e| !(e.depth() == 1 && e.file_name() == RECEIPT_DIR));
    for entry in walk {
        let entry = entry.map_err(|e| {
            let path = e.path().map(Path::to_path_buf).unwrap_or_default();
            named(&path, io::Error::from(e))
        })?;
        if !entry.file_type().is_file() {
            continue;
        }
        let rel = super::super::relative_name(root, entry.path());
        if skip.contains(&rel) {
            continue;
        }
        total += entry.metadata().map(|m| m.len()).unwrap_or(0);
        files.push(rel);
    }
    if files.is_empty() {
        return Ok(Vec::new());
    }
    let dir = fsio::open_dir_path(root, fsio::Follow::Final).map_err(|e| named(root, e.into()))?;
    progress.start(crate::progress::Phase::ScanValues, total);
    let scanned: io::Result<Vec<Option<(String, FileScan)>>> = files
        .into_par_iter()
        .map(|rel| {
            // Gone, replaced by a link or a special file since the walk: not read.
            let Ok((file, len)) = fsio::open_file_below(&dir, &rel) else {
                return Ok(None);
            };
            progress.item(&rel);
            let scan = super::scan_file(&rel, &file, len, &|n| progress.advance(n))
                .map_err(|e| named(&root.join(&rel), e))?;
            Ok(scan.map(|s| (rel, s)))
        })
        .collect();
    progress.finish();
    Ok(scanned?.into_iter().flatten().collect())
}
