//! The signed manifest: what a bundle must contain, byte for byte.
//!
//! The signature covers the exact bytes of `manifest.json`, so the JSON layout needs no
//! canonical form to be verified; the writer still emits one deterministic layout so the same
//! model packs to the same manifest. Parsing is strict (unknown fields refused, size capped) and
//! [`Manifest::validate`] checks every internal consistency rule before anything trusts a
//! number in it: a valid signature only says who wrote the manifest, not that they were honest.

use std::fmt;

use serde::{Deserialize, Serialize};

mod error;
pub use error::{Extension, ManifestError, Part};

use crate::hexdigest::is_sha256;
use crate::hfcache::names;
use crate::paths::{self, CollisionSet};
use crate::tar;

/// The `format` field of every manifest.
pub const FORMAT_ID: &str = "airlock-bundle";
/// The format version this build writes. It reads this one and every earlier one.
pub const FORMAT_VERSION: u32 = 2;
/// The oldest format version this build reads.
pub(crate) const OLDEST_FORMAT_VERSION: u32 = 1;
/// Largest manifest accepted, in bytes, by readers and by the packer alike (FORMAT.md,
/// section 2): the packer refuses a model whose manifest would be larger, so airlock never
/// writes a bundle it would refuse to read.
pub const MAX_MANIFEST_BYTES: u64 = 256 << 20;
pub use crate::paths::MANIFEST_NAME;
/// File name of the manifest's minisign signature inside a bundle.
pub const SIGNATURE_NAME: &str = "manifest.json.minisig";
/// Default chunk size for the per-volume chunk digests.
pub const DEFAULT_CHUNK_SIZE: u64 = 64 << 20;

/// The bundle manifest (format versions 1 and 2). `docs/FORMAT.md` is normative.
///
/// Parsing is strict: a field this build does not know is refused, never ignored, so a
/// manifest that uses a later extension is refused cleanly by a reader that cannot honour it
/// (as `base` and `parity` were before airlock read them; both exist in version 2 only). An
/// optional field is either absent or has a value: `null` is refused for every field.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// Always [`FORMAT_ID`].
    pub format: String,
    /// Always [`FORMAT_VERSION`].
    pub format_version: u32,
    /// Bundle name (the model's name).
    pub name: String,
    /// Bundle version number; installs refuse to go down unless told to.
    pub version: u64,
    /// Creation time, RFC 3339 UTC (`SOURCE_DATE_EPOCH` when set).
    pub created: String,
    /// The program that wrote it.
    pub tool: String,
    /// How the tar stream is compressed.
    pub compression: Compression,
    /// The uncompressed tar stream.
    pub stream: Stream,
    /// Size of the chunks each volume's `chunks` digests cover.
    pub chunk_size: u64,
    /// The volumes, in stream order.
    pub volumes: Vec<Volume>,
    /// Directories, in stream order.
    pub directories: Vec<String>,
    /// Regular files, in stream order.
    pub files: Vec<FileEntry>,
    /// Sums, repeated so a reader can check them before streaming.
    pub totals: Totals,
    /// Warnings the model checks raised when packing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<Warning>,
    /// Where the model came from, when packed from a Hugging Face cache.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub source: Option<HfSource>,
    /// The repositories of a bundle of several Hugging Face repositories (FORMAT.md section
    /// 14.4), each under a top-level directory of its own; absent (empty) for one model.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub repos: Vec<Repo>,
    /// Beside `repos`, the model directory packed with them (FORMAT.md section 14.4): the
    /// top-level directory holding its files.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub dir: Option<DirPart>,
    /// The version this bundle is a delta of (docs/FORMAT.md section 16).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub base: Option<Base>,
    /// Reed-Solomon parity volumes over the data chunks (FORMAT.md section 17).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub parity: Option<Parity>,
    /// The TUF trust-root versions the bundle carries beside its manifest (FORMAT.md
    /// section 18).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub trust_update: Option<TrustUpdate>,
    /// What the value scan counted in each model file when the bundle was packed (FORMAT.md
    /// section 20).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub values: Option<Values>,
    /// OpenSSF Model Signing (FORMAT.md section 19): the OMS signature the bundle carries
    /// beside its manifest, and the publisher's OMS signature verified when packing.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub oms: Option<Oms>,
}

/// The `oms` object (FORMAT.md section 19).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Oms {
    /// The OMS signature of the model the bundle carries beside `manifest.json`
    /// (`pack --oms-key`).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub signature: Option<OmsSignature>,
    /// The publisher's OMS signature, a file of the model, verified when the bundle was packed
    /// (`pack --oms-trust`).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub publisher: Option<OmsPublisher>,
}

/// The OMS signature file a bundle carries.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct OmsSignature {
    /// Its name beside the manifest and in the install: [`OMS_SIGNATURE_NAME`], or
    /// [`OMS_SIGNATURE_NAME_BESIDE_PUBLISHER`] when the model holds a `model.sig` of its own.
    pub name: String,
    /// Its size in bytes.
    pub size: u64,
    /// SHA-256 of its bytes.
    pub sha256: String,
}

/// The publisher's OMS signature, verified at pack time.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct OmsPublisher {
    /// The signature file's path in the model (a path of `files`).
    pub signature: String,
    /// `key` or `certificate`.
    pub method: String,
    /// The key's hint (SHA-256 of its PEM) or the signing certificate's SHA-256 fingerprint.
    pub signer: String,
}

/// The OMS signature's name: the reference tool's default.
pub const OMS_SIGNATURE_NAME: &str = "model.sig";
/// Its name when the model carries a `model.sig` of its own (the publisher's).
pub const OMS_SIGNATURE_NAME_BESIDE_PUBLISHER: &str = "model.airlock.sig";
/// Largest OMS signature file read anywhere (the manifest's own limit).
pub const MAX_OMS_SIGNATURE_BYTES: u64 = MAX_MANIFEST_BYTES;

