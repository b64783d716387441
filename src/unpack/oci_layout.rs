//! The OCI image layout target: `unpack ... --oci-layout DIR[:TAG]` writes the same ModelPack
//! artifact `airlock push` publishes ([`crate::oci::modelpack`]) into an OCI image layout
//! (image-spec `image-layout.md`): `DIR/oci-layout`, `DIR/index.json`, `DIR/blobs/sha256/`.
//!
//! It is what read-only artifact stores (CRI-O, Kubernetes image volumes) mount without a
//! registry, and what `skopeo copy oci:DIR:TAG docker://...` or ORAS copy into a registry
//! later. Every file is one raw blob named by its signed SHA-256, so versions share unchanged
//! files and a delta unpacked into a layout that holds its base reuses the base's blobs.
//!
//! A layout that exists is updated, never corrupted: blobs are written in a private staging
//! directory inside `DIR` (same filesystem), synced, and renamed into `blobs/sha256/` once
//! verified; a blob is content-addressed and unreferenced until `index.json` names it, so a
//! kill at any point leaves at most unreferenced blobs (allowed by the spec). An existing blob
//! is used only after it hashes to its name (else the verified copy replaces it). `index.json`
//! is replaced last, atomically (a new file renamed over it), under a lock that serializes
//! writers, keeping every other tag.
//!
//! A new or empty directory gets its `oci-layout` file first, before any blob, so what a first
//! unpack interrupted leaves (blobs, no `index.json`) is a layout the next unpack completes,
//! reusing the blobs. A directory without `oci-layout` holding only `blobs/sha256/` of
//! content-addressed names (what an interrupted first unpack of an earlier airlock left) is
//! completed the same way; any other directory is refused.

use std::fs::File;
use std::io::Write;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use rustix::fs::{FileType, RenameFlags};
use serde_json::{Value, json};

use super::notes::{self, InstallNotes};
use crate::bundle::open::Opened;
use crate::entries::Base;
use crate::entries::EntrySink;
use crate::error::{Error, Result};
use crate::fsio::{self, Cause};
use crate::manifest::{FileEntry, MAX_MANIFEST_BYTES, Manifest};
use crate::oci::modelpack::{self, Artifact, ConfigCapture, MAX_CONFIG_JSON};
use crate::pipeline::{Fed, Target};
use crate::progress::Progress;
use crate::staging::{self, Cleanup, Staging, SyncThread};

/// The layout's `oci-layout` file.
const LAYOUT_FILE: &str = "oci-layout";
/// Its content (image-spec 1.x).
const LAYOUT_VERSION: &str = r#"{"imageLayoutVersion":"1.0.0"}"#;
/// The index.
const INDEX: &str = "index.json";
/// The most read of an existing `index.json`.
const MAX_INDEX_BYTES: u64 = 16 << 20;
/// Serializes writers of one layout's `index.json`.
const LOCK: &str = ".airlock-lock";
/// The annotation naming a tag in `index.json`.
pub(crate) const REF_NAME: &str = "org.opencontainers.image.ref.name";
/// The OCI image index media type.
const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";

/// Options for an unpack into an OCI image layout.
#[derive(Clone, Debug)]
pub struct LayoutOptions {
    /// The layout directory (created if missing; its parent must exist).
    pub dir: PathBuf,
    /// The tag (`org.opencontainers.image.ref.name`); default: the bundle's version.
    pub tag: Option<String>,
    /// Check free space before writing.
    pub check_space: bool,
    /// Read the bundle from the first file whose blob the layout does not hold yet (each held
    /// blob hashed first): a rerun after an interrupted unpack, or a new version sharing files.
    /// Off (`--no-resume`): the whole stream is read; held blobs are still kept.
    pub resume: bool,
}

impl LayoutOptions {
    /// Splits `DIR[:TAG]`: a final `:TAG` whose text is a valid OCI tag (`[A-Za-z0-9_]
    /// [A-Za-z0-9._-]{0,127}`) is the tag; anything else is part of the path.
    pub fn parse(arg: &str, check_space: bool) -> LayoutOptions {
        if let Some((dir, tag)) = arg.rsplit_once(':')
            && !dir.is_empty()
            && is_tag(tag)
        {
            return LayoutOptions {
                dir: PathBuf::from(dir),
                tag: Some(tag.to_string()),
                check_space,
                resume: true,
            };
        }
        LayoutOptions {
            dir: PathBuf::from(arg),
            tag: None,
            check_space,
            resume: true,
        }
    }
}

