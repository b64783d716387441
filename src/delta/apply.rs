//! Applying a delta bundle (docs/FORMAT.md section 16.4) onto its base, wherever the base is:
//! the stage between a delta's verified stream and any sink.
//!
//! A delta's stream holds its carried files and a patch (`.airlock-delta/<i>`) for each `xor`
//! file; its `copy` files are not in it at all. [`DeltaStage`] turns that into the complete
//! tree the manifest lists: every directory first (a patch arrives under `.airlock-delta`,
//! usually before the directory of the file it rebuilds), then each `copy` file from its base
//! file, then the stream, whose carried files pass through and whose patches are applied to
//! their base files as they arrive. Every file the stage makes (copied or rebuilt) is held to
//! its signed size and SHA-256 by [`FileCheck`] before the sink hears of its end; carried files
//! and the patches themselves were checked by the stream's verifier. So a sink never learns how
//! its bytes were made.
//!
//! Where the base is (an installed directory proven by its receipt, a Hugging Face cache
//! snapshot, an OCI image layout, a registry) is a [`Base`]: the stage only asks it for files
//! and for the words of its errors. Base files are read (or cloned where the sink and the
//! filesystem can), never hard-linked: a new tree shares no inode with the old one.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use super::patch::{Map, PatchError, PushDecoder};
use crate::entries::{Base, EntrySink, FileCheck, Mismatch};
use crate::error::{Error, Result};
use crate::manifest::{self, FileEntry, Manifest};
use crate::progress::Progress;

/// Bytes read per step from a base file.
const PIECE: usize = 1 << 20;

/// The `xor` map a file's `from` names.
pub(crate) fn map_of(from: &manifest::From) -> Map {
    match from.map.as_deref() {
        Some("safetensors") => Map::Safetensors,
        _ => Map::Bytes,
    }
}

/// The index of the file a patch entry (`.airlock-delta/<i>`) rebuilds.
pub fn patch_index(path: &str) -> Option<usize> {
    path.strip_prefix(manifest::DELTA_DIR)?
        .strip_prefix('/')?
        .parse()
        .ok()
}

enum Current {
    None,
    /// A carried file passing through.
    Carried,
    /// A patch whose file the sink already holds: its bytes are dropped.
    Skipped,
    /// A patch being applied to its base file.
    Patch {
        index: usize,
        dec: Box<PushDecoder>,
        check: FileCheck,
    },
}

/// Turns a delta's verified stream into the complete tree, onto a [`Base`] (module
/// documentation). Feed it the stream's entries after [`DeltaStage::prepare`].
pub struct DeltaStage<'a> {
    m: &'a Manifest,
    base: &'a mut dyn Base,
    base_files: HashMap<String, FileEntry>,
    inner: &'a mut dyn EntrySink,
    current: Current,
}

impl<'a> DeltaStage<'a> {
    /// A stage applying `m` (a delta) onto `base`, feeding `inner`. Refuses a base that does
    /// not list a file the delta takes from it, or whose listed copy source differs.
    pub fn new(
        m: &'a Manifest,
        base: &'a mut dyn Base,
        inner: &'a mut dyn EntrySink,
    ) -> Result<Self> {
        let base_files: HashMap<String, FileEntry> = base
            .manifest()
            .files
            .iter()
            .map(|f| (f.path.clone(), f.clone()))
            .collect();
        m.check_repos_base(base.manifest())
            .map_err(|why| base.refuse(format!("the delta {why}")))?;
        for f in &m.files {
            let Some(from) = &f.from else { continue };
            let Some(b) = base_files.get(&from.path) else {
                return Err(base.refuse(format!(
                    "the delta takes {:?} from the base file {:?}, which the base does not list",
                    f.path, from.path
                )));
            };
            if from.op == manifest::OP_COPY && (b.size != f.size || b.sha256 != f.sha256) {
                return Err(base.refuse(format!(
                    "the delta copies {:?} from the base file {:?}, whose listed size and sha256 differ",
                    f.path, from.path
                )));
            }
        }
        Ok(DeltaStage {
            m,
            base,
            base_files,
            inner,
            current: Current::None,
        })
    }

