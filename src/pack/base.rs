//! The version a delta is made against, as the staging host has it (`pack --base`): an
//! installed directory (its receipt), a bundle directory, or a `manifest.json` with its
//! `.minisig` beside it; and where the base files' contents can be read on this host.
//!
//! A base on the staging host is as untrusted as a model directory (docs/SECURITY.md): it may
//! hold links leaving it, FIFOs, or files that drifted from its receipt since it was installed.
//! So its files are opened below the base's directory handle, one component at a time, no
//! link followed, without blocking, regular files only ([`crate::fsio`]), and each is hashed
//! against the base manifest before it is used. A file that fails is not used: the new
//! version of it travels whole (carried), which every target installs correctly, and the
//! operator is told which base file is not what its receipt says.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::source::Model;
use crate::bundle::open;
use crate::entries::{EntrySink, Mode};
use crate::error::{Error, Result};
use crate::fsio::{self, Cause};
use crate::keys::PublicKey;
use crate::manifest::{self, FileEntry, Manifest};
use crate::progress::Progress;
use crate::receipt;

/// Bytes of each of the three pieces [`BaseSource::sample_differs`] compares.
pub(crate) const SAMPLE_PIECE: u64 = 64 << 10;

/// Where the base files' contents are on this host.
#[derive(Debug)]
enum Content {
    /// An installed directory, held by a handle.
    Installed { dir: PathBuf, root: OwnedFd },
    /// A bundle signed by the pack's key: the files are extracted from its verified stream.
    Bundle { dir: PathBuf, key: PublicKey },
    /// Snapshots of a Hugging Face cache holding the base's commits: one for a base of one
    /// repository (prefix empty), one per repository the cache holds for a base of several
    /// (prefix its directory and `/`).
    Snapshot(Vec<Part>),
    /// Nowhere: files are taken from the base only where unchanged (copy).
    None,
}

/// One repository's snapshot in a Hugging Face cache serving as base content: the base files
/// whose paths begin with `prefix` are its files.
#[derive(Debug)]
struct Part {
    prefix: String,
    repo: PathBuf,
    commit: String,
}

impl Content {
    /// The snapshot holding base file `path`, and the file's path in it.
    fn snapshot_of<'p>(&self, path: &'p str) -> Option<(&Part, &'p str)> {
        let Content::Snapshot(parts) = self else {
            return None;
        };
        parts
            .iter()
            .find_map(|p| Some((p, path.strip_prefix(p.prefix.as_str())?)))
    }
}

/// The base of a delta on the staging host (module documentation).
#[derive(Debug)]
pub struct BaseSource {
    /// The base manifest.
    pub manifest: Manifest,
    /// SHA-256 of its exact bytes.
    pub manifest_sha256: String,
    content: Content,
    /// What the operator should know (an unverified signature, no contents to patch from,
    /// base files not used).
    pub notes: Vec<String>,
}

/// The manifest, signature and file contents `--base` names, and what kind of base it is.
fn locate(path: &Path) -> Result<(PathBuf, PathBuf, Option<PathBuf>, &'static str)> {
    let meta = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
    let found = if meta.is_dir() {
        if receipt::exists(path) {
            (
                receipt::manifest_path(path),
                receipt::signature_path(path),
                Some(path.to_path_buf()),
                "installed directory",
            )
        } else if path.join(manifest::MANIFEST_NAME).is_file() {
            (
                path.join(manifest::MANIFEST_NAME),
                path.join(manifest::SIGNATURE_NAME),
                None,
                "bundle",
            )
        } else {
            return Err(Error::Usage(format!(
                "--base {}: neither an airlock install (no .airlock/manifest.json) nor a bundle (no manifest.json)",
                path.display()
            )));
        }
    } else {
        let mut sig = path.as_os_str().to_owned();
        sig.push(".minisig");
        (path.to_path_buf(), PathBuf::from(sig), None, "manifest")
    };
    Ok(found)
}

/// The checks `--base` allows before the key is unlocked: the base is there, its manifest
/// parses and its signature file exists. Returns the base manifest, whose name a delta keeps
/// (the caller checks it with [`check_same_model`] once the delta's name is settled).
pub fn precheck(path: &Path) -> Result<Manifest> {
    let (manifest_path, sig_path, _, _) = locate(path)?;
    let bytes = fsio::read_regular_capped(&manifest_path, manifest::MAX_MANIFEST_BYTES, false)
        .map_err(|e| Error::io(&manifest_path, e))?;
    let m = Manifest::parse(&bytes).map_err(|reason| Error::BadManifest {
        path: manifest_path.clone(),
        reason: reason.to_string(),
    })?;
    if !sig_path.is_file() {
        return Err(Error::MissingSignature { path: sig_path });
    }
    Ok(m)
}

