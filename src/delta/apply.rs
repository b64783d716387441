//! Installing a delta bundle (docs/FORMAT.md section 16.4) with every rule of a full install.
//!
//! The destination must hold the base: an install whose receipt verifies against the trust
//! set and whose manifest bytes hash to `base.manifest_sha256`. The new tree is built by
//! [`install::unpack_with`] (private staging, explicit modes, fsync, receipt, one atomic
//! swap): every directory first, then each `copy` file from its base file, then the stream,
//! whose carried files pass through and whose patches (`.airlock-delta/<i>`) are applied to
//! their base files as they arrive. Each base file is re-hashed against the base receipt
//! before it is used, and each rebuilt file is checked against its signed size and SHA-256
//! before the tree can become visible. Base files are read (or cloned where the filesystem
//! can), never hard-linked: the new tree shares no inode with the old one.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

use rustix::fs::{Mode, OFlags};
use sha2::{Digest, Sha256};

use super::patch::{Map, PatchError, PushDecoder};
use crate::bundle::read::{self, EntrySink, Mode as ReadMode, Opened};
use crate::error::{Error, Result};
use crate::install::{self, Installed, UnpackOptions};
use crate::manifest::{self, FileEntry, Manifest};
use crate::progress::Progress;
use crate::receipt;

/// Bytes read per step from a base file.
const PIECE: usize = 1 << 20;

/// Installs the delta `opened` over the base installed at `opts.dest`.
pub fn unpack(opened: &Opened, opts: &UnpackOptions, progress: &dyn Progress) -> Result<Installed> {
    let m = &opened.manifest;
    let base_manifest = check_base(opened, opts)?;
    let base_files: HashMap<&str, &FileEntry> = base_manifest
        .files
        .iter()
        .map(|f| (f.path.as_str(), f))
        .collect();
    let needs = needs(m, &opts.dest);
    for f in &m.files {
        let Some(from) = &f.from else { continue };
        let Some(b) = base_files.get(from.path.as_str()) else {
            return Err(Error::DeltaBase {
                path: opts.dest.clone(),
                reason: format!(
                    "the delta takes {:?} from the base file {:?}, which the installed version does not list",
                    f.path, from.path
                ),
                todo: needs.clone(),
            });
        };
        if from.op == manifest::OP_COPY && (b.size != f.size || b.sha256 != f.sha256) {
            return Err(Error::DeltaBase {
                path: opts.dest.clone(),
                reason: format!(
                    "the delta copies {:?} from the base file {:?}, whose listed size and sha256 differ",
                    f.path, from.path
                ),
                todo: needs.clone(),
            });
        }
    }
    let mut repaired = Vec::new();
    let mut installed = install::unpack_with(opened, opts, &mut |sink| {
        repaired = fill(opened, &opts.dest, &base_files, sink, progress)?;
        Ok(())
    })?;
    installed.notes.repaired_volumes = repaired;
    Ok(installed)
}

fn needs(m: &Manifest, dest: &Path) -> String {
    let base = m.base.as_ref().expect("a delta");
    format!(
        "this delta needs {} version {} installed at {} (by its full bundle, or by the deltas up to it, in order)",
        m.name,
        base.version,
        dest.display()
    )
}

/// Checks that `opts.dest` holds exactly the base and returns its manifest.
fn check_base(opened: &Opened, opts: &UnpackOptions) -> Result<Manifest> {
    let m = &opened.manifest;
    let base = m.base.as_ref().expect("a delta");
    let dest = &opts.dest;
    let refuse = |reason: String| Error::DeltaBase {
        path: dest.clone(),
        reason,
        todo: needs(m, dest),
    };
    let short = format!(
        "needs {} version {} installed at {}",
        m.name,
        base.version,
        dest.display()
    );
    match std::fs::symlink_metadata(dest) {
        Err(_) => return Err(refuse(format!("{short}: nothing is there"))),
        Ok(meta) if !meta.is_dir() => {
            return Err(refuse(format!("{short}: it is not a directory")));
        }
        Ok(_) => {}
    }
    if !receipt::exists(dest) {
        return Err(refuse(format!(
            "{short}: the directory holds no airlock receipt"
        )));
    }
    let signed = receipt::verify(dest, &opts.trust).map_err(|e| {
        refuse(format!(
            "{short}: the receipt there does not verify with the trust set ({e})"
        ))
    })?;
    let old = signed.manifest;
    if old.name != m.name {
        return Err(refuse(format!(
            "{short}: it holds {:?} version {}",
            old.name, old.version
        )));
    }
    let sha = hex::encode(Sha256::digest(&signed.bytes));
    if sha != base.manifest_sha256 {
        let reason = if sha == opened.manifest_sha256 {
            format!(
                "{short}: it already holds version {} from this very bundle",
                m.version
            )
        } else if old.version != base.version {
            format!(
                "{short}: it holds version {} (deltas apply in order: this one builds on version {})",
                old.version, base.version
            )
        } else {
            format!(
                "{short}: it holds another build of version {} (its manifest sha256 is {sha}, the delta was made against {})",
                old.version, base.manifest_sha256
            )
        };
        return Err(refuse(reason));
    }
    Ok(old)
}