/// Whether `t` is a valid OCI tag.
pub fn is_tag(t: &str) -> bool {
    let b = t.as_bytes();
    !b.is_empty()
        && b.len() <= 128
        && (b[0].is_ascii_alphanumeric() || b[0] == b'_')
        && b[1..]
            .iter()
            .all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-'))
}

/// What an unpack into a layout did.
#[derive(Debug, serde::Serialize)]
pub struct LayoutWritten {
    /// The layout directory.
    pub layout: PathBuf,
    /// The tag written.
    pub tag: String,
    /// `sha256:HEX` of the image manifest the tag names.
    pub manifest_digest: String,
    /// The digest the tag named before, if it named another.
    pub previous_digest: Option<String>,
    /// Blobs added to the layout.
    pub blobs_written: u64,
    /// Blobs already there that hashed to their names and were kept.
    pub blobs_reused: u64,
    /// Blobs already there that did not hash to their names and were replaced.
    pub blobs_repaired: Vec<PathBuf>,
    /// Cleanup (and no model checks: a layout holds blobs, not a tree).
    #[serde(flatten)]
    pub notes: InstallNotes,
}

/// Writes into an OCI image layout (module documentation).
pub struct LayoutTarget {
    opts: LayoutOptions,
    begun: Option<Begun>,
}

/// Field order is drop order: the sink before the sync thread, the staging directory last.
struct Begun {
    sink: BlobSink,
    syncer: SyncThread,
    dir: OwnedFd,
    cleanup: Cleanup,
    /// The files whose blobs the layout held, proven, when the stream may skip them.
    kept: Option<crate::pipeline::Kept>,
    staging: Staging,
}

impl LayoutTarget {
    /// A target writing with `opts`.
    pub fn new(opts: LayoutOptions) -> Self {
        LayoutTarget { opts, begun: None }
    }
}

/// What the layout directory held when the unpack began.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Found {
    /// A layout (its `oci-layout` file), with or without an `index.json` yet.
    Layout,
    /// Nothing but airlock's own work files: a directory just created, or an empty one.
    Empty,
    /// What an unpack by an earlier airlock left when it was interrupted before its commit:
    /// `blobs/sha256/` holding only blobs named by their SHA-256, no `oci-layout`, no
    /// `index.json` (that airlock wrote `oci-layout` last; this one writes it first).
    Unfinished,
}

/// Opens (or creates) the layout directory and says what it holds: a layout, nothing, or what
/// an interrupted first unpack left. Anything else is refused, naming what is there.
fn open_layout(dir: &Path) -> Result<(OwnedFd, Found)> {
    match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let parent = fsio::parent_dir(dir);
            let name = dir
                .file_name()
                .and_then(|n| n.to_str())
                .ok_or_else(|| Error::Usage(format!("{}: not a usable name", dir.display())))?;
            let pfd = fsio::open_dir_path(&parent, fsio::Follow::Final)
                .map_err(|e| Error::io(&parent, e.into()))?;
            crate::durable::mkdir_at(&pfd, &parent, name, 0o755)?;
        }
        Err(e) => return Err(Error::io(dir, e)),
        Ok(m) if m.file_type().is_symlink() => {
            return Err(Error::Usage(format!(
                "{} is a symbolic link; give the layout directory itself",
                dir.display()
            )));
        }
        Ok(m) if !m.is_dir() => {
            return Err(Error::Usage(format!(
                "{} exists and is not a directory",
                dir.display()
            )));
        }
        Ok(_) => {}
    }
    let fd = fsio::open_dir_path(dir, fsio::Follow::Never).map_err(|e| Error::io(dir, e.into()))?;
    let found =
        match fsio::read_below_capped(&fd, LAYOUT_FILE, 4096).map_err(fsio::Error::into_cause) {
            Ok(bytes) => {
                let v: Value = serde_json::from_slice(&bytes)
                    .map_err(|e| layout_error(dir, LAYOUT_FILE, e.to_string()))?;
                if v.get("imageLayoutVersion").and_then(Value::as_str) != Some("1.0.0") {
                    return Err(layout_error(
                        dir,
                        LAYOUT_FILE,
                        format!("declares {v}, not the image layout version 1.0.0 airlock writes"),
                    ));
                }
                Found::Layout
            }
            Err(Cause::NotFound) => without_layout_file(dir, &fd)?,
            Err(e) => return Err(layout_error(dir, LAYOUT_FILE, e.to_string())),
        };
    Ok((fd, found))
}