/// A delta's base must be an earlier version of the same model.
pub fn check_same_model(bm: &Manifest, name: &str, version: u64) -> Result<()> {
    if bm.name != name {
        return Err(Error::Usage(format!(
            "--base is {:?} version {}, not a version of {name:?}; give the bundle the base's name with --name {:?}",
            bm.name, bm.version, bm.name
        )));
    }
    if bm.version >= version {
        return Err(Error::Usage(format!(
            "--base is version {} of {name:?}; a delta must have a higher --version (this one is {version})",
            bm.version
        )));
    }
    Ok(())
}

impl BaseSource {
    /// Reads the base named by `--base`. The signature must be present and well formed; it is
    /// verified when it is by `signer` (the key this delta is signed with, the usual case: one
    /// publisher signs every version). A base signed by another key is used with a note: the
    /// target verifies the base receipt against its own trust set before applying the delta,
    /// so the pack-side check only guards against building on the wrong file.
    pub fn open(path: &Path, signer: &PublicKey) -> Result<BaseSource> {
        let (manifest_path, sig_path, files_dir, kind) = locate(path)?;
        let mut notes = Vec::new();
        let mut verified = false;
        let (manifest, bytes) = match open::verify_signed(
            &manifest_path,
            &sig_path,
            std::slice::from_ref(signer),
        ) {
            Ok(signed) => {
                verified = true;
                (signed.manifest, signed.bytes)
            }
            Err(Error::UntrustedKey { key_id, .. }) => {
                let bytes =
                    fsio::read_regular_capped(&manifest_path, manifest::MAX_MANIFEST_BYTES, false)
                        .map_err(|e| Error::io(&manifest_path, e))?;
                let m = Manifest::parse(&bytes).map_err(|reason| Error::BadManifest {
                    path: manifest_path.clone(),
                    reason: reason.to_string(),
                })?;
                notes.push(format!(
                        "the base {} is signed by key {key_id}, not by the key signing this delta: its signature was not verified here (the target verifies the installed base against its trust set before applying the delta)",
                        manifest_path.display()
                    ));
                (m, bytes)
            }
            Err(e) => return Err(e),
        };
        let content = match files_dir {
            Some(dir) => {
                let root = fsio::open_dir_path(&dir, fsio::Follow::Final)
                    .map_err(|e| Error::io(&dir, e.into()))?;
                Content::Installed { dir, root }
            }
            None if kind == "bundle" && verified => Content::Bundle {
                dir: path.to_path_buf(),
                key: signer.clone(),
            },
            None => Content::None,
        };
        Ok(BaseSource {
            manifest_sha256: hex::encode(Sha256::digest(&bytes)),
            manifest,
            content,
            notes,
        })
    }

    /// For a pack from a Hugging Face cache: where the base has no contents of its own (a
    /// bundle signed by another key, a bare manifest), the snapshot of the base's commit in
    /// the same cache repository serves, when the cache holds it.
    ///
    /// For a base of several repositories (FORMAT.md section 14.4), each repository the pack
    /// carries too serves from its own snapshot of the base's commit, when the cache holds it.
    pub fn with_snapshot_of(mut self, model: &Model) -> BaseSource {
        if !matches!(self.content, Content::None) {
            return self;
        }
        let held = |hf: &super::source::HfOrigin, src: &manifest::HfSource| {
            src.repo_id == hf.repo_id
                && src.repo_type == hf.repo_type
                && hf
                    .snapshot
                    .repo_folder
                    .join("snapshots")
                    .join(&src.commit)
                    .is_dir()
        };
        let mut parts = Vec::new();
        if let (Some(hf), Some(src)) = (&model.hf, &self.manifest.source)
            && held(hf, src)
        {
            parts.push(Part {
                prefix: String::new(),
                repo: hf.snapshot.repo_folder.clone(),
                commit: src.commit.clone(),
            });
        }
        for r in &self.manifest.repos {
            if let Some(hf) = model.repos.iter().find(|hf| held(hf, &r.source)) {
                parts.push(Part {
                    prefix: format!("{}/", r.path),
                    repo: hf.snapshot.repo_folder.clone(),
                    commit: r.source.commit.clone(),
                });
            }
        }
        if !parts.is_empty() {
            self.content = Content::Snapshot(parts);
        }
        self
    }