/// The rules of FORMAT.md section 19.1 for `oms`.
fn validate_oms(m: &Manifest, o: &Oms) -> Result<(), ManifestError> {
    if m.format_version < 2 {
        return Err(ManifestError::NeedsVersion2(Extension::Oms));
    }
    if o.signature.is_none() && o.publisher.is_none() {
        return Err(ManifestError::EmptyOms);
    }
    if let Some(s) = &o.signature {
        if s.name != OMS_SIGNATURE_NAME && s.name != OMS_SIGNATURE_NAME_BESIDE_PUBLISHER {
            return Err(ManifestError::OmsSignatureName(s.name.clone()));
        }
        let folded = paths::fold(&s.name);
        if let Some(p) = m
            .directories
            .iter()
            .chain(m.files.iter().map(|f| &f.path))
            .find(|p| !p.contains('/') && paths::fold(p) == folded)
        {
            return Err(ManifestError::OmsSignatureTaken {
                name: s.name.clone(),
                path: p.clone(),
            });
        }
        if s.size == 0 || s.size > MAX_OMS_SIGNATURE_BYTES {
            return Err(ManifestError::OmsSignatureSize(s.size));
        }
        if !is_sha256(&s.sha256) {
            return Err(ManifestError::Malformed("oms.signature.sha256"));
        }
    }
    if let Some(p) = &o.publisher {
        if !m.files.iter().any(|f| f.path == p.signature) {
            return Err(ManifestError::PublisherSignatureMissing(
                p.signature.clone(),
            ));
        }
        if p.method != "key" && p.method != "certificate" {
            return Err(ManifestError::OmsMethod(p.method.clone()));
        }
        if !is_sha256(&p.signer) {
            return Err(ManifestError::Malformed("oms.publisher.signer"));
        }
    }
    Ok(())
}

/// The `values` object (FORMAT.md section 20): the value scan's counts per model file at pack
/// time, so the target sees what was true then and `check` compares against it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Values {
    /// The version of the scan's rules that made the counts (`inspect::values::RULES`).
    pub rules: u32,
    /// One entry per scanned file, in bundle order.
    pub files: Vec<FileValues>,
}

/// The value scan's counts for one file.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct FileValues {
    /// The file, a path of `files`.
    pub path: String,
    /// `safetensors` or `gguf`.
    pub format: String,
    /// Tensors in the file.
    pub tensors: u64,
    /// Tensors whose values were checked.
    pub checked: u64,
    /// NaN values (NaN scales of quantized blocks).
    pub nan: u64,
    /// Infinite values (infinite scales).
    pub inf: u64,
    /// Tensors of at least two values, all zero.
    pub zero_tensors: u64,
    /// Float tensors of at least two values, all equal and not zero.
    pub constant_tensors: u64,
    /// Zero-filled regions across tensor boundaries.
    pub zero_regions: u64,
}

/// The `format` names of [`FileValues`].
pub(crate) const VALUES_FORMATS: &[&str] = &["safetensors", "gguf"];

/// The `trust_update` object (FORMAT.md section 18): the root files `N.root.json` the bundle
/// carries, so the signature over the manifest covers them too.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TrustUpdate {
    /// The roots, consecutive versions in increasing order.
    pub roots: Vec<CarriedRoot>,
}

/// One root file a bundle carries.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct CarriedRoot {
    /// Its `signed.version`; the file is `VERSION.root.json`.
    pub version: u64,
    /// Its size in bytes.
    pub size: u64,
    /// SHA-256 of its bytes.
    pub sha256: String,
}

/// Most roots one bundle carries.
pub const MAX_CARRIED_ROOTS: usize = 64;
/// Largest root file a bundle carries (as a trust root file read anywhere).
pub(crate) const MAX_ROOT_FILE_BYTES: u64 = 1 << 20;

/// The `parity` object (FORMAT.md section 17.1): the stripe geometry and the parity volumes.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Parity {
    /// Always [`PARITY_ALGORITHM`].
    pub algorithm: String,
    /// `D`, data units per stripe.
    pub data_units: u32,
    /// `R`, recovery units per stripe.
    pub recovery_units: u32,
    /// `K = ceil(U / D)`.
    pub stripes: u64,
    /// The parity volumes (`parity.000`, ...): name, size and chunk digests, no `sha256`.
    pub volumes: Vec<Volume>,
}

/// The one parity code (FORMAT.md section 17.1).
pub const PARITY_ALGORITHM: &str = "rs-leopard-gf16";

/// Name of parity volume `index` when the bundle has `count` of them (section 2's width rule).
pub fn parity_volume_name(index: usize, count: usize) -> String {
    let width = count.saturating_sub(1).to_string().len().max(3);
    format!("parity.{index:0width$}")
}

impl Manifest {
    /// The number of data units `U`: every chunk of every data volume.
    pub fn data_units(&self) -> u64 {
        self.volumes.iter().map(|v| v.chunks.len() as u64).sum()
    }

    /// The parity geometry, when the bundle has parity (validated by [`Manifest::validate`]).
    pub fn parity_geometry(&self) -> Option<crate::parity::Geometry> {
        self.parity.as_ref().map(|p| crate::parity::Geometry {
            unit_size: self.chunk_size,
            units: self.data_units(),
            data: p.data_units,
            recovery: p.recovery_units,
        })
    }

    /// The section 17.1 and 17.2 rules for the `parity` object.
    fn validate_parity(&self, p: &Parity) -> Result<(), ManifestError> {
        if self.format_version < 2 {
            return Err(ManifestError::NeedsVersion2(Extension::Parity));
        }
        if p.algorithm != PARITY_ALGORITHM {
            return Err(ManifestError::ParityAlgorithm(p.algorithm.clone()));
        }
        let g = self.parity_geometry().expect("parity is present");
        g.validate().map_err(ManifestError::ParityGeometry)?;
        if p.stripes != g.stripes() {
            return Err(ManifestError::ParityStripes {
                declared: p.stripes,
                made: g.stripes(),
            });
        }
        if p.volumes.is_empty() {
            return Err(ManifestError::NoParityVolumes);
        }
        let count = p.volumes.len();
        let mut units: u64 = 0;
        for (i, v) in p.volumes.iter().enumerate() {
            let want = parity_volume_name(i, count);
            if v.name != want {
                return Err(ManifestError::ParityVolumeName {
                    number: i + 1,
                    name: v.name.clone(),
                    expected: want,
                });
            }
            if v.size == 0 || v.size % self.chunk_size != 0 {
                return Err(ManifestError::ParityVolumeSize {
                    name: v.name.clone(),
                    size: v.size,
                });
            }
            if v.sha256.is_some() {
                return Err(ManifestError::ParityVolumeWithSha256(v.name.clone()));
            }
            if !v.chunks.iter().all(|c| is_sha256(c)) {
                return Err(ManifestError::MalformedVolumeDigest(v.name.clone()));
            }
            if v.chunks.len() as u64 != v.size / self.chunk_size {
                return Err(ManifestError::ParityChunkCount {
                    name: v.name.clone(),
                    listed: v.chunks.len(),
                    needed: v.size / self.chunk_size,
                });
            }
            units += v.chunks.len() as u64;
        }
        if units != g.recovery_units() {
            return Err(ManifestError::RecoveryUnits {
                listed: units,
                made: g.recovery_units(),
            });
        }
        Ok(())
    }
}

/// Compression of the tar stream.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Compression {
    /// `zstd` or `none`.
    pub algorithm: String,
    /// The zstd level used (informative).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub level: Option<i32>,
}

/// The uncompressed tar stream.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Stream {
    /// Exact size in bytes, end-of-archive marker included.
    pub size: u64,
}