/// What a directory without an `oci-layout` file holds: nothing but airlock's work files
/// (`.airlock-*`), or an interrupted first unpack's blobs ([`Found::Unfinished`]: only
/// `blobs/sha256/`, holding only regular files named by 64 lowercase hex digits, all of this
/// user's). Anything else is not airlock's to write into.
fn without_layout_file(dir: &Path, fd: &OwnedFd) -> Result<Found> {
    let mut blobs = false;
    let mut foreign = Vec::new();
    for (n, kind) in fsio::dir_entries(fd).map_err(|e| Error::io(dir, e))? {
        match n.to_str() {
            _ if n.to_string_lossy().starts_with(".airlock-") => {}
            Some("blobs") if kind == FileType::Directory => blobs = true,
            _ => foreign.push(n.to_string_lossy().into_owned()),
        }
    }
    let unfinished = foreign.is_empty() && blobs && only_blobs(fd);
    if unfinished {
        return Ok(Found::Unfinished);
    }
    if foreign.is_empty() && !blobs {
        return Ok(Found::Empty);
    }
    if blobs {
        foreign.insert(0, "blobs".into());
    }
    foreign.sort();
    let shown = foreign
        .iter()
        .take(3)
        .map(|n| format!("{n:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    Err(Error::Arguments {
        message: format!(
            "{} is neither an OCI image layout (no oci-layout file) nor empty, nor what an interrupted unpack left there: it holds {shown}{}",
            dir.display(),
            if foreign.len() > 3 {
                format!(" and {} more", foreign.len() - 3)
            } else {
                String::new()
            }
        ),
        hint: "airlock writes a layout only into a new or empty directory, an existing layout, or one an interrupted unpack began: give --oci-layout a new directory (it is created), or move what is there elsewhere first".into(),
    })
}

/// Whether `dir` (this user's) holds exactly `blobs/sha256/` (this user's), and that only
/// regular files named by 64 lowercase hex digits: an interrupted first unpack's blobs.
fn only_blobs(dir: &OwnedFd) -> bool {
    let me = rustix::process::geteuid().as_raw();
    let mine = |fd: &OwnedFd| rustix::fs::fstat(fd).is_ok_and(|st| st.st_uid == me);
    let only = |fd: &OwnedFd, name: &str| {
        fsio::dir_entries(fd)
            .is_ok_and(|e| e.len() == 1 && e[0] == (name.into(), FileType::Directory))
    };
    let Ok(blobs) = fsio::open_dir_at(dir, "blobs") else {
        return false;
    };
    let Ok(sha256) = fsio::open_dir_at(&blobs, "sha256") else {
        return false;
    };
    mine(dir)
        && mine(&blobs)
        && mine(&sha256)
        && only(&blobs, "sha256")
        && fsio::dir_entries(&sha256).is_ok_and(|e| {
            e.iter().all(|(n, k)| {
                *k == FileType::RegularFile && n.to_str().is_some_and(crate::hexdigest::is_sha256)
            })
        })
}

fn layout_error(dir: &Path, name: &str, reason: impl std::fmt::Display) -> Error {
    Error::Usage(format!("{}: {reason}", dir.join(name).display()))
}

/// Opens `blobs/sha256` below the layout, creating what is missing (mode 0755).
fn open_blobs(dir: &OwnedFd, path: &Path) -> Result<OwnedFd> {
    let mut fd = fsio::open_below(dir, ".").map_err(|e| Error::io(path, e.into()))?;
    let mut at = path.to_path_buf();
    for name in ["blobs", "sha256"] {
        at.push(name);
        fd = match fsio::open_dir_at(&fd, name) {
            Ok(next) => next,
            Err(e) if matches!(e.errno(), Some(rustix::io::Errno::NOENT)) => {
                crate::durable::mkdir_at(&fd, at.parent().expect("inside"), name, 0o755)?
            }
            Err(e) => return Err(Error::io(&at, e.into())),
        };
    }
    Ok(fd)
}

impl Target for LayoutTarget {
    type Done = LayoutWritten;

