//! `airlock push`: verify a bundle in full, then publish it as a ModelPack artifact.
//!
//! Nothing is uploaded before the whole bundle has verified (signature, every volume, every
//! file: [`crate::verify`] at [`Depth::Deep`]). Then every layer the registry lacks (a `HEAD`
//! per blob) is uploaded straight out of the bundle's stream: one pass through volumes → zstd
//! → tar, each missing file's bytes piped into a streamed `PUT` on a thread of its own
//! (bounded channel, so memory stays at a few megabytes whatever the file size). The registry
//! checks each blob against the digest the signed manifest gives before keeping it. The image
//! manifest goes last, so a tag never names an incomplete artifact.

use std::collections::HashSet;
use std::io::Read;
use std::thread::{Scope, ScopedJoinHandle};

use crossbeam_channel::{Receiver, Sender, bounded};

use super::client::Registry;
use super::modelpack::{self, Layer};
use crate::bundle::open::Opened;
use crate::bundle::stream::{self, EntrySink, Mode};
use crate::error::{Error, Result};
use crate::manifest::FileEntry;
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

/// A `Read` over buffers arriving on a channel; ends when the sender is dropped.
struct ChannelReader {
    rx: Receiver<Vec<u8>>,
    buf: Vec<u8>,
    pos: usize,
}

impl Read for ChannelReader {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        while self.pos == self.buf.len() {
            match self.rx.recv() {
                Ok(b) => {
                    self.buf = b;
                    self.pos = 0;
                }
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
    tx: Sender<Vec<u8>>,
    handle: ScopedJoinHandle<'scope, Result<()>>,
    path: String,
}

/// Uploads the files the registry lacks as the bundle's stream passes, and keeps the root
/// `config.json`.
struct UploadSink<'scope, 'env> {
    scope: &'scope Scope<'scope, 'env>,
    registry: &'env Registry,
    missing: HashSet<String>,
    current: Option<Upload<'scope>>,
    config_json: Option<Vec<u8>>,
    capturing: bool,
    uploaded: Vec<String>,
    uploaded_bytes: u64,
}

impl UploadSink<'_, '_> {
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
}

impl EntrySink for UploadSink<'_, '_> {
    fn dir(&mut self, _path: &str) -> Result<()> {
        Ok(())
    }

    fn begin_file(&mut self, file: &FileEntry) -> Result<()> {
        self.capturing = file.path == "config.json" && file.size <= MAX_CONFIG_JSON;
        if self.capturing {
            self.config_json = Some(Vec::with_capacity(file.size as usize));
        }
        let digest = format!("sha256:{}", file.sha256);
        if self.missing.remove(&digest) {
            let (tx, rx) = bounded::<Vec<u8>>(8);
            let registry = self.registry;
            let size = file.size;
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
                path: file.path.clone(),
            });
            self.uploaded.push(file.path.clone());
            self.uploaded_bytes += file.size;
        }
        Ok(())
    }

    fn data(&mut self, bytes: &[u8]) -> Result<()> {
        if self.capturing
            && let Some(c) = &mut self.config_json
        {
            c.extend_from_slice(bytes);
        }
        if let Some(up) = &self.current
            && up.tx.send(bytes.to_vec()).is_err()
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

    fn end_file(&mut self, _file: &FileEntry) -> Result<()> {
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
    let layers = modelpack::layers(m, &opened.manifest_bytes, &opened.signature_text);

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

    // One pass through the verified stream: uploads what is missing, keeps config.json.
    let mut file_missing: HashSet<String> = m
        .files
        .iter()
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
                missing: std::mem::take(&mut file_missing),
                current: None,
                config_json: None,
                capturing: false,
                uploaded: Vec::new(),
                uploaded_bytes: 0,
            };
            let streamed = stream::stream(opened, Mode::Strict, &mut sink, progress);
            let finished = sink.finish_upload();
            streamed?;
            finished?;
            Ok::<_, Error>((sink.config_json, sink.uploaded, sink.uploaded_bytes))
        })?
    };

    let precision = config_json
        .as_deref()
        .map(modelpack::precision_of)
        .unwrap_or((None, None));
    let config = modelpack::config(m, &layers, precision);
    let config_digest = modelpack::digest_of(&config);
    let small: [(&Layer, &[u8]); 2] = [
        (&layers[layers.len() - 2], &opened.manifest_bytes),
        (&layers[layers.len() - 1], opened.signature_text.as_bytes()),
    ];
    for (layer, bytes) in small {
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