    /// Whether the base files' contents can be read here (to make patches).
    pub(crate) fn has_content(&self) -> bool {
        !matches!(self.content, Content::None)
    }

    /// A note for a base whose contents cannot be read here.
    pub fn no_content_note(&self) -> Option<String> {
        (!self.has_content()).then(|| {
            "the base's file contents cannot be used here: files are taken from it only where unchanged (copy); changed files are carried whole. Give the base's installed directory (or its bundle, signed by this key) as --base to patch them".to_string()
        })
    }

    /// Whether the base file at `path` visibly differs from the new file `new` of `size`
    /// bytes, judged from three pieces of at most [`SAMPLE_PIECE`] bytes (start, middle, end)
    /// read from each: the planner then patches the file straight away, reading it once,
    /// instead of hashing it first to look for a copy and reading it again to patch it. `false`
    /// when the pieces match or the base file cannot be read here (the file is then hashed
    /// first, as any other). Opened by the rules above; what is read only steers the plan (a
    /// patch is still made only from a base file checked against the base manifest).
    pub fn sample_differs(&self, path: &str, size: u64, new: &File) -> bool {
        use std::os::unix::fs::FileExt;
        let base = match &self.content {
            Content::Installed { root, .. } => match fsio::open_file_below(root, path) {
                Ok((f, len)) if len == size => f,
                _ => return false,
            },
            Content::Snapshot(_) => {
                let Some((part, rel)) = self.content.snapshot_of(path) else {
                    return false;
                };
                match crate::hfcache::open_snapshot_file(&part.repo, &part.commit, rel) {
                    Ok(f) if f.metadata().is_ok_and(|m| m.len() == size) => f,
                    _ => return false,
                }
            }
            // A base bundle is read in one pass later; nothing to sample cheaply.
            Content::Bundle { .. } | Content::None => return false,
        };
        let piece = size.min(SAMPLE_PIECE);
        let (mut a, mut b) = (vec![0u8; piece as usize], vec![0u8; piece as usize]);
        [0, (size - piece) / 2, size - piece].iter().any(|&at| {
            let read = |f: &File, buf: &mut [u8]| f.read_exact_at(buf, at).is_ok();
            read(new, &mut a) && read(&base, &mut b) && a != b
        })
    }

    /// The contents of the base files `wanted` (by path), each opened by the rules above and
    /// checked against the base manifest. A file that cannot be used is left out, with a note
    /// saying why. `work` is a directory for files extracted from a base bundle.
    pub fn contents(
        &mut self,
        wanted: &[&str],
        work: &Path,
        progress: &dyn Progress,
    ) -> Result<HashMap<String, File>> {
        let by_path: HashMap<&str, &FileEntry> = self
            .manifest
            .files
            .iter()
            .map(|f| (f.path.as_str(), f))
            .collect();
        let mut out = HashMap::new();
        let mut notes = Vec::new();
        match &self.content {
            Content::None => {}
            Content::Installed { dir, root } => {
                for path in wanted {
                    let Some(b) = by_path.get(path) else { continue };
                    match fsio::open_file_below(root, path).map_err(fsio::Error::into_cause) {
                        Ok((f, len)) => match check(&f, len, b) {
                            Ok(()) => {
                                out.insert(path.to_string(), f);
                            }
                            Err(why) => notes.push(unused(&dir.join(path), &why.to_string())),
                        },
                        Err(e @ (Cause::Link | Cause::NotRegular(_))) => {
                            notes.push(unused(&dir.join(path), &e.to_string()))
                        }
                        Err(Cause::NotFound) => {
                            notes.push(unused(&dir.join(path), "it is missing"))
                        }
                        Err(e) => return Err(Error::io(dir.join(path), e.into())),
                    }
                }
            }
            Content::Snapshot(_) => {
                for path in wanted {
                    let Some(b) = by_path.get(path) else { continue };
                    let Some((Part { repo, commit, .. }, rel)) = self.content.snapshot_of(path)
                    else {
                        continue;
                    };
                    let full = repo.join("snapshots").join(commit).join(rel);
                    match crate::hfcache::open_snapshot_file(repo, commit, rel) {
                        Ok(f) => {
                            let len = f.metadata().map_err(|e| Error::io(&full, e))?.len();
                            match check(&f, len, b) {
                                Ok(()) => {
                                    out.insert(path.to_string(), f);
                                }
                                Err(why) => notes.push(unused(&full, &why.to_string())),
                            }
                        }
                        Err(e) => notes.push(unused(&full, &e.to_string())),
                    }
                }
            }
            Content::Bundle { dir, key } => {
                for (path, f) in extract(dir, key, wanted, work, progress)? {
                    out.insert(path, f);
                }
            }
        }
        self.notes.extend(notes);
        Ok(out)
    }
}