    fn begin(&mut self, opened: &Opened, progress: &dyn Progress) -> Result<()> {
        let m = &opened.manifest;
        if let Some(tag) = &self.opts.tag
            && !is_tag(tag)
        {
            return Err(Error::Usage(format!("{tag:?} is not a valid OCI tag")));
        }
        let path = self.opts.dir.clone();
        // What skopeo or ORAS copy into a registry later must be what a registry accepts.
        let (layers, _) = modelpack::bundle_layers(opened);
        modelpack::check_publishable(m, &layers, &opened.manifest_sha256).map_err(|reason| {
            Error::ManifestTooLarge {
                path: path.clone(),
                reason: reason.to_string(),
            }
        })?;
        let (dir, found) = open_layout(&path)?;
        let cleanup = staging::clean_stale(&path)?;
        // The blobs the layout holds, each hashed once: a verified blob is renamed into place
        // as soon as its file matched, so what an interrupted unpack wrote is there.
        let kept = match fsio::open_below(&dir, "blobs/sha256") {
            Ok(blobs) if m.base.is_none() && found != Found::Empty => {
                Some(held_blobs(&blobs, m, progress))
            }
            _ => None,
        };
        if self.opts.check_space {
            let extra = (opened.manifest_bytes.len() + opened.signature_text.len()) as u64;
            let held = kept.as_ref().map_or(0, |k| k.bytes);
            notes::check_space(&path, notes::space_needed(m, extra).saturating_sub(held))?;
        }
        // `oci-layout` before the first blob: a directory an interrupted unpack leaves holding
        // blobs is a layout (without an index yet) that the next unpack completes.
        if found != Found::Layout {
            crate::durable::replace_at(&dir, &path, LAYOUT_FILE, LAYOUT_VERSION.as_bytes(), 0o644)?;
        }
        let blobs = open_blobs(&dir, &path)?;
        let staging = Staging::create(&path, "layout")?;
        let syncer = SyncThread::new();
        let sink = BlobSink {
            blobs,
            blobs_path: path.join("blobs/sha256"),
            work: staging
                .fd()
                .try_clone()
                .map_err(|e| Error::io(staging.path(), e))?,
            work_path: staging.path(),
            next: 0,
            current: None,
            written: 0,
            reused: 0,
            repaired: Vec::new(),
            config_json: ConfigCapture::default(),
            syncer: syncer.sender(),
            held: kept
                .iter()
                .flat_map(|k| &k.files)
                .filter_map(|p| m.files.iter().find(|f| &f.path == p))
                .map(|f| f.sha256.clone())
                .collect(),
            delivered: Default::default(),
        };
        let kept = kept.filter(|k| self.opts.resume && !k.files.is_empty());
        self.begun = Some(Begun {
            sink,
            syncer,
            dir,
            cleanup,
            kept,
            staging,
        });
        Ok(())
    }

    fn kept(&self) -> Option<&crate::pipeline::Kept> {
        self.begun.as_ref().and_then(|b| b.kept.as_ref())
    }

    type Base = LayoutBase;

    fn base(&mut self, opened: &Opened) -> Result<LayoutBase> {
        let blobs_path = self.opts.dir.join("blobs/sha256");
        let m = &opened.manifest;
        let base = m.base.as_ref().expect("a delta");
        let blobs = fsio::open_dir_path(&self.opts.dir, fsio::Follow::Never)
            .and_then(|d| fsio::open_below(&d, "blobs/sha256"))
            .map_err(|e| Error::DeltaBase {
                path: self.opts.dir.clone(),
                reason: format!(
                    "needs {} version {} in this layout, and it has no blobs to hold it ({})",
                    m.name,
                    base.version,
                    std::io::Error::from(e)
                ),
                todo: layout_needs(&m.name, base.version),
            })?;
        LayoutBase::open(blobs, blobs_path, opened)
    }

    fn sink(&mut self) -> &mut dyn EntrySink {
        &mut self.begun.as_mut().expect("begin came first").sink
    }

