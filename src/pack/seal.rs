//! The seal: the manifest built from what the plan, the writer and the parity pass produced,
//! held to the reader's own rules, signed, and written beside the volumes.

use std::io;
use std::path::Path;

use blake2::Blake2b512;
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::manifest::{
    self, Base, Compression, FileEntry, HfSource, Manifest, Parity, Stream, Totals, Volume, Warning,
};
use crate::scheme::Signer;

/// Everything the manifest is made of.
pub struct Parts {
    /// Bundle name.
    pub name: String,
    /// Bundle version.
    pub version: u64,
    /// Creation time, seconds since the epoch.
    pub created_unix: i64,
    /// How the stream was compressed.
    pub compression: Compression,
    /// The uncompressed stream's size.
    pub stream_size: u64,
    /// Chunk size of the chunk digests.
    pub chunk_size: u64,
    /// The data volumes.
    pub volumes: Vec<Volume>,
    /// Directories.
    pub directories: Vec<String>,
    /// Files.
    pub files: Vec<FileEntry>,
    /// Model-check findings recorded.
    pub warnings: Vec<Warning>,
    /// Hugging Face provenance, its etags filled in.
    pub source: Option<HfSource>,
    /// The repositories of a bundle of several, their etags filled in.
    pub repos: Vec<manifest::Repo>,
    /// Beside `repos`, the model directory's folder (FORMAT.md section 14.4).
    pub dir: Option<manifest::DirPart>,
    /// Parity.
    pub parity: Option<Parity>,
    /// A delta's base.
    pub base: Option<Base>,
    /// The TUF roots the bundle carries (FORMAT.md section 18).
    pub trust_update: Option<manifest::TrustUpdate>,
    /// The value scan's counts (FORMAT.md section 20).
    pub values: Option<manifest::Values>,
    /// OpenSSF Model Signing (FORMAT.md section 19): what to emit and what was verified.
    pub oms: crate::oms::pack::Sealing,
}

/// A signed manifest, written.
pub struct Sealed {
    /// The manifest.
    pub manifest: Manifest,
    /// SHA-256 of the bytes.
    pub manifest_sha256: String,
}

/// Builds the manifest from `parts`, checks it with the reader's own `validate` and size limit,
/// signs it with `key` (any scheme's [`Signer`]) and writes `manifest.json` and its `.minisig` (synced) into `dir`.
pub fn seal(parts: Parts, key: &dyn Signer, dir: &Path) -> Result<Sealed> {
    let totals = Totals {
        files: parts.files.len() as u64,
        directories: parts.directories.len() as u64,
        file_bytes: parts.files.iter().map(|f| f.size).sum(),
        volume_bytes: parts.volumes.iter().map(|v| v.size).sum(),
    };
    // OMS (FORMAT.md section 19): the publisher's digests checked, airlock's signature made
    // from the digests the writer computed and written beside the manifest.
    let oms = parts.oms.seal(&parts.name, &parts.files, dir)?;
    let manifest = Manifest {
        format: manifest::FORMAT_ID.into(),
        format_version: manifest::FORMAT_VERSION,
        name: parts.name,
        version: parts.version,
        created: manifest::rfc3339(parts.created_unix),
        tool: format!("airlock {}", env!("CARGO_PKG_VERSION")),
        compression: parts.compression,
        stream: Stream {
            size: parts.stream_size,
        },
        chunk_size: parts.chunk_size,
        volumes: parts.volumes,
        directories: parts.directories,
        files: parts.files,
        totals,
        warnings: parts.warnings,
        source: parts.source,
        repos: parts.repos,
        dir: parts.dir,
        parity: parts.parity,
        base: parts.base,
        trust_update: parts.trust_update,
        values: parts.values,
        oms,
    };
    // The packer holds itself to the same rules as the reader, while a second thread
    // serializes: at a million files each takes half a second or more, and they are the end of
    // a pack, which nothing else keeps busy. The check, which allocates (a table of every
    // path), runs on this thread, whose allocator holds what the plan let go of. Nothing is
    // signed unless both succeed (a failure leaves the unsigned file in the work directory,
    // which goes with the error).
    let path = dir.join(manifest::MANIFEST_NAME);
    let (valid, written) = std::thread::scope(|s| {
        let written = s.spawn(|| write_manifest(&manifest, &path));
        (manifest.validate(), written.join())
    });
    let written = written.unwrap_or_else(|panic| std::panic::resume_unwind(panic));
    valid.map_err(|why| Error::Internal(format!("the new manifest {why}")))?;
    let out = written?;
    if out.len > manifest::MAX_MANIFEST_BYTES {
        // The estimate checked before packing is an upper bound but for the value findings of
        // small files the scan did not open (`pack::may_have_values`), so this is reached only
        // when such files hold values; kept so the rule never depends on the estimate being
        // right (the work directory and the file in it go with the error).
        return Err(Error::ManifestTooLarge {
            path: dir.to_path_buf(),
            reason: format!(
                "cannot pack this model: its manifest is {} bytes, more than the {}-byte limit every reader enforces",
                out.len,
                manifest::MAX_MANIFEST_BYTES
            ),
        });
    }
    let SealWriter {
        out: file,
        sha256,
        blake2b,
        ..
    } = out;
    file.sync_all().map_err(|e| Error::io(&path, e))?;
    drop(file);
    let prehash: [u8; 64] = blake2b.finalize().into();
    let manifest::Signed {
        signature: sig,
        manifest_sha256,
    } = manifest::sign_hashed(key, &manifest, hex::encode(sha256.finalize()), &prehash).map_err(
        |e| Error::Key {
            path: dir.join(manifest::SIGNATURE_NAME),
            source: e,
        },
    )?;
    crate::durable::write_synced(&dir.join(manifest::SIGNATURE_NAME), &sig, 0o644)?;
    Ok(Sealed {
        manifest,
        manifest_sha256,
    })
}

/// Serializes `manifest` into the new file `path` through both digests (SHA-256 for the
/// trusted comment, BLAKE2b-512 for the prehashed signature), straight into the file: at a
/// million files the JSON is 175 MB, which the packer once held whole (in a buffer grown by
/// doubling) and then wrote. Returns the file, not yet synced, with the digests and length.
fn write_manifest(manifest: &Manifest, path: &Path) -> Result<SealWriter<std::fs::File>> {
    let file = crate::fsio::create_new(path, 0o644).map_err(|e| Error::io(path, e.into()))?;
    let mut out = io::BufWriter::with_capacity(
        1 << 20,
        SealWriter {
            out: file,
            sha256: Sha256::new(),
            blake2b: Blake2b512::new(),
            len: 0,
        },
    );
    manifest
        .write_to(&mut out)
        .map_err(|e| Error::io(path, e))?;
    out.into_inner()
        .map_err(|e| Error::io(path, e.into_error()))
}

/// Writes the manifest's bytes on, counting them and feeding both digests.
struct SealWriter<W> {
    out: W,
    sha256: Sha256,
    blake2b: Blake2b512,
    len: u64,
}

impl<W: io::Write> io::Write for SealWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.out.write(buf)?;
        self.sha256.update(&buf[..n]);
        self.blake2b.update(&buf[..n]);
        self.len += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}