/// One volume file.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Volume {
    /// File name inside the bundle (`data.000`, ...).
    pub name: String,
    /// Size in bytes.
    pub size: u64,
    /// SHA-256 of the whole volume, lowercase hex: required in format version 1, absent in
    /// version 2 (the signed chunk digests are the authority on a volume's content).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub sha256: Option<String>,
    /// SHA-256 of each `chunk_size` piece of the volume, in order (the last may be shorter).
    pub chunks: Vec<String>,
}

/// One regular file.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FileEntry {
    /// Relative `/`-separated path.
    pub path: String,
    /// Size in bytes.
    pub size: u64,
    /// SHA-256 of the content, lowercase hex.
    pub sha256: String,
    /// Whether the file is installed executable (mode 755 instead of 644).
    pub executable: bool,
    /// In a delta bundle: where the content comes from when it is not carried (section 16.1).
    /// Boxed: a manifest holds one entry a file, and most files have none.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub from: Option<Box<From>>,
}

/// Sums over the manifest.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Totals {
    /// Number of files.
    pub files: u64,
    /// Number of directories.
    pub directories: u64,
    /// Sum of file sizes.
    pub file_bytes: u64,
    /// Sum of volume sizes.
    pub volume_bytes: u64,
}

impl Totals {
    /// The totals of a part of a bundle (a repository's view, a chosen part): its own files
    /// and directories counted, the bundle's volumes unchanged.
    fn of(files: &[FileEntry], directories: usize, volume_bytes: u64) -> Totals {
        Totals {
            files: files.len() as u64,
            directories: directories as u64,
            file_bytes: files.iter().map(|f| f.size).sum(),
            volume_bytes,
        }
    }
}

/// A model-check warning recorded at pack time.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Warning {
    /// File the warning is about.
    pub path: String,
    /// Stable finding code.
    pub code: String,
    /// What was found.
    pub problem: String,
}

/// Provenance of a model packed from a Hugging Face cache.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HfSource {
    /// Repository id, `org/name`.
    pub repo_id: String,
    /// `model`, `dataset` or `space`.
    pub repo_type: String,
    /// The revision asked for (branch, tag or commit).
    pub revision: String,
    /// The 40-hex commit the revision resolved to.
    pub commit: String,
    /// Etag (blob name) of each file, in `files` order.
    pub etags: Vec<String>,
}

/// One repository of a bundle of several (FORMAT.md section 14.4): the top-level directory
/// holding its files, and its provenance as `source` records it for a bundle of one, its
/// `etags` one per file below that directory.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Repo {
    /// The top-level directory of the bundle holding the repository's files: its cache folder
    /// name, `models--ORG--NAME` ([`names::repo_folder_name`]).
    pub path: String,
    /// Where it came from; `etags` in `files` order for the files below `path`.
    pub source: HfSource,
}

/// The model directory of a bundle of repositories and a directory (FORMAT.md section 14.4):
/// the top-level directory holding its files.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct DirPart {
    /// One path component, not of a cache folder's form (`models--`, `datasets--`, ...).
    pub path: String,
}

/// The most repositories one bundle carries.
pub(crate) const MAX_REPOS: usize = 256;

/// The base of a delta bundle (docs/FORMAT.md section 16.1): the installed version it builds on.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Base {
    /// `name` of the base manifest (this manifest's own name).
    pub name: String,
    /// `version` of the base manifest, lower than this one's.
    pub version: u64,
    /// SHA-256 of the exact bytes of the base `manifest.json`.
    pub manifest_sha256: String,
}

/// How a delta obtains a file that is not carried (docs/FORMAT.md section 16.1).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct From {
    /// Path of the base file used.
    pub path: String,
    /// `copy` or `xor`.
    pub op: String,
    /// `xor` only: `bytes` or `safetensors`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub map: Option<String>,
    /// `xor` only: bytes of the patch carried in the stream.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub patch_size: Option<u64>,
    /// `xor` only: SHA-256 of the patch.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub patch_sha256: Option<String>,
}

/// The `from.op` of a file rebuilt from a base file and a patch.
pub const OP_XOR: &str = "xor";
/// The `from.op` of a file taken unchanged from the base.
pub const OP_COPY: &str = "copy";
/// The stream directory holding a delta's patches (`.airlock-delta/<i>`), reserved like
/// [`paths::RECEIPT_DIR`].
pub const DELTA_DIR: &str = ".airlock-delta";

/// Whether `path`'s first component is the reserved [`DELTA_DIR`] in any spelling a
/// case-insensitive filesystem would make the same name.
pub fn uses_delta_dir(path: &str) -> bool {
    let first = path.split('/').next().unwrap_or(path);
    paths::fold(first) == paths::fold(DELTA_DIR)
}

impl FileEntry {
    /// The patch of an `xor` file: its size and SHA-256.
    pub fn patch(&self) -> Option<(u64, &str)> {
        let f = self.from.as_ref().filter(|f| f.op == OP_XOR)?;
        Some((f.patch_size?, f.patch_sha256.as_deref()?))
    }

    /// Whether the file's content is in the stream at its own path.
    pub fn carried(&self) -> bool {
        self.from.is_none()
    }
}

/// One entry in stream order, as the tar stream must present it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Expected<'a> {
    /// A directory.
    Dir(&'a str),
    /// A file.
    File(&'a FileEntry),
}

impl Expected<'_> {
    /// The entry's path.
    pub fn path(&self) -> &str {
        match self {
            Expected::Dir(p) => p,
            Expected::File(f) => &f.path,
        }
    }
}

/// Deserialises an optional field that, when present, must have a value: `null` is refused
/// (absent is the only way to leave an optional field out; FORMAT.md, section 7.1).
fn present<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    T::deserialize(d).map(Some)
}

/// Name of volume `index` when the bundle has `count` volumes.
pub fn volume_name(index: usize, count: usize) -> String {
    let width = count.saturating_sub(1).to_string().len().max(3);
    format!("data.{index:0width$}")
}

/// Bytes the tar writer emits for one entry; the arithmetic lives beside the writer.
pub use crate::tar::entry_stream_size;

impl Manifest {
    /// Parses manifest bytes strictly (unknown fields are an error) and validates them.
    pub fn parse(bytes: &[u8]) -> Result<Manifest, ManifestError> {
        if bytes.len() as u64 > MAX_MANIFEST_BYTES {
            return Err(ManifestError::TooLarge);
        }
        let m: Manifest = serde_json::from_slice(bytes).map_err(ManifestError::Json)?;
        m.validate()?;
        Ok(m)
    }