    fn commit(
        mut self,
        opened: &Opened,
        fed: Fed,
        _progress: &dyn Progress,
    ) -> Result<LayoutWritten> {
        let Begun {
            mut sink,
            syncer,
            dir,
            cleanup,
            kept,
            staging,
        } = self.begun.take().expect("begin came first");
        let m = &opened.manifest;
        let path = self.opts.dir.clone();
        let tag = self
            .opts
            .tag
            .clone()
            .unwrap_or_else(|| m.version.to_string());

        // The root config.json for the artifact's config: seen in the stream, or read back
        // from its blob (a delta may copy it), held to its signed digest either way.
        let config_json = match sink.config_json.take() {
            Some(c) => Some(c),
            None => match modelpack::config_json_entry(m) {
                Some(f) => sink.read_blob(&f.sha256, f.size)?,
                None => None,
            },
        };
        let artifact = Artifact::of(opened, config_json.as_deref());
        for (layer, bytes) in &artifact.small {
            sink.put_small(&layer.digest, bytes)?;
        }
        sink.put_small(&modelpack::digest_of(&artifact.config), &artifact.config)?;
        let image_digest = modelpack::digest_of(&artifact.image);
        sink.put_small(&image_digest, &artifact.image)?;
        let BlobSink {
            blobs,
            blobs_path,
            current,
            written,
            reused,
            repaired,
            syncer: sync_tx,
            delivered,
            ..
        } = sink;
        drop((current, sync_tx));
        syncer.finish()?;
        crate::durable::sync_dir_fd(&blobs, &blobs_path)?;

        // index.json last, under the layout's lock; a signal waits until it is in place.
        let lock = fsio::open_lock_at(&dir, LOCK, 0o600)
            .map_err(|e| Error::io(path.join(LOCK), e.into()))?;
        rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive)
            .map_err(|e| Error::io(path.join(LOCK), e.into()))?;
        let _commit = staging::commit_guard();
        if fsio::read_below_capped(&dir, LAYOUT_FILE, 4096).is_err() {
            crate::durable::replace_at(&dir, &path, LAYOUT_FILE, LAYOUT_VERSION.as_bytes(), 0o644)?;
        }
        let mut index = match fsio::read_below_capped(&dir, INDEX, MAX_INDEX_BYTES)
            .map_err(fsio::Error::into_cause)
        {
            Ok(bytes) => serde_json::from_slice::<Value>(&bytes)
                .map_err(|e| layout_error(&path, INDEX, format!("is not JSON: {e}")))?,
            Err(Cause::NotFound) => {
                json!({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": []})
            }
            Err(e) => return Err(Error::io(path.join(INDEX), e.into())),
        };
        let previous_digest = set_tag(
            &mut index,
            &tag,
            json!({
                "mediaType": crate::oci::client::OCI_MANIFEST,
                "artifactType": modelpack::ARTIFACT_TYPE,
                "digest": image_digest,
                "size": artifact.image.len(),
                "annotations": { REF_NAME: tag },
            }),
        )
        .map_err(|why| layout_error(&path, INDEX, why))?;
        let mut bytes = serde_json::to_vec_pretty(&index).expect("json");
        bytes.push(b'\n');
        crate::durable::replace_at(&dir, &path, INDEX, &bytes, 0o644)?;
        drop(_commit);
        drop(staging);
        let mut notes = InstallNotes {
            cleaned_stale: cleanup.removed,
            stale_skipped: cleanup.skipped,
            ..InstallNotes::default()
        };
        notes.repaired_volumes = fed.repaired_volumes;
        // The files never delivered were left out because the layout holds their blobs
        // (`holds`: the stream started after them, the registry or the delta skipped them):
        // reused too.
        let reused = reused
            + m.files
                .iter()
                .filter(|f| !delivered.contains(&f.path))
                .count() as u64;
        notes.resumed = super::resume::report(kept.as_ref(), fed.started_at);
        notes.volume_bytes_read = fsio::volume_bytes_read();
        Ok(LayoutWritten {
            layout: path,
            tag,
            previous_digest: previous_digest.filter(|d| *d != image_digest),
            manifest_digest: image_digest,
            blobs_written: written,
            blobs_reused: reused,
            blobs_repaired: repaired,
            notes,
        })
    }
}

/// An `index.json` without its `manifests` list (typed; the words follow the file's path).
#[derive(Debug, thiserror::Error)]
#[error("has no manifests list")]
struct NoManifestsList;

/// Points `tag` at `descriptor` in the image index `index`, keeping every other entry; returns
/// the digest the tag named before.
fn set_tag(
    index: &mut Value,
    tag: &str,
    descriptor: Value,
) -> std::result::Result<Option<String>, NoManifestsList> {
    let manifests = index
        .get_mut("manifests")
        .and_then(Value::as_array_mut)
        .ok_or(NoManifestsList)?;
    let mut previous = None;
    manifests.retain(|d| {
        let named = d
            .get("annotations")
            .and_then(|a| a.get(REF_NAME))
            .and_then(Value::as_str)
            == Some(tag);
        if named {
            previous = d.get("digest").and_then(Value::as_str).map(str::to_string);
        }
        !named
    });
    manifests.push(descriptor);
    Ok(previous)
}

enum Current {
    /// Writing a new blob into the work directory.
    Writing {
        file: File,
        tmp: String,
        sha256: String,
    },
    /// The layout already holds this file's blob (checked): its bytes are dropped.
    Held,
}

/// Writes each file as a blob: into the work directory, then renamed into `blobs/sha256/`
/// once verified.
struct BlobSink {
    blobs: OwnedFd,
    blobs_path: PathBuf,
    work: OwnedFd,
    work_path: PathBuf,
    next: u64,
    current: Option<Current>,
    written: u64,
    reused: u64,
    repaired: Vec<PathBuf>,
    /// The root `config.json` (small), as it passed.
    config_json: ConfigCapture,
    syncer: crossbeam_channel::Sender<(File, PathBuf)>,
    /// Blobs (by SHA-256) hashed to their names when the unpack began: not hashed again.
    held: std::collections::HashSet<String>,
    /// The files the stream delivered, by path.
    delivered: std::collections::HashSet<String>,
}

impl BlobSink {
    /// Whether `blobs/sha256/<sha256>` is there and holds exactly `size` bytes hashing to its
    /// name. A blob that is there but wrong is left for the verified copy to replace.
    fn has_blob(&self, sha256: &str, size: u64) -> Result<bool> {
        match fsio::open_file_below(&self.blobs, sha256).map_err(fsio::Error::into_cause) {
            Ok((f, len)) if len == size => {
                let got = fsio::hash_exact(&f, len)
                    .map_err(|e| Error::io(self.blobs_path.join(sha256), e))?;
                Ok(got == sha256)
            }
            Ok(_) | Err(Cause::NotFound) => Ok(false),
            Err(Cause::Link | Cause::NotRegular(_)) => Ok(false),
            Err(e) => Err(Error::io(self.blobs_path.join(sha256), e.into())),
        }
    }

