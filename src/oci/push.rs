//! `airlock push`: verify a bundle in full, then publish it as a ModelPack artifact.
//!
//! Nothing is uploaded before the whole bundle has verified (signature, every volume, every
//! file: [`crate::verify`] at [`Depth::Deep`]). Then every layer the registry lacks (a `HEAD`
//! per blob) is uploaded straight out of the bundle's stream: one pass through volumes → zstd
//! → tar, each missing file's bytes piped into a streamed `PUT` on a thread of its own
//! (bounded channel, so memory stays at a few megabytes whatever the file size). The registry
//! checks each blob against the digest the signed manifest gives before keeping it. The image
//! manifest goes last, so a tag never names an incomplete artifact.
//!
//! A delta bundle is pushed over its base, already in the repository: its copied files are the
//! base's blobs, and each patched file is rebuilt from the base's blob and its patch as the
//! stream passes, then uploaded whole (`oci::delta`), so the tag names the complete version.

use std::collections::HashSet;
use std::io::Read;
use std::thread::{Scope, ScopedJoinHandle};

use crossbeam_channel::{Receiver, Sender, bounded};

use sha2::{Digest, Sha256};

use super::client::Registry;
use super::delta;
use super::modelpack::{self, Layer};
use crate::bundle::open::Opened;
use crate::bundle::stream::{self, EntrySink, Mode};
use crate::delta::patch::{PatchError, PushDecoder};
use crate::error::{Error, Result};
use crate::manifest::{self, FileEntry, Manifest};
use crate::progress::Progress;
use crate::verify::{self, Depth};

/// Largest root `config.json` read for the artifact's config (precision, quantization).
const MAX_CONFIG_JSON: u64 = 1 << 20;

/// What a push did.
#[derive(Debug, serde::Serialize)]
pub struct Pushed {
    /// The `oci://` reference written.
    pub reference: String,
    /// `sha256:HEX` of the image manifest.
    pub manifest_digest: String,
    /// Layers in the artifact (files, then the airlock manifest and signature).
    pub layers: usize,
    /// Files uploaded (the registry lacked their blobs).
    pub uploaded_files: Vec<String>,
    /// Bytes uploaded, all blobs counted.
    pub uploaded_bytes: u64,
    /// Blobs the registry already held.
    pub skipped_blobs: usize,
}

/// A `Read` over buffers arriving on a channel; ends when the sender is dropped. A `None`
/// aborts: the read fails, so the upload is never completed.
struct ChannelReader {
    rx: Receiver<Option<Vec<u8>>>,
    buf: Vec<u8>,
    pos: usize,
}