    /// Serialises the manifest in its one layout: pretty JSON, fields in declaration order,
    /// trailing newline.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = Vec::new();
        self.write_to(&mut v).expect("manifest serialises");
        v
    }

    /// Writes [`Manifest::to_bytes`] to `out` without holding them.
    pub fn write_to(&self, out: &mut impl std::io::Write) -> std::io::Result<()> {
        serde_json::to_writer_pretty(&mut *out, self).map_err(std::io::Error::from)?;
        out.write_all(b"\n")
    }

    /// Entries in the order the tar stream holds them: directories and files merged by
    /// [`paths::bundle_order`].
    pub fn expected_entries(&self) -> Vec<Expected<'_>> {
        let mut out = Vec::with_capacity(self.directories.len() + self.files.len());
        let (mut d, mut f) = (0, 0);
        while d < self.directories.len() || f < self.files.len() {
            let take_dir = match (self.directories.get(d), self.files.get(f)) {
                (Some(dir), Some(file)) => paths::bundle_order(dir, &file.path).is_lt(),
                (Some(_), None) => true,
                _ => false,
            };
            if take_dir {
                out.push(Expected::Dir(&self.directories[d]));
                d += 1;
            } else {
                out.push(Expected::File(&self.files[f]));
                f += 1;
            }
        }
        out
    }

    /// Checks every rule of `docs/FORMAT.md` that the manifest alone can be held to.
    pub fn validate(&self) -> Result<(), ManifestError> {
        if self.format != FORMAT_ID {
            return Err(ManifestError::Format(self.format.clone()));
        }
        if !(OLDEST_FORMAT_VERSION..=FORMAT_VERSION).contains(&self.format_version) {
            return Err(ManifestError::FormatVersion(self.format_version));
        }
        self.validate_texts()?;
        match (self.compression.algorithm.as_str(), self.compression.level) {
            ("zstd", _) | ("none", None) => {}
            (other, _) => return Err(ManifestError::Compression(other.to_string())),
        }
        let volume_bytes = self.validate_volumes()?;
        let (file_bytes, stream) = self.validate_entries()?;
        if self.totals.files != self.files.len() as u64
            || self.totals.directories != self.directories.len() as u64
            || self.totals.file_bytes != file_bytes
        {
            return Err(ManifestError::Totals);
        }
        if self.stream.size != stream {
            return Err(ManifestError::StreamSize {
                declared: self.stream.size,
                made: stream,
            });
        }
        if self.compression.algorithm == "none" && self.stream.size != volume_bytes {
            return Err(ManifestError::UncompressedSize {
                volume_bytes,
                stream: self.stream.size,
            });
        }
        if !self.repos.is_empty() || self.dir.is_some() {
            self.validate_repos()?;
        }
        if let Some(src) = &self.source {
            validate_source(
                src,
                Part::Source,
                self.files.iter().map(|f| (&f.path, &f.sha256)),
            )?;
        }
        if let Some(p) = &self.parity {
            self.validate_parity(p)?;
        }
        if let Some(t) = &self.trust_update {
            if self.format_version < 2 {
                return Err(ManifestError::NeedsVersion2(Extension::TrustUpdate));
            }
            validate_trust_update(t)?;
        }
        if let Some(o) = &self.oms {
            validate_oms(self, o)?;
        }
        if let Some(v) = &self.values {
            self.validate_values(v)?;
        }
        Ok(())
    }

    /// The free texts: the name, `created`, `tool`, the warnings' and the source's strings.
    fn validate_texts(&self) -> Result<(), ManifestError> {
        check_name(&self.name)?;
        let texts = [("created", &self.created), ("tool", &self.tool)];
        for (what, text) in texts {
            check_text(what, text)?;
        }
        for w in &self.warnings {
            check_text("warnings.path", &w.path)?;
            check_text("warnings.code", &w.code)?;
            check_text("warnings.problem", &w.problem)?;
        }
        if let Some(src) = &self.source {
            for (what, text) in [
                ("source.repo_id", &src.repo_id),
                ("source.repo_type", &src.repo_type),
                ("source.revision", &src.revision),
                ("source.commit", &src.commit),
            ] {
                check_text(what, text)?;
            }
            for e in &src.etags {
                check_text("source.etags", e)?;
            }
        }
        for r in &self.repos {
            check_text("repos.path", &r.path)?;
            for text in [
                &r.source.repo_id,
                &r.source.repo_type,
                &r.source.revision,
                &r.source.commit,
            ] {
                check_text("repos.source", text)?;
            }
            for e in &r.source.etags {
                check_text("repos.source.etags", e)?;
            }
        }
        Ok(())
    }

    /// The chunk size and the volumes (names, sizes, digests per format version); returns
    /// their total size.
    fn validate_volumes(&self) -> Result<u64, ManifestError> {
        if !(4096..=(1 << 30)).contains(&self.chunk_size) || !self.chunk_size.is_power_of_two() {
            return Err(ManifestError::ChunkSize(self.chunk_size));
        }
        if self.volumes.is_empty() {
            return Err(ManifestError::NoVolumes);
        }
        let count = self.volumes.len();
        let mut volume_bytes: u64 = 0;
        for (i, v) in self.volumes.iter().enumerate() {
            if v.name != volume_name(i, count) {
                return Err(ManifestError::VolumeName {
                    number: i + 1,
                    name: v.name.clone(),
                    expected: volume_name(i, count),
                });
            }
            if v.size == 0 {
                return Err(ManifestError::VolumeEmpty(v.name.clone()));
            }
            match (self.format_version, &v.sha256) {
                (1, None) => {
                    return Err(ManifestError::VolumeWithoutSha256(v.name.clone()));
                }
                (2.., Some(_)) => {
                    return Err(ManifestError::VolumeWithSha256(v.name.clone()));
                }
                _ => {}
            }
            if !v.sha256.as_deref().is_none_or(is_sha256) || !v.chunks.iter().all(|c| is_sha256(c))
            {
                return Err(ManifestError::MalformedVolumeDigest(v.name.clone()));
            }
            if v.chunks.len() as u64 != v.size.div_ceil(self.chunk_size) {
                return Err(ManifestError::ChunkCount {
                    name: v.name.clone(),
                    listed: v.chunks.len(),
                    needed: v.size.div_ceil(self.chunk_size),
                });
            }
            volume_bytes = volume_bytes
                .checked_add(v.size)
                .ok_or(ManifestError::VolumeSizesOverflow)?;
        }
        if volume_bytes != self.totals.volume_bytes {
            return Err(ManifestError::VolumeTotal {
                declared: self.totals.volume_bytes,
                listed: volume_bytes,
            });
        }
        Ok(volume_bytes)
    }

    /// The directories and files: safe paths in bundle order, no collisions, parents listed,
    /// digests well formed, a delta's rules; returns the files' total size and the tar stream's
    /// size their entries make.
    fn validate_entries(&self) -> Result<(u64, u64), ManifestError> {
        // Sized for every path at once, folded and (when folding changes it) as written.
        let count = self.files.len() + self.directories.len() + 1;
        let bytes = self.files.iter().map(|f| f.path.len()).sum::<usize>()
            + self.directories.iter().map(String::len).sum::<usize>();
        let mut collisions = CollisionSet::with_capacity(count, bytes);
        let mut previous: Option<&str> = None;
        let mut dirs = paths::NameSet::with_capacity(self.directories.len());
        for d in &self.directories {
            paths::check_relative(d).map_err(|why| ManifestError::UnsafePath {
                path: d.clone(),
                why,
            })?;
            if let Some(p) = previous
                && !paths::bundle_order(p, d).is_lt()
            {
                return Err(ManifestError::DirectoryOrder(d.clone()));
            }
            previous = Some(d);
            dirs.insert(d);
        }
        let mut file_bytes: u64 = 0;
        let mut stream: u64 = 2 * tar::BLOCK as u64;
        let mut previous: Option<&str> = None;
        for (i, f) in self.files.iter().enumerate() {
            let p = f.path.as_str();
            paths::check_relative(p).map_err(|why| ManifestError::UnsafePath {
                path: p.to_string(),
                why,
            })?;
            if let Some(prev) = previous
                && !paths::bundle_order(prev, p).is_lt()
            {
                return Err(ManifestError::FileOrder(p.to_string()));
            }
            previous = Some(p);
            if dirs.contains(p) {
                return Err(ManifestError::FileAndDirectory(p.to_string()));
            }
            if !is_sha256(&f.sha256) {
                return Err(ManifestError::MalformedFileDigest(p.to_string()));
            }
            file_bytes = file_bytes
                .checked_add(f.size)
                .ok_or(ManifestError::FileSizesOverflow)?;
            stream = match (&f.from, f.patch()) {
                (None, _) => entry_stream_size(p, false, f.size),
                (Some(_), None) => Some(0),
                (Some(_), Some((size, _))) => entry_stream_size(&patch_path(i), false, size),
            }
            .and_then(|n| stream.checked_add(n))
            .ok_or(ManifestError::FileSizesOverflow)?;
        }
        if self.validate_delta()? {
            stream = entry_stream_size(DELTA_DIR, true, 0)
                .and_then(|n| stream.checked_add(n))
                .ok_or(ManifestError::FileSizesOverflow)?;
        }
        for entry in self.expected_entries() {
            let p = entry.path();
            if let Some(earlier) = collisions.insert(p) {
                return Err(ManifestError::Collision {
                    path: p.to_string(),
                    earlier: earlier.to_string(),
                });
            }
            if let Some((parent, _)) = p.rsplit_once('/')
                && !dirs.contains(parent)
            {
                return Err(ManifestError::MissingParent {
                    path: p.to_string(),
                    parent: parent.to_string(),
                });
            }
        }
        for d in &self.directories {
            stream = entry_stream_size(d, true, 0)
                .and_then(|n| stream.checked_add(n))
                .ok_or(ManifestError::DirectoryEntriesOverflow)?;
        }
        Ok((file_bytes, stream))
    }

    /// The rules of FORMAT.md section 20 for `values`.
    fn validate_values(&self, v: &Values) -> Result<(), ManifestError> {
        if self.format_version < 2 {
            return Err(ManifestError::NeedsVersion2(Extension::Values));
        }
        if v.rules == 0 {
            return Err(ManifestError::ValuesRulesZero);
        }
        if v.files.is_empty() {
            return Err(ManifestError::ValuesEmpty);
        }
        let mut files = self.files.iter().map(|f| f.path.as_str());
        for e in &v.files {
            // Both lists are in bundle order: each entry is found after the previous one.
            if !files.any(|p| p == e.path) {
                return Err(ManifestError::ValuesPath(e.path.clone()));
            }
            if !VALUES_FORMATS.contains(&e.format.as_str()) {
                return Err(ManifestError::ValuesFormat {
                    path: e.path.clone(),
                    format: e.format.clone(),
                });
            }
            let flagged = e.zero_tensors.checked_add(e.constant_tensors);
            if e.checked > e.tensors || flagged.is_none_or(|n| n > e.checked) {
                return Err(ManifestError::ValuesCounts(e.path.clone()));
            }
        }
        Ok(())
    }

    /// The delta rules of docs/FORMAT.md section 16.1 (`base`, `files[].from`, version 2 only)
    /// and the reserved [`DELTA_DIR`] (section 4.1), in every model path and base path. Returns
    /// whether the stream holds patches.
    fn validate_delta(&self) -> Result<bool, ManifestError> {
        for p in self
            .directories
            .iter()
            .chain(self.files.iter().map(|f| &f.path))
        {
            if uses_delta_dir(p) {
                return Err(ManifestError::ReservedPath(p.clone()));
            }
        }
        if let Some(base) = &self.base {
            if self.format_version < 2 {
                return Err(ManifestError::NeedsVersion2(Extension::Base));
            }
            if base.name != self.name {
                return Err(ManifestError::BaseName {
                    base: base.name.clone(),
                    name: self.name.clone(),
                });
            }
            if base.version >= self.version {
                return Err(ManifestError::BaseVersion {
                    version: self.version,
                    base: base.version,
                });
            }
            if !is_sha256(&base.manifest_sha256) {
                return Err(ManifestError::Malformed("base.manifest_sha256"));
            }
        }
        let mut patches = false;
        for f in &self.files {
            let Some(from) = &f.from else { continue };
            let p = &f.path;
            if self.base.is_none() {
                return Err(ManifestError::FromWithoutBase(p.clone()));
            }
            paths::check_relative(&from.path).map_err(|why| ManifestError::UnsafeBasePath {
                path: p.clone(),
                from: from.path.clone(),
                why,
            })?;
            if uses_delta_dir(&from.path) {
                return Err(ManifestError::ReservedBasePath {
                    path: p.clone(),
                    from: from.path.clone(),
                });
            }
            match from.op.as_str() {
                OP_COPY => {
                    if from.map.is_some()
                        || from.patch_size.is_some()
                        || from.patch_sha256.is_some()
                    {
                        return Err(ManifestError::CopyWithPatch(p.clone()));
                    }
                }
                OP_XOR => {
                    if !matches!(from.map.as_deref(), Some("bytes" | "safetensors")) {
                        return Err(ManifestError::PatchMap(p.clone()));
                    }
                    if from.patch_size.is_none()
                        || !from.patch_sha256.as_deref().is_some_and(is_sha256)
                    {
                        return Err(ManifestError::PatchDigest(p.clone()));
                    }
                    patches = true;
                }
                other => {
                    return Err(ManifestError::UnknownOp {
                        path: p.clone(),
                        op: other.to_string(),
                    });
                }
            }
        }
        Ok(patches)
    }

    /// The stream entries of a delta's patches (docs/FORMAT.md section 16.2), one per `xor`
    /// file, as file entries: `.airlock-delta/<i>`, the patch's size and SHA-256, mode 0644.
    pub fn patch_entries(&self) -> Vec<(usize, FileEntry)> {
        self.files
            .iter()
            .enumerate()
            .filter_map(|(i, f)| {
                let (size, sha256) = f.patch()?;
                Some((
                    i,
                    FileEntry {
                        path: patch_path(i),
                        size,
                        sha256: sha256.to_string(),
                        executable: false,
                        from: None,
                    },
                ))
            })
            .collect()
    }

    /// The entries of the tar stream in order: [`Manifest::expected_entries`] for a full
    /// bundle; for a delta, the directories, the carried files, and `.airlock-delta` with the
    /// patches (`patches` from [`Manifest::patch_entries`]), merged in bundle order.
    pub fn stream_entries<'a>(&'a self, patches: &'a [(usize, FileEntry)]) -> Vec<Expected<'a>> {
        if self.base.is_none() {
            return self.expected_entries();
        }
        let mut out: Vec<Expected<'a>> = self
            .expected_entries()
            .into_iter()
            .filter(|e| match e {
                Expected::Dir(_) => true,
                Expected::File(f) => f.carried(),
            })
            .collect();
        if !patches.is_empty() {
            out.push(Expected::Dir(DELTA_DIR));
            out.extend(patches.iter().map(|(_, f)| Expected::File(f)));
        }
        out.sort_by(|a, b| paths::bundle_order(a.path(), b.path()));
        out
    }

    /// The rules of FORMAT.md section 14.4 for `repos`.
    fn validate_repos(&self) -> Result<(), ManifestError> {
        if self.format_version < 2 {
            return Err(ManifestError::NeedsVersion2(Extension::Repos));
        }
        // With the directory `dir` beside them, one repository is enough.
        let least = if self.dir.is_some() { 1 } else { 2 };
        if self.repos.len() < least || self.repos.len() > MAX_REPOS {
            return Err(ManifestError::RepoCount {
                count: self.repos.len(),
                least,
            });
        }
        if let Some(d) = &self.dir {
            if self.base.is_some() {
                return Err(ManifestError::DirWithBase);
            }
            let p = d.path.as_str();
            if p.is_empty()
                || p.contains('/')
                || p == "."
                || p == ".."
                || ["models--", "datasets--", "spaces--", "kernels--"]
                    .iter()
                    .any(|f| p.starts_with(f))
            {
                return Err(ManifestError::DirPath(p.to_string()));
            }
            if self
                .directories
                .binary_search_by(|x| paths::bundle_order(x, p))
                .is_err()
            {
                return Err(ManifestError::DirWithoutDirectory(p.to_string()));
            }
            let prefix = format!("{p}/");
            if !self.files.iter().any(|f| f.path.starts_with(&prefix)) {
                return Err(ManifestError::DirEmpty(p.to_string()));
            }
        }
        if self.source.is_some() {
            return Err(ManifestError::SourceAndRepos);
        }
        let mut previous: Option<&str> = None;
        for (i, r) in self.repos.iter().enumerate() {
            names::check_repo_id(&r.source.repo_id).map_err(|why| ManifestError::SourceName {
                part: Part::Repo(i),
                field: "repo_id",
                why,
            })?;
            names::check_repo_type(&r.source.repo_type).map_err(|why| {
                ManifestError::SourceName {
                    part: Part::Repo(i),
                    field: "repo_type",
                    why,
                }
            })?;
            let want = names::repo_folder_name(&r.source.repo_type, &r.source.repo_id);
            if r.path != want {
                return Err(ManifestError::RepoFolder {
                    repo_id: r.source.repo_id.clone(),
                    repo_type: r.source.repo_type.clone(),
                    path: r.path.clone(),
                    expected: want,
                });
            }
            if let Some(p) = previous
                && !paths::bundle_order(p, &r.path).is_lt()
            {
                return Err(ManifestError::RepoOrder(r.path.clone()));
            }
            previous = Some(&r.path);
            if self
                .directories
                .binary_search_by(|d| paths::bundle_order(d, &r.path))
                .is_err()
            {
                return Err(ManifestError::RepoWithoutDirectory {
                    repo_id: r.source.repo_id.clone(),
                    path: r.path.clone(),
                });
            }
        }
        for p in self
            .directories
            .iter()
            .chain(self.files.iter().map(|f| &f.path))
        {
            if self.repo_of(p).is_none() && !self.in_dir(p) {
                return Err(ManifestError::OutsideRepos(p.clone()));
            }
        }
        for (i, r) in self.repos.iter().enumerate() {
            let files = self.repo_files(i);
            if files.is_empty() {
                return Err(ManifestError::RepoEmpty {
                    repo_id: r.source.repo_id.clone(),
                    path: r.path.clone(),
                });
            }
            validate_source(
                &r.source,
                Part::Repo(i),
                files.iter().map(|f| (&f.path, &f.sha256)),
            )?;
        }
        // A delta of several repositories: each repository is a delta of the same repository
        // of the base, so a file takes its bytes only from a file below its own directory.
        for f in &self.files {
            let Some(from) = &f.from else { continue };
            let own = f.path.split('/').next().unwrap_or_default();
            if from.path.split('/').next() != Some(own) || !from.path.contains('/') {
                return Err(ManifestError::CrossRepoFrom {
                    path: f.path.clone(),
                    from: from.path.clone(),
                    repo: own.to_string(),
                });
            }
        }
        Ok(())
    }

    /// For a delta of several repositories (FORMAT.md section 14.4), the rules that need its
    /// base's manifest `base`: the base is a bundle of several repositories too. A repository
    /// of the delta that the base does not have is new (its files are carried); one of the
    /// base that the delta does not have is dropped (section 14.4 says what each target does).
    pub fn check_repos_base(&self, base: &Manifest) -> std::result::Result<(), ShapeMismatch> {
        match (self.repos.is_empty(), base.repos.is_empty()) {
            (true, false) => Err(ShapeMismatch::OneAgainstSeveral),
            (false, true) => Err(ShapeMismatch::SeveralAgainstOne),
            _ => Ok(()),
        }
    }

    /// For a delta of several repositories: the index in the base's `repos` of the repository
    /// `index` of this bundle (same directory), `None` for a repository new in this bundle.
    pub fn base_repo(&self, index: usize, base: &Manifest) -> Option<usize> {
        let r = self.repos.get(index)?;
        base.repos.iter().position(|b| b.path == r.path)
    }

    /// Whether the bundle path `path` is the directory `dir` or below it (FORMAT.md section
    /// 14.4).
    pub fn in_dir(&self, path: &str) -> bool {
        self.dir
            .as_ref()
            .is_some_and(|d| path.split('/').next() == Some(d.path.as_str()))
    }

    /// The index in `repos` of the repository `path` (a path of the bundle) belongs to: the
    /// one whose directory is its first component.
    pub fn repo_of(&self, path: &str) -> Option<usize> {
        let first = path.split('/').next().unwrap_or(path);
        self.repos.iter().position(|r| r.path == first)
    }

    /// The files of repository `index`, in bundle order: a contiguous run of `files`, since
    /// every path below a directory sorts together.
    pub fn repo_files(&self, index: usize) -> &[FileEntry] {
        let Some(r) = self.repos.get(index) else {
            return &[];
        };
        let below = |p: &str| {
            p.strip_prefix(r.path.as_str())
                .is_some_and(|rest| rest.starts_with('/'))
        };
        let start = self
            .files
            .partition_point(|f| !below(&f.path) && paths::bundle_order(&f.path, &r.path).is_lt());
        let len = self.files[start..]
            .iter()
            .take_while(|f| below(&f.path))
            .count();
        &self.files[start..start + len]
    }

    /// Repository `index` of a bundle of several, as a manifest of its own: its directories and
    /// files with the repository's directory taken off their paths, its `source`, and the
    /// value records and warnings about its files. Never signed nor written: the installers
    /// work on one repository at a time with it. The volumes, stream and totals are the
    /// whole bundle's, except the file and directory counts and sums.
    pub fn repo_view(&self, index: usize) -> Option<Manifest> {
        let r = self.repos.get(index)?;
        let prefix = format!("{}/", r.path);
        let strip = |p: &str| p.strip_prefix(&prefix).map(str::to_string);
        let files: Vec<FileEntry> = self
            .repo_files(index)
            .iter()
            .map(|f| FileEntry {
                path: f.path[prefix.len()..].to_string(),
                ..f.clone()
            })
            .collect();
        let directories: Vec<String> = self.directories.iter().filter_map(|d| strip(d)).collect();
        let warnings = self
            .warnings
            .iter()
            .filter_map(|w| {
                Some(Warning {
                    path: strip(&w.path)?,
                    ..w.clone()
                })
            })
            .collect();
        let values = self.values.as_ref().and_then(|v| {
            let files: Vec<FileValues> = v
                .files
                .iter()
                .filter_map(|f| {
                    Some(FileValues {
                        path: strip(&f.path)?,
                        ..f.clone()
                    })
                })
                .collect();
            (!files.is_empty()).then_some(Values {
                rules: v.rules,
                files,
            })
        });
        Some(Manifest {
            totals: Totals::of(&files, directories.len(), self.totals.volume_bytes),
            source: Some(r.source.clone()),
            repos: Vec::new(),
            warnings,
            values,
            oms: None,
            trust_update: None,
            parity: None,
            base: None,
            files,
            directories,
            ..self.clone_header()
        })
    }

    /// The repositories of a bundle of several that `asked` names, as indices into `repos` in
    /// bundle order, each once. A name is `ORG/NAME` (the repository of that id; two of one
    /// id and different types need the type), `TYPE:ORG/NAME`, or the repository's folder
    /// (`models--ORG--NAME`). `Err` says which name is not there and lists the bundle's
    /// repositories (a usage error: the operator asked for a part the bundle does not have).
    pub fn choose_repos(&self, asked: &[String]) -> std::result::Result<Vec<usize>, ChooseError> {
        let listed = || {
            self.repos
                .iter()
                .map(|r| format!("{}:{}", r.source.repo_type, r.source.repo_id))
                .collect::<Vec<_>>()
                .join(", ")
        };
        if self.repos.is_empty() {
            return Err(ChooseError::OneModel);
        }
        let mut chosen = Vec::new();
        for name in asked {
            let hits: Vec<usize> = self
                .repos
                .iter()
                .enumerate()
                .filter(|(_, r)| {
                    let typed = format!("{}:{}", r.source.repo_type, r.source.repo_id);
                    *name == r.source.repo_id || *name == typed || *name == r.path
                })
                .map(|(i, _)| i)
                .collect();
            match hits.as_slice() {
                [i] => {
                    if !chosen.contains(i) {
                        chosen.push(*i);
                    }
                }
                [] => {
                    return Err(ChooseError::NoSuch {
                        name: name.clone(),
                        carried: listed(),
                    });
                }
                _ => {
                    return Err(ChooseError::Ambiguous {
                        name: name.clone(),
                        count: hits.len(),
                        carried: listed(),
                    });
                }
            }
        }
        chosen.sort_unstable();
        Ok(chosen)
    }

    /// The part of a bundle of several that an install of the repositories `chosen` (indices
    /// into `repos`, in bundle order) lays down: one repository alone is [`Manifest::repo_view`]
    /// (its files at the root), several keep their folders and their `repos` entries. Never
    /// signed nor written.
    pub fn select_repos(&self, chosen: &[usize]) -> Option<Manifest> {
        if let [one] = chosen {
            return self.repo_view(*one);
        }
        let keep: Vec<&str> = chosen
            .iter()
            .map(|&i| self.repos.get(i).map(|r| r.path.as_str()))
            .collect::<Option<_>>()?;
        let inside = |p: &str| keep.contains(&p.split('/').next().unwrap_or(p));
        let files: Vec<FileEntry> = self
            .files
            .iter()
            .filter(|f| inside(&f.path))
            .cloned()
            .collect();
        let directories: Vec<String> = self
            .directories
            .iter()
            .filter(|d| inside(d))
            .cloned()
            .collect();
        let values = self.values.as_ref().and_then(|v| {
            let files: Vec<FileValues> = v
                .files
                .iter()
                .filter(|f| inside(&f.path))
                .cloned()
                .collect();
            (!files.is_empty()).then_some(Values {
                rules: v.rules,
                files,
            })
        });
        Some(Manifest {
            totals: Totals::of(&files, directories.len(), self.totals.volume_bytes),
            repos: chosen.iter().map(|&i| self.repos[i].clone()).collect(),
            warnings: self
                .warnings
                .iter()
                .filter(|w| inside(&w.path))
                .cloned()
                .collect(),
            values,
            files,
            directories,
            ..self.clone_header()
        })
    }

    /// The manifest's scalar fields and volumes, with empty lists.
    fn clone_header(&self) -> Manifest {
        Manifest {
            format: self.format.clone(),
            format_version: self.format_version,
            name: self.name.clone(),
            version: self.version,
            created: self.created.clone(),
            tool: self.tool.clone(),
            compression: self.compression.clone(),
            stream: self.stream.clone(),
            chunk_size: self.chunk_size,
            volumes: self.volumes.clone(),
            directories: Vec::new(),
            files: Vec::new(),
            totals: self.totals.clone(),
            warnings: Vec::new(),
            source: None,
            repos: Vec::new(),
            dir: None,
            base: None,
            parity: None,
            trust_update: None,
            values: None,
            oms: None,
        }
    }
}