    /// Reads a small blob back if it is there and matches its name.
    fn read_blob(&self, sha256: &str, size: u64) -> Result<Option<Vec<u8>>> {
        if size > MAX_CONFIG_JSON || !self.has_blob(sha256, size)? {
            return Ok(None);
        }
        fsio::read_below_capped(&self.blobs, sha256, size)
            .map(Some)
            .map_err(|e| Error::io(self.blobs_path.join(sha256), e.into()))
    }

    fn new_tmp(&mut self) -> Result<(File, String)> {
        let tmp = format!("blob-{}", self.next);
        self.next += 1;
        let f = fsio::create_at(&self.work, &tmp, 0o644, false)
            .map_err(|e| Error::io(self.work_path.join(&tmp), e.into()))?;
        Ok((f, tmp))
    }

    /// Moves the verified blob `tmp` into place as `sha256`, unless a good copy is there.
    fn place(&mut self, file: File, tmp: &str, sha256: &str, size: u64) -> Result<()> {
        let dest = self.blobs_path.join(sha256);
        match fsio::rename_at(&self.work, tmp, &self.blobs, sha256, RenameFlags::NOREPLACE) {
            Ok(()) => {
                self.written += 1;
                let _ = self.syncer.send((file, dest));
                Ok(())
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                if self.has_blob(sha256, size)? {
                    self.reused += 1;
                    return Ok(());
                }
                fsio::rename_at(&self.work, tmp, &self.blobs, sha256, RenameFlags::empty())
                    .map_err(|e| Error::io(&dest, e.into()))?;
                let _ = self.syncer.send((file, dest.clone()));
                self.repaired.push(dest);
                Ok(())
            }
            Err(e) => Err(Error::io(&dest, e.into())),
        }
    }

    /// Writes a small blob (`sha256:HEX` digest) the artifact adds (manifest, signature,
    /// config, image manifest).
    fn put_small(&mut self, digest: &str, bytes: &[u8]) -> Result<()> {
        let sha256 = digest.strip_prefix("sha256:").expect("a sha256 digest");
        if self.has_blob(sha256, bytes.len() as u64)? {
            self.reused += 1;
            return Ok(());
        }
        let (mut f, tmp) = self.new_tmp()?;
        f.write_all(bytes)
            .map_err(|e| Error::io(self.work_path.join(&tmp), e))?;
        self.place(f, &tmp, sha256, bytes.len() as u64)
    }
}

impl EntrySink for BlobSink {
    fn dir(&mut self, _path: &str) -> Result<()> {
        // A layout holds blobs; directories are implied by the layers' paths.
        Ok(())
    }

    fn begin_file(&mut self, file: &FileEntry) -> Result<()> {
        self.config_json.begin(file);
        self.delivered.insert(file.path.clone());
        if self.held.contains(&file.sha256) || self.has_blob(&file.sha256, file.size)? {
            self.current = Some(Current::Held);
            return Ok(());
        }
        let (f, tmp) = self.new_tmp()?;
        self.current = Some(Current::Writing {
            file: f,
            tmp,
            sha256: file.sha256.clone(),
        });
        Ok(())
    }