    /// Sends every directory, then every `copy` file, before the stream.
    pub fn prepare(&mut self, progress: &dyn Progress) -> Result<()> {
        let m = self.m;
        for d in &m.directories {
            self.inner.dir(d)?;
        }
        for f in &m.files {
            let Some(from) = f.from.as_ref().filter(|fr| fr.op == manifest::OP_COPY) else {
                continue;
            };
            progress.item(&f.path);
            if self.inner.holds(f)? {
                continue;
            }
            let b = self.base_files[&from.path].clone();
            self.copy(&b, f)?;
        }
        Ok(())
    }

    /// The stream's entry `e` (a carried file or a patch) is not fed because its file is
    /// already held by the sink (a resumed install starts the stream after it): the file counts
    /// as delivered. A directory needs nothing (made by [`DeltaStage::prepare`]). A file the
    /// sink does not hold is an error: the stream cannot start after it.
    pub fn already_held(&mut self, e: &manifest::Expected<'_>) -> Result<()> {
        let manifest::Expected::File(f) = e else {
            return Ok(());
        };
        let target = match patch_index(&f.path) {
            Some(i) => &self.m.files[i],
            None => *f,
        };
        if self.inner.holds(target)? {
            return Ok(());
        }
        Err(Error::BadStream {
            volume: "source".into(),
            reason: format!(
                "a resumed install skipped {:?} in the stream, but {:?} is not held",
                f.path, target.path
            ),
        })
    }

    /// The stream ended: no patch may be left half applied.
    pub fn finish(&self) -> Result<()> {
        match self.current {
            Current::None => Ok(()),
            _ => Err(Error::BadStream {
                volume: "tar stream".into(),
                reason: "the stream ended inside a file".into(),
            }),
        }
    }

    /// Writes the copy `f` of base file `b`: cloned when the sink and the filesystem can (the
    /// clone is then read back and checked), else read, checked and sent in one pass.
    fn copy(&mut self, b: &FileEntry, f: &FileEntry) -> Result<()> {
        let src = self.base.open(b)?;
        if let Some(clone) = self.inner.clone_from(f, &src)? {
            let mut check = FileCheck::new(f);
            read_pieces(&clone, &mut |piece| {
                check.update(piece).map_err(PieceStop::Mismatch)
            })
            .map_err(|e| {
                self.base
                    .rotten(b, format!("its clone cannot be read back ({e})"))
            })?;
            if let Err(why) = check.finish() {
                return Err(self.base.rotten(b, mismatch_words(&why, f)));
            }
            return self.inner.end_file(f);
        }
        self.inner.begin_file(f)?;
        let mut check = FileCheck::new(f);
        let inner = &mut *self.inner;
        let read = read_pieces(&src, &mut |piece| {
            check.update(piece).map_err(PieceStop::Mismatch)?;
            inner.data(piece).map_err(PieceStop::Sink)
        });
        match read {
            Ok(()) => {}
            Err(PieceStop::Sink(e)) => return Err(e),
            Err(e) => {
                return Err(self
                    .base
                    .rotten(b, format!("it cannot be read as listed ({e})")));
            }
        }
        if let Err(why) = check.finish() {
            return Err(self.base.rotten(b, mismatch_words(&why, f)));
        }
        self.inner.end_file(f)
    }

    fn patch_error(&self, index: usize, e: PatchError) -> Error {
        Error::BadFile {
            path: self.m.files[index].path.clone(),
            reason: format!(
                "its patch {} does not rebuild it: {e}",
                manifest::patch_path(index)
            ),
        }
    }
}

/// Why reading a base file piece by piece stopped (typed, issue 34 item 6: the sink's own
/// error comes back as it was, the rest reads as the base file's rot).
#[derive(Debug, thiserror::Error)]
enum PieceStop {
    /// The file cannot be read.
    #[error("{0}")]
    Read(#[from] io::Error),
    /// What was read fails the signed size or digest.
    #[error("{0}")]
    Mismatch(Mismatch),
    /// The sink refused a piece.
    #[error("{0}")]
    Sink(Error),
}

/// Why the emit callback stops a patch's decoder, carried inside the `io::Error` the decoder
/// passes on (its callback can return nothing else); the sink's own error is kept beside it.
#[derive(Debug, thiserror::Error)]
enum EmitStop {
    /// The rebuilt bytes fail the signed size or digest.
    #[error("the rebuilt file {0}")]
    Mismatch(Mismatch),
    /// The sink refused the bytes (its error is returned instead of this one).
    #[error("the sink refused the rebuilt bytes")]
    Sink,
}

/// The one conversion of an [`EmitStop`] into the decoder's `io::Error` (kind `Other`).
impl From<EmitStop> for io::Error {
    fn from(s: EmitStop) -> io::Error {
        io::Error::other(s)
    }
}

/// Reads all of `f` in pieces, from its start.
fn read_pieces<E: From<io::Error>>(
    f: &File,
    each: &mut dyn FnMut(&[u8]) -> std::result::Result<(), E>,
) -> std::result::Result<(), E> {
    let mut buf = vec![0u8; PIECE];
    let mut pos = 0u64;
    loop {
        let n = match f.read_at(&mut buf, pos) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e.into()),
        };
        each(&buf[..n])?;
        pos += n as u64;
    }
}