impl Read for ChannelReader {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        while self.pos == self.buf.len() {
            match self.rx.recv() {
                Ok(Some(b)) => {
                    self.buf = b;
                    self.pos = 0;
                }
                Ok(None) => return Err(std::io::Error::other("the upload was aborted")),
                Err(_) => return Ok(0),
            }
        }
        let n = out.len().min(self.buf.len() - self.pos);
        out[..n].copy_from_slice(&self.buf[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

struct Upload<'scope> {
    tx: Sender<Option<Vec<u8>>>,
    handle: ScopedJoinHandle<'scope, Result<()>>,
    path: String,
}

/// A patched file being rebuilt (delta push): the decoder, the hash of the bytes rebuilt so
/// far, and the last piece, held back until the whole file has checked out.
struct Rebuilding {
    index: usize,
    dec: Box<PushDecoder>,
    hash: Sha256,
    pending: Option<Vec<u8>>,
}

/// Uploads the files the registry lacks as the bundle's stream passes, and keeps the root
/// `config.json`. In a delta's stream, each patch entry rebuilds its file's blob (if missing)
/// against the base blob the [`delta::Plan`] names.
struct UploadSink<'scope, 'env> {
    scope: &'scope Scope<'scope, 'env>,
    registry: &'env Registry,
    manifest: &'env Manifest,
    plan: Option<&'env delta::Plan>,
    missing: HashSet<String>,
    current: Option<Upload<'scope>>,
    rebuilding: Option<Rebuilding>,
    config_json: Option<Vec<u8>>,
    capturing: bool,
    uploaded: Vec<String>,
    uploaded_bytes: u64,
}

impl<'scope, 'env> UploadSink<'scope, 'env> {
    fn finish_upload(&mut self) -> Result<()> {
        if let Some(up) = self.current.take() {
            drop(up.tx);
            match up.handle.join() {
                Ok(r) => r?,
                Err(_) => {
                    return Err(Error::Registry {
                        registry: self.registry.reference.registry.clone(),
                        reason: format!("the upload of {} failed", up.path),
                    });
                }
            }
        }
        Ok(())
    }

    /// Aborts the upload in progress (its `PUT` fails, so the registry keeps nothing).
    fn abort_upload(&mut self) {
        if let Some(up) = self.current.take() {
            let _ = up.tx.send(None);
            drop(up.tx);
            let _ = up.handle.join();
        }
    }

    /// Starts a streamed upload of blob `digest` (`size` bytes) for file `path`.
    fn start_upload(&mut self, digest: String, size: u64, path: &str) {
        let (tx, rx) = bounded::<Option<Vec<u8>>>(8);
        let registry: &'env Registry = self.registry;
        let handle = self.scope.spawn(move || {
            let reader = ChannelReader {
                rx,
                buf: Vec::new(),
                pos: 0,
            };
            registry.put_blob_stream(&digest, size, reader)
        });
        self.current = Some(Upload {
            tx,
            handle,
            path: path.to_string(),
        });
        self.uploaded.push(path.to_string());
        self.uploaded_bytes += size;
    }

    /// Sends a piece to the upload in progress.
    fn send(&mut self, bytes: Vec<u8>) -> Result<()> {
        if let Some(up) = &self.current
            && up.tx.send(Some(bytes)).is_err()
        {
            // The upload ended early: its error says why.
            self.finish_upload()?;
            return Err(Error::Registry {
                registry: self.registry.reference.registry.clone(),
                reason: "the upload stopped before the file's end".into(),
            });
        }
        Ok(())
    }

    /// A patch entry begins: rebuild its file if the registry lacks the file's blob.
    fn begin_patch(&mut self, index: usize) -> Result<()> {
        let m = self.manifest;
        let target = &m.files[index];
        let digest = format!("sha256:{}", target.sha256);
        if !self.missing.remove(&digest) {
            return Ok(());
        }
        let rebuild = self
            .plan
            .and_then(|p| p.rebuild.get(&index))
            .expect("the plan covers every missing patched file");
        let base = delta::fetch_base(self.registry, rebuild, &target.path)?;
        let dec = PushDecoder::new(base, rebuild.map, target.size)
            .map_err(|e| patch_error(m, index, e))?;
        self.start_upload(digest, target.size, &target.path);
        self.rebuilding = Some(Rebuilding {
            index,
            dec: Box::new(dec),
            hash: Sha256::new(),
            pending: None,
        });
        Ok(())
    }

    /// Feeds patch bytes (`None`: the patch ended) to the file being rebuilt; its rebuilt bytes
    /// go to the upload, one piece behind.
    fn patch_data(&mut self, bytes: Option<&[u8]>) -> Result<()> {
        let Some(Rebuilding {
            index,
            mut dec,
            mut hash,
            mut pending,
        }) = self.rebuilding.take()
        else {
            return Ok(());
        };
        // Each rebuilt piece goes to the upload as it is made (a patch of zeros decodes to far
        // more than it is, so nothing is collected), one piece behind.
        let tx = self.current.as_ref().map(|u| &u.tx);
        let mut stopped = false;
        let mut emit = |b: &[u8]| -> std::io::Result<()> {
            hash.update(b);
            if let Some(p) = pending.replace(b.to_vec())
                && let Some(tx) = tx
                && tx.send(Some(p)).is_err()
            {
                stopped = true;
                return Err(std::io::Error::other("the upload stopped"));
            }
            Ok(())
        };
        let (decoded, dec) = match bytes {
            Some(b) => (dec.write(b, &mut emit), Some(dec)),
            None => (dec.finish(&mut emit), None),
        };
        if stopped {
            // The upload ended early: its error says why.
            self.finish_upload()?;
            return Err(Error::Registry {
                registry: self.registry.reference.registry.clone(),
                reason: format!(
                    "the upload of {} stopped before the file's end",
                    self.manifest.files[index].path
                ),
            });
        }
        if let Err(e) = decoded {
            self.abort_upload();
            return Err(patch_error(self.manifest, index, e));
        }
        if let Some(dec) = dec {
            self.rebuilding = Some(Rebuilding {
                index,
                dec,
                hash,
                pending,
            });
            return Ok(());
        }
        // The patch ended: the rebuilt file must be the signed one before its last piece goes.
        let target = &self.manifest.files[index];
        let sha = hex::encode(hash.finalize());
        if sha != target.sha256 {
            self.abort_upload();
            return Err(Error::BadFile {
                path: target.path.clone(),
                reason: format!(
                    "its patch {} rebuilds content with sha256 {sha}, the manifest says {}",
                    manifest::patch_path(index),
                    target.sha256
                ),
            });
        }
        if let Some(p) = pending.take() {
            self.send(p)?;
        }
        self.finish_upload()
    }
}

/// The error for a patch that does not rebuild its file.
fn patch_error(m: &Manifest, index: usize, e: PatchError) -> Error {
    Error::BadFile {
        path: m.files[index].path.clone(),
        reason: format!(
            "its patch {} does not rebuild it: {e}",
            manifest::patch_path(index)
        ),
    }
}

/// The index of the file a patch entry (`.airlock-delta/<i>`) rebuilds.
fn patch_index(path: &str) -> Option<usize> {
    path.strip_prefix(manifest::DELTA_DIR)?
        .strip_prefix('/')?
        .parse()
        .ok()
}

impl EntrySink for UploadSink<'_, '_> {
    fn dir(&mut self, _path: &str) -> Result<()> {
        Ok(())
    }

    fn begin_file(&mut self, file: &FileEntry) -> Result<()> {
        if self.manifest.base.is_some()
            && let Some(index) = patch_index(&file.path)
        {
            return self.begin_patch(index);
        }
        self.capturing = file.path == "config.json" && file.size <= MAX_CONFIG_JSON;
        if self.capturing {
            self.config_json = Some(Vec::with_capacity(file.size as usize));
        }
        let digest = format!("sha256:{}", file.sha256);
        if self.missing.remove(&digest) {
            self.start_upload(digest, file.size, &file.path);
        }
        Ok(())
    }

    fn data(&mut self, bytes: &[u8]) -> Result<()> {
        if self.rebuilding.is_some() {
            return self.patch_data(Some(bytes));
        }
        if self.capturing
            && let Some(c) = &mut self.config_json
        {
            c.extend_from_slice(bytes);
        }
        if self.current.is_some() {
            self.send(bytes.to_vec())?;
        }
        Ok(())
    }

    fn end_file(&mut self, _file: &FileEntry) -> Result<()> {
        if self.rebuilding.is_some() {
            return self.patch_data(None);
        }
        self.capturing = false;
        self.finish_upload()
    }
}

/// The root `config.json` (if small enough) read back from the registry, used only when it
/// matches the signed digest.
fn config_from_registry(opened: &Opened, registry: &Registry) -> Result<Option<Vec<u8>>> {
    let Some(f) = opened
        .manifest
        .files
        .iter()
        .find(|f| f.path == "config.json" && f.size <= MAX_CONFIG_JSON)
    else {
        return Ok(None);
    };
    let digest = format!("sha256:{}", f.sha256);
    Ok(registry
        .blob_bytes(&digest, MAX_CONFIG_JSON)?
        .filter(|b| modelpack::digest_of(b) == digest))
}

/// Verifies `opened` in full, then publishes it to `registry` under its reference.
pub fn push(opened: &Opened, registry: &Registry, progress: &dyn Progress) -> Result<Pushed> {
    let verdict = verify::verify(opened, Depth::Deep, progress);
    if let Some(e) = verdict.into_error() {
        return Err(e);
    }
    let m = &opened.manifest;
    // The signed manifest, its signature, co-signatures and carried trust roots (FORMAT.md
    // section 18) follow the files.
    let small = modelpack::signed_blobs(
        &opened.manifest_bytes,
        &opened.signature_text,
        &opened.trust.cosignatures,
        &opened.trust.roots,
    );
    let mut layers: Vec<Layer> = m.files.iter().map(Layer::of_file).collect();
    layers.extend(small.iter().map(|(l, _)| l.clone()));

    let mut missing = HashSet::new();
    let mut skipped = 0;
    for l in &layers {
        if missing.contains(&l.digest) {
            continue;
        }
        match registry.blob_size(&l.digest)? {
            Some(size) if size == l.size => skipped += 1,
            _ => {
                missing.insert(l.digest.clone());
            }
        }
    }

    // A delta: everything taken from the base must be in the repository, checked before
    // anything is uploaded.
    let plan = match &m.base {
        Some(_) => Some(delta::plan(m, registry, &missing)?),
        None => None,
    };

    // One pass through the verified stream: uploads what is missing, keeps config.json.
    // (A delta's copied files are not in the stream: the plan found them in the repository.)
    let mut file_missing: HashSet<String> = m
        .files
        .iter()
        .filter(|f| f.from.as_ref().is_none_or(|from| from.op != "copy"))
        .map(|f| format!("sha256:{}", f.sha256))
        .filter(|d| missing.contains(d))
        .collect();
    let (config_json, mut uploaded, mut uploaded_bytes) = if file_missing.is_empty() {
        // Every file is there already: no second pass over the bundle; the root config.json
        // comes from the registry, held to its signed digest.
        (config_from_registry(opened, registry)?, Vec::new(), 0)
    } else {
        std::thread::scope(|scope| {
            let mut sink = UploadSink {
                scope,
                registry,
                manifest: m,
                plan: plan.as_ref(),
                missing: std::mem::take(&mut file_missing),
                current: None,
                rebuilding: None,
                config_json: None,
                capturing: false,
                uploaded: Vec::new(),
                uploaded_bytes: 0,
            };
            let streamed = stream::stream(opened, Mode::Strict, &mut sink, progress);
            if streamed.is_err() {
                sink.abort_upload();
            }
            let finished = sink.finish_upload();
            streamed?;
            finished?;
            Ok::<_, Error>((sink.config_json, sink.uploaded, sink.uploaded_bytes))
        })?
    };

    // A delta may copy or patch config.json instead of carrying it: read it back.
    let config_json = match config_json {
        None if m.base.is_some() => config_from_registry(opened, registry)?,
        c => c,
    };
    let precision = config_json
        .as_deref()
        .map(modelpack::precision_of)
        .unwrap_or((None, None));
    let config = modelpack::config(m, &layers, precision);
    let config_digest = modelpack::digest_of(&config);
    for (layer, bytes) in &small {
        if missing.remove(&layer.digest) {
            registry.put_blob_bytes(&layer.digest, bytes)?;
            uploaded.push(layer.path.clone());
            uploaded_bytes += bytes.len() as u64;
        }
    }
    if registry.blob_size(&config_digest)?.is_none() {
        registry.put_blob_bytes(&config_digest, &config)?;
        uploaded_bytes += config.len() as u64;
    } else {
        skipped += 1;
    }
    let image = modelpack::image_manifest(m, &config, &layers, &opened.manifest_sha256);
    registry.put_manifest(&image)?;
    Ok(Pushed {
        reference: registry.reference.to_string(),
        manifest_digest: modelpack::digest_of(&image),
        layers: layers.len(),
        uploaded_files: uploaded,
        uploaded_bytes,
        skipped_blobs: skipped,
    })
}