/// The rules of FORMAT.md section 14.1 for a `source` object (`what` names it in messages), its
/// etags one per file of `files` (path and sha256), in order: every field becomes a name in a
/// Hugging Face cache on install, so each must be one huggingface_hub itself would write.
fn validate_source<'a>(
    src: &HfSource,
    part: Part,
    files: impl ExactSizeIterator<Item = (&'a String, &'a String)>,
) -> Result<(), ManifestError> {
    let name = |field| move |why| ManifestError::SourceName { part, field, why };
    names::check_repo_id(&src.repo_id).map_err(name("repo_id"))?;
    names::check_repo_type(&src.repo_type).map_err(name("repo_type"))?;
    if !names::is_commit(&src.commit) {
        return Err(ManifestError::SourceCommit {
            part,
            commit: src.commit.clone(),
        });
    }
    if !names::is_commit(&src.revision) {
        names::check_revision(&src.revision).map_err(name("revision"))?;
    }
    if src.etags.len() != files.len() {
        return Err(ManifestError::EtagCount(part));
    }
    for (etag, (path, sha256)) in src.etags.iter().zip(files) {
        match names::EtagKind::of(etag) {
            None => {
                return Err(ManifestError::MalformedEtag(path.clone()));
            }
            Some(names::EtagKind::Sha256) if etag != sha256 => {
                return Err(ManifestError::EtagNotSha256 {
                    path: path.clone(),
                    etag: etag.clone(),
                });
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// The stream path of the patch of file `index` (docs/FORMAT.md section 16.2).
pub fn patch_path(index: usize) -> String {
    format!("{DELTA_DIR}/{index}")
}

/// Why a delta's shape does not match its base's ([`Manifest::check_repos_base`], FORMAT.md
/// section 14.4: a delta keeps the shape of its base).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShapeMismatch {
    /// A delta of one model against a base of several repositories.
    OneAgainstSeveral,
    /// A delta of several repositories against a base of one model.
    SeveralAgainstOne,
}

impl fmt::Display for ShapeMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::OneAgainstSeveral => {
                "is a delta of one model against a base of several repositories: a delta keeps the shape of its base"
            }
            Self::SeveralAgainstOne => {
                "is a delta of several repositories against a base of one model: a delta keeps the shape of its base"
            }
        })
    }
}