    fn data(&mut self, bytes: &[u8]) -> Result<()> {
        self.config_json.data(bytes);
        match self.current.as_mut() {
            Some(Current::Writing { file, tmp, .. }) => file
                .write_all(bytes)
                .map_err(|e| Error::io(self.work_path.join(&*tmp), e)),
            _ => Ok(()),
        }
    }

    fn end_file(&mut self, file: &FileEntry) -> Result<()> {
        self.config_json.end();
        match self.current.take() {
            Some(Current::Writing {
                file: f,
                tmp,
                sha256,
            }) => self.place(f, &tmp, &sha256, file.size),
            Some(Current::Held) => {
                self.reused += 1;
                Ok(())
            }
            None => Ok(()),
        }
    }

    fn holds(&mut self, file: &FileEntry) -> Result<bool> {
        // A file left out because of this counts as reused at commit (never delivered).
        Ok(self.held.contains(&file.sha256) || self.has_blob(&file.sha256, file.size)?)
    }

    fn holds_dir(&mut self, _path: &str) -> Result<bool> {
        // A layout holds blobs; directories are implied by the layers' paths.
        Ok(true)
    }
}

/// The files of `m` whose blobs `blobs` holds, each a regular file (no link followed) of its
/// signed size hashing to its name, hashed in parallel; every directory (a layout has none).
fn held_blobs(blobs: &OwnedFd, m: &Manifest, progress: &dyn Progress) -> crate::pipeline::Kept {
    use rayon::prelude::*;
    let present: Vec<&FileEntry> = m
        .files
        .par_iter()
        .filter(
            |f| matches!(fsio::open_file_below(blobs, &f.sha256), Ok((_, len)) if len == f.size),
        )
        .collect();
    progress.start(
        crate::progress::Phase::Prove,
        present.iter().map(|f| f.size).sum(),
    );
    let proven: Vec<&FileEntry> = present
        .into_par_iter()
        .filter(|f| {
            fsio::open_file_below(blobs, &f.sha256).is_ok_and(|(file, len)| {
                len == f.size
                    && fsio::hash_file(&file, &|n| progress.advance(n))
                        .is_ok_and(|(got, n)| n == f.size && got == f.sha256)
            })
        })
        .collect();
    progress.finish();
    let mut kept = crate::pipeline::Kept {
        dirs: m.directories.iter().cloned().collect(),
        held_in: "in the layout",
        ..Default::default()
    };
    for f in proven {
        if kept.files.insert(f.path.clone()) {
            kept.bytes += f.size;
        }
    }
    kept
}

/// The base of a delta in a layout: the base's airlock manifest is the blob the delta names by
/// its SHA-256 (`base.manifest_sha256`, under the delta's signature), so it proves itself by its
/// digest; each base file is the blob named by its signed SHA-256, checked before use.
pub struct LayoutBase {
    blobs: OwnedFd,
    blobs_path: PathBuf,
    manifest: Manifest,
    name: String,
    version: u64,
    base_version: u64,
}

impl LayoutBase {
    /// Finds the base of the delta `opened` among the layout's blobs.
    pub fn open(blobs: OwnedFd, blobs_path: PathBuf, opened: &Opened) -> Result<LayoutBase> {
        let m = &opened.manifest;
        let base = m.base.as_ref().expect("a delta");
        let refuse = |reason: String| Error::DeltaBase {
            path: blobs_path.clone(),
            reason,
            todo: layout_needs(&m.name, base.version),
        };
        let bytes = match fsio::read_below_capped(&blobs, &base.manifest_sha256, MAX_MANIFEST_BYTES)
            .map_err(fsio::Error::into_cause)
        {
            Ok(b) => b,
            Err(Cause::NotFound) => {
                return Err(refuse(format!(
                    "needs {} version {} in this layout: it has no blob {} (the base's airlock manifest)",
                    m.name, base.version, base.manifest_sha256
                )));
            }
            Err(e) => {
                return Err(refuse(format!(
                    "the base's airlock manifest blob cannot be read ({e})"
                )));
            }
        };
        if modelpack::digest_of(&bytes) != format!("sha256:{}", base.manifest_sha256) {
            return Err(refuse(format!(
                "the blob {} does not hash to its name (the layout is damaged)",
                base.manifest_sha256
            )));
        }
        let manifest = Manifest::parse(&bytes)
            .map_err(|why| refuse(format!("the base's airlock manifest cannot be read: {why}")))?;
        if manifest.name != m.name || manifest.version != base.version {
            return Err(refuse(format!(
                "the blob {} is the manifest of {} version {}, the delta names {} version {}",
                base.manifest_sha256, manifest.name, manifest.version, base.name, base.version
            )));
        }
        Ok(LayoutBase {
            blobs,
            blobs_path,
            manifest,
            name: m.name.clone(),
            version: m.version,
            base_version: base.version,
        })
    }
}

fn layout_needs(name: &str, base_version: u64) -> String {
    format!(
        "this delta needs {name} version {base_version} in the layout (unpack its full bundle with --oci-layout into the same directory first, or the deltas up to it, in order)"
    )
}

impl Base for LayoutBase {
    fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    fn open(&mut self, b: &FileEntry) -> Result<File> {
        fsio::open_file_below(&self.blobs, &b.sha256)
            .map(|(f, _)| f)
            .map_err(|e| {
                self.rotten(
                    b,
                    format!("its blob {} cannot be opened ({})", b.sha256, e.cause()),
                )
            })
    }