/// Opens `path` below `dest` for reading, one component at a time, following no symbolic
/// link and refusing anything but a regular file (a FIFO does not block the open).
fn open_base(dest: &Path, path: &str) -> io::Result<File> {
    let dir_flags = OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::RDONLY | OFlags::CLOEXEC;
    let mut fd = rustix::fs::open(dest, dir_flags, Mode::empty())?;
    let (parents, name) = path.rsplit_once('/').unwrap_or(("", path));
    for c in parents.split('/').filter(|c| !c.is_empty()) {
        fd = rustix::fs::openat(&fd, c, dir_flags, Mode::empty())?;
    }
    let f = rustix::fs::openat(
        &fd,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK,
        Mode::empty(),
    )?;
    let f = File::from(f);
    if !f.metadata()?.is_file() {
        return Err(io::Error::other("not a regular file"));
    }
    Ok(f)
}

/// The base file `b` as installed under `dest`, re-hashed against its receipt entry; a
/// mismatch (disk rot, a change since the install) refuses the delta, naming the file.
fn checked_base(dest: &Path, b: &FileEntry, m: &Manifest) -> Result<File> {
    let changed = |what: String| Error::DeltaBase {
        path: dest.to_path_buf(),
        reason: format!(
            "the base file {:?} no longer matches its receipt: {what}",
            b.path
        ),
        todo: format!(
            "restore the base: unpack {} version {} again (its full bundle, or the deltas up to it), then apply this delta; or unpack the full bundle of version {}",
            m.name,
            m.base.as_ref().map_or(0, |b| b.version),
            m.version
        ),
    };
    let f = open_base(dest, &b.path).map_err(|e| changed(format!("cannot open it ({e})")))?;
    let len = f
        .metadata()
        .map_err(|e| Error::io(dest.join(&b.path), e))?
        .len();
    if len != b.size {
        return Err(changed(format!(
            "it has {len} bytes, the receipt says {}",
            b.size
        )));
    }
    let digest = hash_file(&f, len).map_err(|e| Error::io(dest.join(&b.path), e))?;
    if digest != b.sha256 {
        return Err(changed(format!(
            "its sha256 is {digest}, the receipt says {}",
            b.sha256
        )));
    }
    Ok(f)
}

fn hash_file(f: &File, len: u64) -> io::Result<String> {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; PIECE];
    let mut pos = 0u64;
    while pos < len {
        let n = (len - pos).min(PIECE as u64) as usize;
        f.read_exact_at(&mut buf[..n], pos)?;
        h.update(&buf[..n]);
        pos += n as u64;
    }
    Ok(hex::encode(h.finalize()))
}

/// Feeds the staging tree: directories, copies, then the stream.
fn fill(
    opened: &Opened,
    dest: &Path,
    base_files: &HashMap<&str, &FileEntry>,
    sink: &mut dyn EntrySink,
    progress: &dyn Progress,
) -> Result<Vec<String>> {
    let m = &opened.manifest;
    // Every directory first: a patch arrives under `.airlock-delta`, usually before the
    // directory of the file it rebuilds.
    for d in &m.directories {
        sink.dir(d)?;
    }
    for f in &m.files {
        let Some(from) = f.from.as_ref().filter(|fr| fr.op == manifest::OP_COPY) else {
            continue;
        };
        let b = base_files[from.path.as_str()];
        progress.item(&f.path);
        copy_file(dest, b, f, m, sink)?;
    }
    let mut delta = DeltaSink {
        inner: sink,
        m,
        dest,
        base_files,
        current: Current::None,
    };
    read::stream(opened, ReadMode::Strict, &mut delta, progress).map(|r| r.repaired)
}

/// Writes the copy `f` of base file `b`: cloned when the filesystem can (and the clone is then
/// read back and hashed), else read, hashed and written in one pass.
fn copy_file(
    dest: &Path,
    b: &FileEntry,
    f: &FileEntry,
    m: &Manifest,
    sink: &mut dyn EntrySink,
) -> Result<()> {
    let src = open_base(dest, &b.path).map_err(|e| Error::DeltaBase {
        path: dest.to_path_buf(),
        reason: format!("the base file {:?} cannot be opened ({e})", b.path),
        todo: needs(m, dest),
    })?;
    let rot = |what: String| Error::DeltaBase {
        path: dest.to_path_buf(),
        reason: format!(
            "the base file {:?} no longer matches its receipt: {what}",
            b.path
        ),
        todo: format!(
            "restore the base (unpack {} version {} again), then apply this delta; or unpack the full bundle of version {}",
            m.name,
            m.base.as_ref().map_or(0, |b| b.version),
            m.version
        ),
    };
    if let Some(digest) = sink.clone_file(f, &src)? {
        if digest != f.sha256 {
            return Err(rot(format!(
                "its sha256 is {digest}, the receipt says {}",
                f.sha256
            )));
        }
        return sink.end_file(f);
    }
    sink.begin_file(f)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; PIECE];
    let mut pos = 0u64;
    loop {
        let n = src
            .read_at(&mut buf, pos)
            .map_err(|e| Error::io(dest.join(&b.path), e))?;
        if n == 0 {
            break;
        }
        pos += n as u64;
        if pos > f.size {
            return Err(rot(format!("it has more than {} bytes", f.size)));
        }
        h.update(&buf[..n]);
        sink.data(&buf[..n])?;
    }
    let digest = hex::encode(h.finalize());
    if pos != f.size {
        return Err(rot(format!(
            "it has {pos} bytes, the receipt says {}",
            f.size
        )));
    }
    if digest != f.sha256 {
        return Err(rot(format!(
            "its sha256 is {digest}, the receipt says {}",
            f.sha256
        )));
    }
    sink.end_file(f)
}

