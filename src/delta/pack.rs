//! `pack --base`: deciding how each file of the new version reaches the target (docs/FORMAT.md
//! section 16), and the patches that travel in the stream.
//!
//! Per file, in this order: *copy* when some base file has the same size and SHA-256 (the base
//! file at the same path first); *xor* when the base has a file at the same path whose content
//! is on this host and the patch is smaller than the file (map `safetensors` when both are
//! safetensors files that line up, else `bytes`); *carried* otherwise. Patches are encoded
//! front to back into files in the bundle's work directory (their size must be known before
//! their tar header is written), then streamed like any file and removed before the bundle is
//! renamed into place. Memory stays flat whatever the model size.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::patch::{self, Map};
use crate::bundle::open as read;
use crate::error::{Error, Result};
use crate::fsio;
use crate::keys::PublicKey;
use crate::manifest::{self, Base, FileEntry, From, Manifest};
use crate::progress::Progress;
use crate::receipt;
use crate::scan::ScanEntry;

/// The version a delta is made against, as the staging host has it.
#[derive(Debug, Clone)]
pub struct BaseSource {
    /// The base manifest.
    pub manifest: Manifest,
    /// SHA-256 of its exact bytes.
    pub manifest_sha256: String,
    /// Where the base files' contents are (an installed directory), if anywhere.
    pub files_dir: Option<PathBuf>,
    /// The base's bundle directory and the key its signature verified with (the pack's): the
    /// files the delta patches are then extracted from its verified stream.
    pub bundle: Option<(PathBuf, PublicKey)>,
    /// What the operator should know (an unverified signature, no contents to patch from).
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
/// parses, its signature file exists, and it is an earlier version of the same model.
pub fn precheck(path: &Path, name: &str, version: u64) -> Result<()> {
    let (manifest_path, sig_path, _, _) = locate(path)?;
    let bytes = fsio::read_regular_capped(&manifest_path, manifest::MAX_MANIFEST_BYTES, false)
        .map_err(|e| Error::io(&manifest_path, e))?;
    let m = Manifest::parse(&bytes).map_err(|reason| Error::BadManifest {
        path: manifest_path.clone(),
        reason,
    })?;
    if !sig_path.is_file() {
        return Err(Error::MissingSignature { path: sig_path });
    }
    check_same_model(&m, name, version)
}

fn check_same_model(bm: &Manifest, name: &str, version: u64) -> Result<()> {
    if bm.name != name {
        return Err(Error::Usage(format!(
            "--base is {:?} version {}, not a version of {name:?}",
            bm.name, bm.version
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

/// Reads the base named by `--base`: an installed directory (its receipt), a bundle directory,
/// or a `manifest.json` with its `.minisig` beside it. The signature must be present and well
/// formed; it is verified when it is by `signer` (the key this delta is signed with, the usual
/// case: one publisher signs every version). A base signed by another key is used with a note:
/// the target verifies the base receipt against its own trust set before applying the delta,
/// so the pack-side check only guards against building on the wrong file.
pub fn open_base(path: &Path, signer: &PublicKey) -> Result<BaseSource> {
    let (manifest_path, sig_path, files_dir, kind) = locate(path)?;
    let mut notes = Vec::new();
    let mut verified = false;
    let (manifest, bytes) = match read::verify_signed(
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
                reason,
            })?;
            notes.push(format!(
                    "the base {} is signed by key {key_id}, not by the key signing this delta: its signature was not verified here (the target verifies the installed base against its trust set before applying the delta)",
                    manifest_path.display()
                ));
            (m, bytes)
        }
        Err(e) => return Err(e),
    };
    let bundle = (kind == "bundle" && verified).then(|| (path.to_path_buf(), signer.clone()));
    if files_dir.is_none() && bundle.is_none() {
        notes.push(format!(
            "the base is a {kind} whose file contents cannot be used here: files are taken from it only where unchanged (copy); changed files are carried whole. Give the base's installed directory (or its bundle, signed by this key) as --base to patch them"
        ));
    }
    Ok(BaseSource {
        manifest_sha256: hex::encode(Sha256::digest(&bytes)),
        manifest,
        files_dir,
        bundle,
        notes,
    })
}

/// How one file of the new version travels.
#[derive(Debug)]
enum Decision {
    Carry,
    Copy { sha256: String, from: String },
    Xor { sha256: String, from: From },
}

/// What [`plan`] decided: the entries to stream and how to complete the manifest after.
pub struct Plan {
    /// The stream's entries: directories, carried files, `.airlock-delta` and the patches.
    pub stream: Vec<ScanEntry>,
    /// The `base` object.
    pub base: Base,
    decisions: Vec<Decision>,
    /// Where the patches were written; removed by [`Plan::finish`].
    patch_dir: PathBuf,
    /// Bytes carried, copied and patched (new file bytes), for the report.
    pub counts: Counts,
}

/// What a delta holds, in new-file bytes.
#[derive(Debug, Default, Clone, Copy, serde::Serialize)]
pub struct Counts {
    /// Files and bytes carried whole in the stream.
    pub carried_files: u64,
    /// Bytes of the carried files.
    pub carried_bytes: u64,
    /// Files taken unchanged from the base.
    pub copied_files: u64,
    /// Bytes of the copied files.
    pub copied_bytes: u64,
    /// Files rebuilt from a base file and a patch.
    pub patched_files: u64,
    /// Bytes of the patched files.
    pub patched_bytes: u64,
    /// Bytes of their patches.
    pub patch_bytes: u64,
}

impl Counts {
    /// The counts of a delta manifest.
    pub fn of(m: &Manifest) -> Counts {
        let mut c = Counts::default();
        for f in &m.files {
            match (&f.from, f.patch()) {
                (None, _) => {
                    c.carried_files += 1;
                    c.carried_bytes += f.size;
                }
                (Some(_), None) => {
                    c.copied_files += 1;
                    c.copied_bytes += f.size;
                }
                (Some(_), Some((size, _))) => {
                    c.patched_files += 1;
                    c.patched_bytes += f.size;
                    c.patch_bytes += size;
                }
            }
        }
        c
    }
}

fn hash_path(path: &Path) -> Result<String> {
    let (f, _) =
        fsio::open_regular(path, fsio::Follow::Final).map_err(|e| Error::io(path, e.into()))?;
    Ok(fsio::hash_file(&f, &|_| {})
        .map_err(|e| Error::io(path, e))?
        .0)
}

/// Counts and hashes what passes through.
struct HashingWriter<W> {
    inner: W,
    hash: Sha256,
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hash.update(&buf[..n]);
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Decides every file of `entries` against `base`, writing patches under `work` (a fresh
/// directory in the bundle's work directory), at zstd `level`.
pub fn plan(
    entries: &[ScanEntry],
    name: &str,
    version: u64,
    base: &BaseSource,
    work: &Path,
    level: i32,
    progress: &dyn Progress,
) -> Result<Plan> {
    let bm = &base.manifest;
    check_same_model(bm, name, version)?;
    let patch_dir = work.join("delta-patches");
    std::fs::create_dir(&patch_dir).map_err(|e| Error::io(&patch_dir, e))?;
    let by_path: HashMap<&str, &FileEntry> =
        bm.files.iter().map(|f| (f.path.as_str(), f)).collect();
    let mut by_content: HashMap<(u64, &str), Vec<&FileEntry>> = HashMap::new();
    for f in &bm.files {
        by_content
            .entry((f.size, f.sha256.as_str()))
            .or_default()
            .push(f);
    }
    let sizes: std::collections::HashSet<u64> = bm.files.iter().map(|f| f.size).collect();
    let total: u64 = entries
        .iter()
        .map(|e| match e {
            ScanEntry::File { size, .. } => *size,
            ScanEntry::Dir { .. } => 0,
        })
        .sum();
    progress.start("delta", total);
    // Pass 1: copies, and the files a patch may be made for (the base has the same path).
    let mut decisions = Vec::new();
    let mut candidates: Vec<(usize, &ScanEntry)> = Vec::new();
    let mut counts = Counts::default();
    for e in entries {
        let ScanEntry::File {
            path, source, size, ..
        } = e
        else {
            continue;
        };
        progress.item(path);
        if sizes.contains(size) {
            let sha256 = hash_path(source)?;
            if let Some(same) = by_content.get(&(*size, sha256.as_str())) {
                let from = same.iter().find(|b| b.path == *path).unwrap_or(&same[0]);
                decisions.push(Decision::Copy {
                    sha256: sha256.clone(),
                    from: from.path.clone(),
                });
                counts.copied_files += 1;
                counts.copied_bytes += size;
                progress.advance(*size);
                continue;
            }
        }
        if by_path.contains_key(path.as_str()) {
            candidates.push((decisions.len(), e));
        }
        decisions.push(Decision::Carry);
    }
    // Where each candidate's base content is on this host.
    let base_content: HashMap<String, PathBuf> = match (&base.files_dir, &base.bundle) {
        (Some(dir), _) => candidates
            .iter()
            .map(|(_, e)| (e.path().to_string(), dir.join(e.path())))
            .collect(),
        (None, Some((bundle, key))) => extract(bundle, key, &candidates, work, progress)?,
        (None, None) => HashMap::new(),
    };
    // Pass 2: a patch for each candidate, kept when it is smaller than the file.
    let mut patches = Vec::new();
    for (index, e) in candidates {
        let ScanEntry::File {
            path, source, size, ..
        } = e
        else {
            continue;
        };
        let Some(base_path) = base_content.get(path.as_str()) else {
            continue;
        };
        progress.item(path);
        let (new, _) = fsio::open_regular(source, fsio::Follow::Final)
            .map_err(|e| Error::io(source, e.into()))?;
        let (old, _) = fsio::open_regular(base_path, fsio::Follow::Final)
            .map_err(|e| Error::io(base_path, e.into()))?;
        let map = if patch::safetensors_pair(&new, &old) {
            Map::Safetensors
        } else {
            Map::Bytes
        };
        let out_path = patch_dir.join(index.to_string());
        let out = fsio::create_new(&out_path, 0o600).map_err(|e| Error::io(&out_path, e))?;
        let writer = HashingWriter {
            inner: BufWriter::with_capacity(1 << 20, out),
            hash: Sha256::new(),
        };
        let (writer, enc) = patch::encode(&new, &old, map, level, writer).map_err(|e| {
            Error::io(
                source,
                io::Error::other(format!(
                    "cannot make the patch against {}: {e}",
                    base_path.display()
                )),
            )
        })?;
        let patch_sha256 = hex::encode(writer.hash.finalize());
        let file = writer
            .inner
            .into_inner()
            .map_err(|e| Error::io(&out_path, e.into_error()))?;
        drop(file);
        let len = new.metadata().map_err(|e| Error::io(source, e))?.len();
        if len != *size {
            return Err(Error::SourceChanged {
                path: source.clone(),
                what: format!("size went from {size} to {len} bytes since the scan"),
            });
        }
        progress.advance(*size);
        if enc.patch_size >= *size {
            std::fs::remove_file(&out_path).map_err(|e| Error::io(&out_path, e))?;
            continue;
        }
        decisions[index] = Decision::Xor {
            sha256: enc.new_sha256,
            from: From {
                path: path.clone(),
                op: manifest::OP_XOR.into(),
                map: Some(
                    match map {
                        Map::Bytes => "bytes",
                        Map::Safetensors => "safetensors",
                    }
                    .into(),
                ),
                patch_size: Some(enc.patch_size),
                patch_sha256: Some(patch_sha256),
            },
        };
        counts.patched_files += 1;
        counts.patched_bytes += size;
        counts.patch_bytes += enc.patch_size;
        patches.push(ScanEntry::File {
            path: manifest::patch_path(index),
            source: out_path,
            size: enc.patch_size,
            executable: false,
        });
    }
    if base.files_dir.is_none() {
        let extracted = work.join("delta-base");
        if extracted.exists() {
            std::fs::remove_dir_all(&extracted).map_err(|e| Error::io(&extracted, e))?;
        }
    }
    // The stream: directories and carried files in bundle order, then the patches (sorted
    // into place below).
    let mut stream = Vec::new();
    let mut index = 0;
    for e in entries {
        match e {
            ScanEntry::Dir { .. } => stream.push(e.clone()),
            ScanEntry::File { size, .. } => {
                if matches!(decisions[index], Decision::Carry) {
                    counts.carried_files += 1;
                    counts.carried_bytes += size;
                    stream.push(e.clone());
                }
                index += 1;
            }
        }
    }
    progress.finish();
    if !patches.is_empty() {
        stream.push(ScanEntry::Dir {
            path: manifest::DELTA_DIR.into(),
        });
        stream.extend(patches);
    }
    stream.sort_by(|a, b| crate::paths::bundle_order(a.path(), b.path()));
    Ok(Plan {
        stream,
        base: Base {
            name: bm.name.clone(),
            version: bm.version,
            manifest_sha256: base.manifest_sha256.clone(),
        },
        decisions,
        patch_dir,
        counts,
    })
}

impl Plan {
    /// The manifest's `files` from what was streamed (`streamed`: the carried files and the
    /// patches, in stream order, with the digests read while streaming) and the model's
    /// `entries`; removes the patch files.
    pub fn finish(
        &self,
        entries: &[ScanEntry],
        streamed: Vec<FileEntry>,
    ) -> Result<Vec<FileEntry>> {
        let mut by_path: HashMap<String, FileEntry> =
            streamed.into_iter().map(|f| (f.path.clone(), f)).collect();
        let mut files = Vec::with_capacity(self.decisions.len());
        let model_files = entries.iter().filter_map(|e| match e {
            ScanEntry::File {
                path,
                size,
                executable,
                ..
            } => Some((path, *size, *executable)),
            ScanEntry::Dir { .. } => None,
        });
        for (index, ((path, size, executable), d)) in model_files.zip(&self.decisions).enumerate() {
            let (sha256, from) = match d {
                Decision::Carry => {
                    let f = by_path
                        .remove(path.as_str())
                        .ok_or_else(|| internal(path))?;
                    (f.sha256, None)
                }
                Decision::Copy { sha256, from } => (
                    sha256.clone(),
                    Some(From {
                        path: from.clone(),
                        op: manifest::OP_COPY.into(),
                        map: None,
                        patch_size: None,
                        patch_sha256: None,
                    }),
                ),
                Decision::Xor { sha256, from } => {
                    let p = manifest::patch_path(index);
                    let f = by_path.remove(&p).ok_or_else(|| internal(&p))?;
                    if Some(&f.sha256) != from.patch_sha256.as_ref() {
                        return Err(Error::SourceChanged {
                            path: self.patch_dir.join(index.to_string()),
                            what: "the patch changed between its encoding and the stream".into(),
                        });
                    }
                    (sha256.clone(), Some(from.clone()))
                }
            };
            files.push(FileEntry {
                path: path.clone(),
                size,
                sha256,
                executable,
                from,
            });
        }
        std::fs::remove_dir_all(&self.patch_dir).map_err(|e| Error::io(&self.patch_dir, e))?;
        Ok(files)
    }
}

/// Extracts the base content of `candidates` from the base bundle's stream into
/// `work/delta-base/<index>`, every byte checked on the way against the base's signed manifest
/// (the strict stream reader fails on any digest mismatch). A file the base bundle does not
/// carry (the base is itself a delta) is not extracted, and is then carried whole.
fn extract(
    bundle: &Path,
    key: &PublicKey,
    candidates: &[(usize, &ScanEntry)],
    work: &Path,
    progress: &dyn Progress,
) -> Result<HashMap<String, PathBuf>> {
    let dir = work.join("delta-base");
    std::fs::create_dir(&dir).map_err(|e| Error::io(&dir, e))?;
    let wanted: HashMap<String, PathBuf> = candidates
        .iter()
        .map(|(i, e)| (e.path().to_string(), dir.join(i.to_string())))
        .collect();
    let opened = read::open(bundle, std::slice::from_ref(key))?;
    let mut sink = Extract {
        wanted: &wanted,
        current: None,
        done: HashMap::new(),
    };
    crate::bundle::stream::stream(&opened, crate::entries::Mode::Strict, &mut sink, progress)?;
    Ok(sink.done)
}

struct Extract<'a> {
    wanted: &'a HashMap<String, PathBuf>,
    current: Option<(String, BufWriter<File>)>,
    done: HashMap<String, PathBuf>,
}

impl crate::entries::EntrySink for Extract<'_> {
    fn dir(&mut self, _: &str) -> Result<()> {
        Ok(())
    }
    fn begin_file(&mut self, file: &FileEntry) -> Result<()> {
        self.current = match self.wanted.get(&file.path) {
            Some(to) => {
                let f = fsio::create_new(to, 0o600).map_err(|e| Error::io(to, e))?;
                Some((file.path.clone(), BufWriter::with_capacity(1 << 20, f)))
            }
            None => None,
        };
        Ok(())
    }
    fn data(&mut self, bytes: &[u8]) -> Result<()> {
        if let Some((path, w)) = &mut self.current {
            w.write_all(bytes)
                .map_err(|e| Error::io(&self.wanted[path.as_str()], e))?;
        }
        Ok(())
    }
    fn end_file(&mut self, _: &FileEntry) -> Result<()> {
        if let Some((path, w)) = self.current.take() {
            let to = &self.wanted[path.as_str()];
            w.into_inner().map_err(|e| Error::io(to, e.into_error()))?;
            self.done.insert(path, to.clone());
        }
        Ok(())
    }
}

fn internal(path: &str) -> Error {
    Error::Usage(format!(
        "internal error: the delta plan and the stream disagree about {path:?}"
    ))
}
