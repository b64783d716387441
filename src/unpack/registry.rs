//! `airlock push`: a registry as a pipeline target ([`crate::pipeline`]), publishing a verified
//! bundle as a ModelPack artifact ([`crate::oci::modelpack`]).
//!
//! Every layer the registry lacks (a `HEAD` per blob, at [`Target::begin`]) is uploaded
//! straight out of the pipeline's verified entries: each missing file's bytes are piped into a
//! streamed `PUT` on a thread of its own (bounded channel, so memory stays at a few megabytes
//! whatever the file size), and the last piece of each file is held back until the verifier
//! has matched the whole file against its signed size and SHA-256, so an upload of bytes that
//! fail is never completed (and the registry checks each blob's digest too). The image manifest
//! goes last, at [`Target::commit`], so a tag never names an incomplete artifact.
//!
//! Before the first upload the bundle's volumes are checked against their signed chunk
//! digests (a parallel pass, no decompression): a damaged bundle uploads nothing. A bundle whose
//! every blob the registry already holds is read once, by the verified stream alone.
//!
//! A delta bundle is pushed over its base, already in the repository ([`super::registry_base`]): the
//! pipeline's delta stage rebuilds each patched file from the base's blob, and copied files are
//! the base's blobs already there, so the tag names the complete version.

use std::collections::HashSet;
use std::io::Read;
use std::thread::{Scope, ScopedJoinHandle};

use crossbeam_channel::{Receiver, Sender, bounded};

use super::registry_base::RegistryBase;
use crate::bundle::open::{BundleDir, Opened};
use crate::entries::EntrySink;
use crate::error::{Error, Result};
use crate::manifest::FileEntry;
use crate::oci::client::Registry;
use crate::oci::modelpack::{self, Artifact, ConfigCapture};
use crate::pipeline::{self, Fed, Target};
use crate::progress::Progress;
use crate::source::disk::BundleOnDisk;
use crate::verify::{self, Depth};

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

/// Uploads the files the registry lacks as the verified entries pass, and keeps the root
/// `config.json`.
struct UploadSink<'scope, 'env> {
    scope: &'scope Scope<'scope, 'env>,
    registry: &'env Registry,
    missing: HashSet<String>,
    current: Option<Upload<'scope>>,
    /// The last piece of the file being uploaded, held back until the file has verified.
    pending: Option<Vec<u8>>,
    config_json: ConfigCapture,
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
                    return Err(self
                        .registry
                        .failed(format!("the upload of {} failed", up.path)));
                }
            }
        }
        Ok(())
    }

    /// Aborts the upload in progress (its `PUT` fails, so the registry keeps nothing).
    fn abort_upload(&mut self) {
        self.pending = None;
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
            return Err(self
                .registry
                .failed("the upload stopped before the file's end"));
        }
        Ok(())
    }
}

impl Drop for UploadSink<'_, '_> {
    fn drop(&mut self) {
        // A file that began but never verified: its upload is never completed.
        self.abort_upload();
    }
}

impl EntrySink for UploadSink<'_, '_> {
    fn dir(&mut self, _path: &str) -> Result<()> {
        Ok(())
    }

    fn begin_file(&mut self, file: &FileEntry) -> Result<()> {
        self.config_json.begin(file);
        let digest = format!("sha256:{}", file.sha256);
        if self.missing.remove(&digest) {
            self.start_upload(digest, file.size, &file.path);
        }
        Ok(())
    }

    fn data(&mut self, bytes: &[u8]) -> Result<()> {
        self.config_json.data(bytes);
        if self.current.is_some()
            && let Some(p) = self.pending.replace(bytes.to_vec())
        {
            self.send(p)?;
        }
        Ok(())
    }

    fn end_file(&mut self, _file: &FileEntry) -> Result<()> {
        // The file verified: its last piece may go, and the upload complete.
        self.config_json.end();
        if let Some(p) = self.pending.take() {
            self.send(p)?;
        }
        self.finish_upload()
    }

    fn holds(&mut self, file: &FileEntry) -> Result<bool> {
        Ok(!self.missing.contains(&format!("sha256:{}", file.sha256)))
    }
}

/// The root `config.json` (if small enough) read back from the registry, used only when it
/// matches the signed digest.
fn config_from_registry(opened: &Opened, registry: &Registry) -> Result<Option<Vec<u8>>> {
    let Some(f) = modelpack::config_json_entry(&opened.manifest) else {
        return Ok(None);
    };
    let digest = format!("sha256:{}", f.sha256);
    Ok(registry
        .blob_bytes(&digest, f.size)?
        .filter(|b| modelpack::digest_of(b) == digest))
}

/// Publishes into a registry (module documentation).
pub(crate) struct RegistryTarget<'scope, 'env> {
    scope: &'scope Scope<'scope, 'env>,
    registry: &'env Registry,
    /// Run before the first upload, when there is something to upload (the volume check).
    precheck: &'env dyn Fn() -> Result<()>,
    /// The blobs the registry lacks (`sha256:HEX`), found once, and how many it holds.
    missing: Option<(HashSet<String>, usize)>,
    begun: Option<Begun<'scope, 'env>>,
}

struct Begun<'scope, 'env> {
    sink: UploadSink<'scope, 'env>,
    /// Blobs the registry lacked at `begin`.
    missing: HashSet<String>,
    skipped: usize,
}