/// Why `unpack --repo` names no part of the bundle ([`Manifest::choose_repos`]): a usage
/// error, the operator asked for a part the bundle does not have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChooseError {
    /// The bundle carries one model, not several repositories.
    OneModel,
    /// No repository of the bundle has that name; `carried` lists them.
    NoSuch { name: String, carried: String },
    /// The name fits `count` repositories (one id, several types).
    Ambiguous {
        name: String,
        count: usize,
        carried: String,
    },
}

impl fmt::Display for ChooseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::OneModel => f.write_str(
                "--repo picks repositories of a bundle of several (FORMAT.md section 14.4); this bundle carries one model: leave --repo out",
            ),
            Self::NoSuch { name, carried } => write!(
                f,
                "--repo {name:?}: the bundle carries no such repository; it carries {carried}"
            ),
            Self::Ambiguous {
                name,
                count,
                carried,
            } => write!(
                f,
                "--repo {name:?} names {count} repositories of the bundle; name one as TYPE:ORG/NAME: {carried}"
            ),
        }
    }
}

/// Checks a bundle name: printable, 1 to 200 bytes of UTF-8.
pub fn check_name(name: &str) -> Result<(), ManifestError> {
    if name.is_empty() || name.len() > 200 || name.chars().any(|c| c.is_control()) {
        return Err(ManifestError::Name(name.to_string()));
    }
    Ok(())
}