fn mismatch_words(why: &Mismatch, f: &FileEntry) -> String {
    match why {
        Mismatch::Digest(got) => format!("its sha256 is {got}, the manifest says {}", f.sha256),
        other => format!("it {other} ({} bytes)", f.size),
    }
}

/// Runs `f` with an emit callback that checks and forwards to `inner`, keeping the sink's own
/// error (the callback can only return an `io::Error`).
fn with_emit<T>(
    inner: &mut dyn EntrySink,
    check: &mut FileCheck,
    f: impl FnOnce(&mut dyn FnMut(&[u8]) -> io::Result<()>) -> std::result::Result<T, PatchError>,
) -> Result<std::result::Result<T, PatchError>> {
    let mut failed: Option<Error> = None;
    let r = {
        let mut emit = |b: &[u8]| -> io::Result<()> {
            check.update(b).map_err(EmitStop::Mismatch)?;
            inner.data(b).map_err(|e| {
                failed = Some(e);
                EmitStop::Sink.into()
            })
        };
        f(&mut emit)
    };
    match failed {
        Some(e) => Err(e),
        None => Ok(r),
    }
}

impl EntrySink for DeltaStage<'_> {
    fn dir(&mut self, _path: &str) -> Result<()> {
        // Made by `prepare` (`.airlock-delta` is the stream's own and is not installed).
        Ok(())
    }

    fn begin_file(&mut self, file: &FileEntry) -> Result<()> {
        let Some(index) = patch_index(&file.path) else {
            self.current = Current::Carried;
            return self.inner.begin_file(file);
        };
        // The stream's verifier already held this entry to the manifest's patch list.
        let target = &self.m.files[index];
        if self.inner.holds(target)? {
            self.current = Current::Skipped;
            return Ok(());
        }
        let from = target.from.as_ref().expect("a patch entry has a from");
        let b = self.base_files[&from.path].clone();
        let base = self.base.open_checked(&b)?;
        let dec = PushDecoder::new(base, map_of(from), target.size)
            .map_err(|e| self.patch_error(index, e))?;
        self.inner.begin_file(target)?;
        self.current = Current::Patch {
            index,
            dec: Box::new(dec),
            check: FileCheck::new(target),
        };
        Ok(())
    }

    fn data(&mut self, bytes: &[u8]) -> Result<()> {
        match &mut self.current {
            Current::Patch { index, dec, check } => {
                let index = *index;
                let r = with_emit(self.inner, check, |emit| dec.write(bytes, emit))?;
                r.map_err(|e| self.patch_error(index, e))
            }
            Current::Skipped => Ok(()),
            _ => self.inner.data(bytes),
        }
    }

    fn end_file(&mut self, file: &FileEntry) -> Result<()> {
        match std::mem::replace(&mut self.current, Current::None) {
            Current::Patch {
                index,
                dec,
                mut check,
            } => {
                let r = with_emit(self.inner, &mut check, |emit| dec.finish(emit))?;
                r.map_err(|e| self.patch_error(index, e))?;
                let target = &self.m.files[index];
                if let Err(why) = check.finish() {
                    return Err(Error::BadFile {
                        path: target.path.clone(),
                        reason: format!(
                            "its patch {} rebuilds content that does not match the signed manifest: {}",
                            manifest::patch_path(index),
                            mismatch_words(&why, target)
                        ),
                    });
                }
                self.inner.end_file(target)
            }
            Current::Skipped => Ok(()),
            _ => self.inner.end_file(file),
        }
    }
}