impl<'scope, 'env> RegistryTarget<'scope, 'env> {
    /// A target publishing into `registry` (under its reference's tag), its upload threads in
    /// `scope`; `precheck` runs once before anything is uploaded.
    pub fn new(
        scope: &'scope Scope<'scope, 'env>,
        registry: &'env Registry,
        precheck: &'env dyn Fn() -> Result<()>,
    ) -> Self {
        RegistryTarget {
            scope,
            registry,
            precheck,
            missing: None,
            begun: None,
        }
    }

    /// The layers of `opened` the registry lacks (a `HEAD` per blob, once) and how many it
    /// holds.
    fn missing(&mut self, opened: &Opened) -> Result<&(HashSet<String>, usize)> {
        if self.missing.is_none() {
            let (layers, _) = modelpack::bundle_layers(opened);
            let mut missing = HashSet::new();
            let mut skipped = 0;
            for l in &layers {
                if missing.contains(&l.digest) {
                    continue;
                }
                match self.registry.blob_size(&l.digest)? {
                    Some(size) if size == l.size => skipped += 1,
                    _ => {
                        missing.insert(l.digest.clone());
                    }
                }
            }
            self.missing = Some((missing, skipped));
        }
        Ok(self.missing.as_ref().expect("just set"))
    }
}

impl<'scope, 'env> Target for RegistryTarget<'scope, 'env> {
    type Done = Pushed;
    type Base = RegistryBase<'env>;

    fn begin(&mut self, opened: &Opened, _progress: &dyn Progress) -> Result<()> {
        let (missing, skipped) = self.missing(opened)?.clone();
        if !missing.is_empty() {
            (self.precheck)()?;
        }
        let sink = UploadSink {
            scope: self.scope,
            registry: self.registry,
            missing: missing.clone(),
            current: None,
            pending: None,
            config_json: ConfigCapture::default(),
            uploaded: Vec::new(),
            uploaded_bytes: 0,
        };
        self.begun = Some(Begun {
            sink,
            missing,
            skipped,
        });
        Ok(())
    }

    fn base(&mut self, opened: &Opened) -> Result<RegistryBase<'env>> {
        let registry = self.registry;
        let (missing, _) = self.missing(opened)?;
        RegistryBase::open(&opened.manifest, registry, missing)
    }

    fn sink(&mut self) -> &mut dyn EntrySink {
        &mut self.begun.as_mut().expect("begin came first").sink
    }

    fn commit(mut self, opened: &Opened, _fed: Fed, _progress: &dyn Progress) -> Result<Pushed> {
        let Begun {
            mut sink,
            missing,
            mut skipped,
        } = self.begun.take().expect("begin came first");
        let registry = self.registry;
        sink.finish_upload()?;
        // A delta may copy config.json instead of carrying it: read it back.
        let config_json = match sink.config_json.take() {
            Some(c) => Some(c),
            None => config_from_registry(opened, registry)?,
        };
        let mut uploaded = std::mem::take(&mut sink.uploaded);
        let mut uploaded_bytes = sink.uploaded_bytes;
        drop(sink);
        let artifact = Artifact::of(opened, config_json.as_deref());
        for (layer, bytes) in &artifact.small {
            if missing.contains(&layer.digest) {
                registry.put_blob_bytes(&layer.digest, bytes)?;
                uploaded.push(layer.path.clone());
                uploaded_bytes += bytes.len() as u64;
            }
        }
        let config_digest = modelpack::digest_of(&artifact.config);
        if registry.blob_size(&config_digest)?.is_none() {
            registry.put_blob_bytes(&config_digest, &artifact.config)?;
            uploaded_bytes += artifact.config.len() as u64;
        } else {
            skipped += 1;
        }
        registry.put_manifest(&artifact.image)?;
        Ok(Pushed {
            reference: registry.reference.to_string(),
            manifest_digest: modelpack::digest_of(&artifact.image),
            layers: artifact.layers.len(),
            uploaded_files: uploaded,
            uploaded_bytes,
            skipped_blobs: skipped,
        })
    }
}

/// Publishes the verified bundle `opened` (on disk) to `registry` under its reference: the
/// bundle's verified stream (a delta applied onto the base in the repository) into a
/// [`RegistryTarget`]. Before the first upload, the volumes are checked against their signed
/// chunk digests, so a damaged bundle uploads nothing.
pub fn push(opened: &BundleDir, registry: &Registry, progress: &dyn Progress) -> Result<Pushed> {
    // Never publish what `unpack oci://` refuses: checked before reading or uploading anything.
    let m = &opened.manifest;
    let (layers, _) = modelpack::bundle_layers(opened);
    modelpack::check_publishable(m, &layers, &opened.manifest_sha256).map_err(|reason| {
        Error::ManifestTooLarge {
            path: opened.dir().to_path_buf(),
            reason: reason.to_string(),
        }
    })?;
    let precheck = || -> Result<()> {
        match verify::verify(opened, Depth::Volumes, progress).into_error() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    };
    std::thread::scope(|scope| {
        pipeline::run(
            &BundleOnDisk(opened),
            RegistryTarget::new(scope, registry, &precheck),
            progress,
        )
    })
}