/// The most bytes a free-text field holds (rule 14).
pub const MAX_FREE_TEXT: usize = 4096;

/// Free text that reaches a terminal must not carry control characters (escape sequences).
fn check_text(what: &'static str, text: &str) -> Result<(), ManifestError> {
    if text.len() > MAX_FREE_TEXT || text.chars().any(|c| c.is_control()) {
        return Err(ManifestError::Text(what));
    }
    Ok(())
}

/// The trusted comment airlock signs alongside the manifest.
pub fn trusted_comment(name: &str, version: u64, manifest_sha256: &str) -> String {
    format!("airlock manifest_sha256={manifest_sha256} version={version} name={name}")
}

/// Fields parsed back out of a trusted comment written by [`trusted_comment`].
#[derive(Debug, PartialEq, Eq)]
pub struct TrustedComment {
    /// SHA-256 of the manifest bytes.
    pub manifest_sha256: String,
    /// Bundle version.
    pub version: u64,
    /// Bundle name.
    pub name: String,
}

/// Parses a trusted comment; `None` if it is not in airlock's form.
pub fn parse_trusted_comment(text: &str) -> Option<TrustedComment> {
    let rest = text.strip_prefix("airlock manifest_sha256=")?;
    let (sha, rest) = rest.split_once(" version=")?;
    let (version, name) = rest.split_once(" name=")?;
    Some(TrustedComment {
        manifest_sha256: sha.to_string(),
        version: version.parse().ok()?,
        name: name.to_string(),
    })
}