/// Whether the open base file `f` (of `len` bytes) is exactly the base manifest's `b`.
fn check(f: &File, len: u64, b: &FileEntry) -> std::result::Result<(), Unlike> {
    if len != b.size {
        return Err(Unlike::Size {
            len,
            recorded: b.size,
        });
    }
    let got = fsio::hash_exact(f, len).map_err(Unlike::Read)?;
    if got != b.sha256 {
        return Err(Unlike::Digest {
            got,
            recorded: b.sha256.clone(),
        });
    }
    Ok(())
}

/// Why a base file is not the one the base's receipt records ([`check`]): the delta then
/// carries the new version of it whole. `Display` is the reason in the note.
#[derive(Debug, thiserror::Error)]
enum Unlike {
    /// Another size.
    #[error("it has {len} bytes, its receipt says {recorded}")]
    Size { len: u64, recorded: u64 },
    /// Reading it failed.
    #[error("it cannot be read ({0})")]
    Read(std::io::Error),
    /// Other bytes.
    #[error("its sha256 is {got}, its receipt says {recorded}")]
    Digest { got: String, recorded: String },
}

fn unused(path: &Path, why: &str) -> String {
    format!(
        "the base file {} was not used ({why}): the new version of it travels whole",
        path.display()
    )
}

/// Extracts the base content of the `wanted` files from the base bundle's stream into
/// `work/delta-base/`, every byte checked on the way against the base's signed manifest (the
/// strict stream fails on any digest mismatch). A file the base bundle does not carry (the
/// base is itself a delta) is not extracted, and its new version is then carried whole.
fn extract(
    bundle: &Path,
    key: &PublicKey,
    wanted: &[&str],
    work: &Path,
    progress: &dyn Progress,
) -> Result<Vec<(String, File)>> {
    let dir = work.join("delta-base");
    let work_fd =
        fsio::open_dir_path(work, fsio::Follow::Never).map_err(|e| Error::io(work, e.into()))?;
    let dir_fd = crate::durable::mkdir_at(&work_fd, work, "delta-base", 0o700)?;
    let wanted: HashMap<String, usize> = wanted
        .iter()
        .enumerate()
        .map(|(i, p)| (p.to_string(), i))
        .collect();
    let opened = open::open(bundle, std::slice::from_ref(key))?;
    let mut sink = Extract {
        wanted: &wanted,
        dir: &dir,
        dir_fd: &dir_fd,
        current: None,
        done: Vec::new(),
    };
    crate::bundle::stream::stream(&opened, Mode::Strict, &mut sink, progress)?;
    Ok(sink.done)
}

struct Extract<'a> {
    wanted: &'a HashMap<String, usize>,
    dir: &'a Path,
    dir_fd: &'a OwnedFd,
    current: Option<(String, BufWriter<File>, String)>,
    done: Vec<(String, File)>,
}

impl EntrySink for Extract<'_> {
    fn dir(&mut self, _: &str) -> Result<()> {
        Ok(())
    }
    fn begin_file(&mut self, file: &FileEntry) -> Result<()> {
        self.current = match self.wanted.get(&file.path) {
            Some(i) => {
                let name = i.to_string();
                let f = fsio::create_at(self.dir_fd, &name, 0o600, true)
                    .map_err(|e| Error::io(self.dir.join(&name), e.into()))?;
                Some((
                    file.path.clone(),
                    BufWriter::with_capacity(1 << 20, f),
                    name,
                ))
            }
            None => None,
        };
        Ok(())
    }
    fn data(&mut self, bytes: &[u8]) -> Result<()> {
        if let Some((_, w, name)) = &mut self.current {
            w.write_all(bytes)
                .map_err(|e| Error::io(self.dir.join(&*name), e))?;
        }
        Ok(())
    }
    fn end_file(&mut self, _: &FileEntry) -> Result<()> {
        if let Some((path, w, name)) = self.current.take() {
            let f = w
                .into_inner()
                .map_err(|e| Error::io(self.dir.join(&name), e.into_error()))?;
            self.done.push((path, f));
        }
        Ok(())
    }
}