    fn refuse(&self, reason: String) -> Error {
        Error::DeltaBase {
            path: self.blobs_path.clone(),
            reason,
            todo: layout_needs(&self.name, self.base_version),
        }
    }

    fn rotten(&self, b: &FileEntry, what: String) -> Error {
        Error::DeltaBase {
            path: self.blobs_path.join(&b.sha256),
            reason: format!(
                "the base file {:?} in the layout is damaged: {what}",
                b.path
            ),
            todo: format!(
                "unpack {} version {} into the layout again, then apply this delta; or unpack the full bundle of version {}",
                self.name, self.base_version, self.version
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_final_tag_is_split_off_only_when_it_is_a_tag() {
        let o = LayoutOptions::parse("out/layout:v3", true);
        assert_eq!(
            (o.dir, o.tag),
            (PathBuf::from("out/layout"), Some("v3".into()))
        );
        let o = LayoutOptions::parse("out/layout", true);
        assert_eq!((o.dir, o.tag), (PathBuf::from("out/layout"), None));
        let o = LayoutOptions::parse("a:b/c", true);
        assert_eq!((o.dir, o.tag), (PathBuf::from("a:b/c"), None));
        assert!(!is_tag(".hidden") && !is_tag("") && is_tag("_x") && is_tag("1.2-rc"));
        assert!(!is_tag(&"a".repeat(129)));
    }

    #[test]
    fn a_tag_moves_and_the_others_stay() {
        let mut index = json!({"schemaVersion": 2, "manifests": [
            {"digest": "sha256:a", "annotations": {REF_NAME: "1"}},
            {"digest": "sha256:b", "annotations": {REF_NAME: "2"}},
        ]});
        let prev = set_tag(
            &mut index,
            "2",
            json!({"digest": "sha256:c", "annotations": {REF_NAME: "2"}}),
        )
        .unwrap();
        assert_eq!(prev.as_deref(), Some("sha256:b"));
        let digests: Vec<&str> = index["manifests"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["digest"].as_str().unwrap())
            .collect();
        assert_eq!(digests, ["sha256:a", "sha256:c"]);
        assert!(matches!(
            set_tag(&mut json!({}), "x", json!({})),
            Err(NoManifestsList)
        ));
    }

    /// FORMAT.md 14.3 (issue 36 item 9): an entry of the existing `index.json` that is not a
    /// descriptor is another tool's business and kept as it is; an entry naming the tag is
    /// replaced whatever else it holds; an index without a `manifests` list is refused.
    #[test]
    fn malformed_entries_are_kept_unless_they_name_the_tag() {
        let mut index = json!({"schemaVersion": 2, "manifests": [
            "junk",
            {"annotations": {REF_NAME: "1"}},
            {"digest": 7, "annotations": {REF_NAME: "2"}},
            {"digest": "sha256:b", "annotations": {REF_NAME: 3}},
        ]});
        let new = json!({"digest": "sha256:c", "annotations": {REF_NAME: "1"}});
        let prev = set_tag(&mut index, "1", new.clone()).unwrap();
        assert_eq!(prev, None, "the entry named the tag without a digest");
        assert_eq!(
            index["manifests"],
            json!([
                "junk",
                {"digest": 7, "annotations": {REF_NAME: "2"}},
                {"digest": "sha256:b", "annotations": {REF_NAME: 3}},
                new,
            ])
        );
        assert!(set_tag(&mut json!({"manifests": {}}), "1", json!({})).is_err());
        assert!(set_tag(&mut json!([]), "1", json!({})).is_err());
    }
}