/// The rules of FORMAT.md section 18.1 for `trust_update`.
fn validate_trust_update(t: &TrustUpdate) -> Result<(), ManifestError> {
    if t.roots.is_empty() || t.roots.len() > MAX_CARRIED_ROOTS {
        return Err(ManifestError::CarriedRootCount(t.roots.len()));
    }
    for (i, r) in t.roots.iter().enumerate() {
        if r.version == 0 || r.version == u64::MAX {
            return Err(ManifestError::CarriedRootVersion(r.version));
        }
        if i > 0 && r.version != t.roots[i - 1].version + 1 {
            return Err(ManifestError::CarriedRootsGap);
        }
        if r.size == 0 || r.size > MAX_ROOT_FILE_BYTES {
            return Err(ManifestError::CarriedRootSize(r.size));
        }
        if !is_sha256(&r.sha256) {
            return Err(ManifestError::Malformed("trust_update sha256"));
        }
    }
    Ok(())
}

/// Formats seconds since the epoch as RFC 3339 UTC.
pub fn rfc3339(secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Where each parity unit lives, from the volume sizes (FORMAT.md section 17.2).
pub mod units;

mod sign;
pub use sign::{Signed, sign, sign_hashed};

#[cfg(test)]
mod tests;

#[cfg(test)]
mod rules_tests;

#[cfg(test)]
mod delta_tests;

#[cfg(test)]
mod repos_tests;