enum Current {
    None,
    Carried,
    Patch {
        index: usize,
        dec: Box<PushDecoder>,
        hash: Sha256,
    },
}

/// Passes directories and carried files through (directories were made up front) and
/// applies each patch as it streams.
struct DeltaSink<'a> {
    inner: &'a mut dyn EntrySink,
    m: &'a Manifest,
    dest: &'a Path,
    base_files: &'a HashMap<&'a str, &'a FileEntry>,
    current: Current,
}

impl DeltaSink<'_> {
    fn patch_error(&self, index: usize, e: PatchError) -> Error {
        match e {
            PatchError::Io(e) if e.kind() == io::ErrorKind::Other && e.to_string() == "sink" => {
                Error::io(self.dest, e)
            }
            e => Error::BadFile {
                path: self.m.files[index].path.clone(),
                reason: format!(
                    "its patch {} does not rebuild it: {e}",
                    manifest::patch_path(index)
                ),
            },
        }
    }
}

/// Runs `f` with an emit callback that hashes and forwards to `inner`, keeping the sink's own
/// error (the callback can only return an `io::Error`).
fn with_emit<T>(
    inner: &mut dyn EntrySink,
    hash: &mut Sha256,
    f: impl FnOnce(&mut dyn FnMut(&[u8]) -> io::Result<()>) -> std::result::Result<T, PatchError>,
) -> Result<std::result::Result<T, PatchError>> {
    let mut failed: Option<Error> = None;
    let r = {
        let mut emit = |b: &[u8]| -> io::Result<()> {
            hash.update(b);
            inner.data(b).map_err(|e| {
                failed = Some(e);
                io::Error::other("sink")
            })
        };
        f(&mut emit)
    };
    match failed {
        Some(e) => Err(e),
        None => Ok(r),
    }
}

impl EntrySink for DeltaSink<'_> {
    fn dir(&mut self, _path: &str) -> Result<()> {
        // Made before the stream (`.airlock-delta` is the stream's own and is not installed).
        Ok(())
    }

    fn begin_file(&mut self, file: &FileEntry) -> Result<()> {
        let Some(index) = file
            .path
            .strip_prefix(manifest::DELTA_DIR)
            .and_then(|r| r.strip_prefix('/'))
            .and_then(|i| i.parse::<usize>().ok())
        else {
            self.current = Current::Carried;
            return self.inner.begin_file(file);
        };
        // The stream checks already held this entry to the manifest's patch list.
        let target = &self.m.files[index];
        let from = target.from.as_ref().expect("a patch entry has a from");
        let b = self.base_files[from.path.as_str()];
        let base = checked_base(self.dest, b, self.m)?;
        let map = match from.map.as_deref() {
            Some("safetensors") => Map::Safetensors,
            _ => Map::Bytes,
        };
        let dec =
            PushDecoder::new(base, map, target.size).map_err(|e| self.patch_error(index, e))?;
        self.inner.begin_file(target)?;
        self.current = Current::Patch {
            index,
            dec: Box::new(dec),
            hash: Sha256::new(),
        };
        Ok(())
    }

    fn data(&mut self, bytes: &[u8]) -> Result<()> {
        match &mut self.current {
            Current::Patch { index, dec, hash } => {
                let index = *index;
                let r = with_emit(self.inner, hash, |emit| dec.write(bytes, emit))?;
                r.map_err(|e| self.patch_error(index, e))
            }
            _ => self.inner.data(bytes),
        }
    }

    fn end_file(&mut self, file: &FileEntry) -> Result<()> {
        match std::mem::replace(&mut self.current, Current::None) {
            Current::Patch {
                index,
                dec,
                mut hash,
            } => {
                let r = with_emit(self.inner, &mut hash, |emit| dec.finish(emit))?;
                r.map_err(|e| self.patch_error(index, e))?;
                let target = &self.m.files[index];
                let digest = hex::encode(hash.finalize());
                if digest != target.sha256 {
                    return Err(Error::BadFile {
                        path: target.path.clone(),
                        reason: format!(
                            "its patch {} rebuilds content with sha256 {digest}, the manifest says {}",
                            manifest::patch_path(index),
                            target.sha256
                        ),
                    });
                }
                self.inner.end_file(target)
            }
            _ => self.inner.end_file(file),
        }
    }
}
