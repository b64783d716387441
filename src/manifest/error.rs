//! Why a manifest breaks the format ([`super::Manifest::parse`], [`super::Manifest::validate`]):
//! one variant per rule of docs/FORMAT.md a manifest can break, so a caller or a test matches
//! the rule, not the words. The `Display` of each is the text the user reads after the
//! manifest's path (`Error::BadManifest`), unchanged from when these were strings: it follows
//! "manifest.json" as a predicate ("has ...", "lists ...").

use crate::hfcache::names::CacheNameError;
use crate::parity::ParityError;
use crate::paths::PathError;

use super::{
    DELTA_DIR, FORMAT_ID, FORMAT_VERSION, MAX_CARRIED_ROOTS, MAX_FREE_TEXT, MAX_MANIFEST_BYTES,
    MAX_OMS_SIGNATURE_BYTES, MAX_REPOS, MAX_ROOT_FILE_BYTES, OLDEST_FORMAT_VERSION,
    OMS_SIGNATURE_NAME, OMS_SIGNATURE_NAME_BESIDE_PUBLISHER,
};

/// A part of the manifest that only format version 2 has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Extension {
    /// `oms` (section 19).
    Oms,
    /// `parity` (section 17).
    Parity,
    /// `trust_update` (section 18).
    TrustUpdate,
    /// `base` (section 16).
    Base,
    /// `repos` (section 14.4).
    Repos,
    /// `values` (section 20).
    Values,
}

impl std::fmt::Display for Extension {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Oms => "oms, which needs",
            Self::Parity => "parity, which needs",
            Self::TrustUpdate => "trust_update, which needs",
            Self::Base => "a base, which needs",
            Self::Repos => "repos, which need",
            Self::Values => "values, which need",
        })
    }
}

/// Which `source` object a rule of section 14.1 is about: the bundle's, or a repository's of a
/// bundle of several.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// `source`.
    Source,
    /// `repos[i].source`.
    Repo(usize),
}

impl std::fmt::Display for Part {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Source => f.write_str("source"),
            Self::Repo(i) => write!(f, "repos[{i}].source"),
        }
    }
}

/// The rule of docs/FORMAT.md a manifest breaks.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    // Reading.
    /// Larger than [`MAX_MANIFEST_BYTES`].
    #[error("is larger than {MAX_MANIFEST_BYTES} bytes")]
    TooLarge,
    /// Not JSON of the manifest's shape (an unknown field, a `null`, a wrong type).
    #[error("is not a valid manifest: {0}")]
    Json(#[source] serde_json::Error),

    // The header (section 7.1).
    /// `format` is not [`FORMAT_ID`].
    #[error("has format {0:?}, not {FORMAT_ID:?}")]
    Format(String),
    /// A format version this build does not read.
    #[error(
        "has format version {0}, this airlock reads versions {OLDEST_FORMAT_VERSION} to {FORMAT_VERSION}"
    )]
    FormatVersion(u32),
    /// A part only format version 2 has, in a version 1 manifest.
    #[error("has {0} format version 2")]
    NeedsVersion2(Extension),
    /// The bundle name is empty, over 200 bytes or holds a control character.
    #[error(
        "has the bundle name {0:?}; a name is 1 to 200 bytes of UTF-8 without control characters"
    )]
    Name(String),
    /// A free-text field (named) holds a control character or more than [`MAX_FREE_TEXT`]
    /// bytes.
    #[error("has a {0} field with control characters or over {MAX_FREE_TEXT} bytes")]
    Text(&'static str),
    /// An unknown compression (or `none` with a level).
    #[error("names an unknown compression {0:?}")]
    Compression(String),
    /// A digest field (named) that is not a well-formed SHA-256.
    #[error("has a malformed {0}")]
    Malformed(&'static str),

    // Volumes (section 7.2).
    /// The chunk size is not a power of two from 4 KiB to 1 GiB.
    #[error("has an invalid chunk_size {0}")]
    ChunkSize(u64),
    /// No data volume.
    #[error("lists no volumes")]
    NoVolumes,
    /// Data volume `number` (from 1) is not named `expected`.
    #[error("names volume {number} {name:?}, expected {expected:?}")]
    VolumeName {
        /// Its place, from 1.
        number: usize,
        /// Its name.
        name: String,
        /// The name its place gives it.
        expected: String,
    },
    /// A data volume of size 0.
    #[error("lists volume {0} with size 0")]
    VolumeEmpty(String),
    /// A version 1 data volume without its `sha256`.
    #[error("lists volume {0} without the sha256 format version 1 requires")]
    VolumeWithoutSha256(String),
    /// A version 2 data volume with a `sha256`.
    #[error(
        "lists volume {0} with a sha256, which format version 2 does not have (the chunk digests are the authority)"
    )]
    VolumeWithSha256(String),
    /// A malformed digest of a volume (data or parity).
    #[error("has a malformed sha256 for volume {0}")]
    MalformedVolumeDigest(String),
    /// A data volume with the wrong number of chunk digests for its size.
    #[error("lists {listed} chunk digests for volume {name}, its size needs {needed}")]
    ChunkCount {
        /// The volume.
        name: String,
        /// Digests listed.
        listed: usize,
        /// Digests its size needs.
        needed: u64,
    },
    /// The volume sizes overflow a u64.
    #[error("has volume sizes that overflow")]
    VolumeSizesOverflow,
    /// `totals.volume_bytes` is not the sum of the volume sizes.
    #[error("says the volumes total {declared} bytes but lists {listed}")]
    VolumeTotal {
        /// `totals.volume_bytes`.
        declared: u64,
        /// The sum of the sizes.
        listed: u64,
    },

    // Entries (sections 4 and 7.3).
    /// A directory or file path that breaks the path rule.
    #[error("lists the unsafe path {path:?}: it {why}")]
    UnsafePath {
        /// The path.
        path: String,
        /// The rule it breaks.
        why: PathError,
    },
    /// A directory out of bundle order, or listed twice.
    #[error("lists directory {0:?} out of order or twice")]
    DirectoryOrder(String),
    /// A file out of bundle order, or listed twice.
    #[error("lists file {0:?} out of order or twice")]
    FileOrder(String),
    /// One path listed as a file and as a directory.
    #[error("lists {0:?} as both a file and a directory")]
    FileAndDirectory(String),
    /// A file whose `sha256` is malformed.
    #[error("has a malformed sha256 for {0:?}")]
    MalformedFileDigest(String),
    /// The file sizes (or the stream they make) overflow a u64.
    #[error("has file sizes that overflow")]
    FileSizesOverflow,
    /// The directory entries overflow the stream size.
    #[error("has directory entries that overflow")]
    DirectoryEntriesOverflow,
    /// Two paths that one case-insensitive or normalising filesystem holds as one.
    #[error(
        "lists {path:?} and {earlier:?}, which are the same name on a case-insensitive or normalising filesystem"
    )]
    Collision {
        /// The later path.
        path: String,
        /// The earlier one it folds to.
        earlier: String,
    },
    /// A path whose parent directory is not listed.
    #[error("lists {path:?} without its directory {parent:?}")]
    MissingParent {
        /// The path.
        path: String,
        /// Its parent.
        parent: String,
    },
    /// `totals` disagree with the lists.
    #[error("has totals that disagree with its lists")]
    Totals,
    /// `stream.size` is not what the entries make.
    #[error("declares a tar stream of {declared} bytes, its entries make {made}")]
    StreamSize {
        /// `stream.size`.
        declared: u64,
        /// What the entries make.
        made: u64,
    },
    /// An uncompressed bundle whose volumes do not hold exactly the stream.
    #[error("is uncompressed but its volumes hold {volume_bytes} bytes for a {stream}-byte stream")]
    UncompressedSize {
        /// The volumes' total.
        volume_bytes: u64,
        /// `stream.size`.
        stream: u64,
    },

    // A delta (section 16.1).
    /// A model path that uses the reserved [`DELTA_DIR`].
    #[error(
        "lists the path {0:?}: the name {DELTA_DIR:?} is reserved for the patches of a delta bundle"
    )]
    ReservedPath(String),
    /// The base has another name.
    #[error("is a delta of {base:?}, not of its own name {name:?}")]
    BaseName {
        /// `base.name`.
        base: String,
        /// `name`.
        name: String,
    },
    /// The base is not an earlier version.
    #[error(
        "is version {version} but a delta of version {base}: a base must be an earlier version"
    )]
    BaseVersion {
        /// `version`.
        version: u64,
        /// `base.version`.
        base: u64,
    },
    /// A file taken from a base the manifest does not name.
    #[error("says {0:?} comes from a base file, but names no base")]
    FromWithoutBase(String),
    /// A file taken from a base path that breaks the path rule.
    #[error("takes {path:?} from the unsafe base path {from:?}: it {why}")]
    UnsafeBasePath {
        /// The file.
        path: String,
        /// `from.path`.
        from: String,
        /// The rule it breaks.
        why: PathError,
    },
    /// A file taken from a base path that uses the reserved [`DELTA_DIR`].
    #[error(
        "takes {path:?} from the base path {from:?}: the name {DELTA_DIR:?} is reserved for the patches of a delta bundle"
    )]
    ReservedBasePath {
        /// The file.
        path: String,
        /// `from.path`.
        from: String,
    },
    /// A `copy` that also has a map or a patch.
    #[error("copies {0:?} from the base but also gives it a map or a patch")]
    CopyWithPatch(String),
    /// An `xor` without a known map.
    #[error("patches {0:?} without a map of \"bytes\" or \"safetensors\"")]
    PatchMap(String),
    /// An `xor` without its patch's size and digest.
    #[error("patches {0:?} without a patch_size and a well-formed patch_sha256")]
    PatchDigest(String),
    /// A `from` with an op other than `copy` and `xor`.
    #[error("takes {path:?} from the base with the unknown op {op:?}")]
    UnknownOp {
        /// The file.
        path: String,
        /// The op.
        op: String,
    },

    // Repositories and the directory beside them (section 14.4).
    /// Too few or too many repositories.
    #[error(
        "lists {count} repos ({least} to {MAX_REPOS} allowed; a bundle of one repository has source)"
    )]
    RepoCount {
        /// Listed.
        count: usize,
        /// The fewest allowed (1 beside a `dir`, else 2).
        least: usize,
    },
    /// `dir` in a delta.
    #[error("has dir and a base: a delta of a directory and repositories does not exist")]
    DirWithBase,
    /// A `dir.path` that is not one component outside the cache folders' forms.
    #[error("has a dir.path {0:?} that is not one path component outside the cache folders' forms")]
    DirPath(String),
    /// A `dir` whose directory is not listed.
    #[error("lists the dir {0:?} but not its directory")]
    DirWithoutDirectory(String),
    /// A `dir` with no file under it.
    #[error("lists the dir {0:?} with no file under it")]
    DirEmpty(String),
    /// Both `source` and `repos`.
    #[error("has both source and repos")]
    SourceAndRepos,
    /// A repository under another folder than its name gives.
    #[error(
        "lists the repository {repo_id:?} of type {repo_type:?} under {path:?}, not under its folder name {expected:?}"
    )]
    RepoFolder {
        /// Its id.
        repo_id: String,
        /// Its type.
        repo_type: String,
        /// `path`.
        path: String,
        /// The folder its type and id give.
        expected: String,
    },
    /// A repository out of bundle order, or listed twice.
    #[error("lists repository {0:?} out of order or twice")]
    RepoOrder(String),
    /// A repository whose directory is not listed.
    #[error("lists the repository {repo_id:?} but not its directory {path:?}")]
    RepoWithoutDirectory {
        /// Its id.
        repo_id: String,
        /// Its directory.
        path: String,
    },
    /// A path in no repository's directory nor the `dir`.
    #[error("lists {0:?}, which is in none of its repositories' directories nor its dir")]
    OutsideRepos(String),
    /// A repository with no file.
    #[error("lists the repository {repo_id:?} with no file under {path:?}")]
    RepoEmpty {
        /// Its id.
        repo_id: String,
        /// Its directory.
        path: String,
    },
    /// A file of a delta of several repositories taken from another repository's file.
    #[error(
        "takes {path:?} from the base file {from:?}, which is not in the same repository {repo:?}"
    )]
    CrossRepoFrom {
        /// The file.
        path: String,
        /// `from.path`.
        from: String,
        /// The file's repository directory.
        repo: String,
    },

    // A source (section 14.1).
    /// A `repo_id`, `repo_type` or `revision` (the field) the cache cannot hold.
    #[error("has a {part}.{field}: {why}")]
    SourceName {
        /// Which source.
        part: Part,
        /// `repo_id`, `repo_type` or `revision`.
        field: &'static str,
        /// The cache's rule it breaks.
        why: CacheNameError,
    },
    /// A `commit` that is not 40 hex digits.
    #[error("has a {part}.commit {commit:?} that is not 40 hex digits")]
    SourceCommit {
        /// Which source.
        part: Part,
        /// The commit.
        commit: String,
    },
    /// Not one etag per file.
    #[error("lists a different number of etags in {0} than files")]
    EtagCount(Part),
    /// A malformed etag, of the file named.
    #[error("has a malformed etag for {0:?} (40 or 64 lowercase hex digits expected)")]
    MalformedEtag(String),
    /// A SHA-256 etag that is not the file's SHA-256.
    #[error("gives {path:?} the sha256 etag {etag}, which is not its sha256")]
    EtagNotSha256 {
        /// The file.
        path: String,
        /// The etag.
        etag: String,
    },

    // Parity (section 17).
    /// An algorithm other than the one parity code.
    #[error("names an unknown parity algorithm {0:?}")]
    ParityAlgorithm(String),
    /// A geometry that breaks a rule of section 17.1.
    #[error("has {0}")]
    ParityGeometry(ParityError),
    /// `stripes` is not what the geometry makes.
    #[error("says parity has {declared} stripes, its geometry makes {made}")]
    ParityStripes {
        /// `stripes`.
        declared: u64,
        /// What the geometry makes.
        made: u64,
    },
    /// Parity without parity volumes.
    #[error("has parity without parity volumes")]
    NoParityVolumes,
    /// Parity volume `number` (from 1) is not named `expected`.
    #[error("names parity volume {number} {name:?}, expected {expected:?}")]
    ParityVolumeName {
        /// Its place, from 1.
        number: usize,
        /// Its name.
        name: String,
        /// The name its place gives it.
        expected: String,
    },
    /// A parity volume whose size is not a positive multiple of the chunk size.
    #[error(
        "lists parity volume {name} with size {size}, not a positive multiple of the chunk size"
    )]
    ParityVolumeSize {
        /// The volume.
        name: String,
        /// Its size.
        size: u64,
    },
    /// A parity volume with a `sha256`.
    #[error("lists parity volume {0} with a sha256")]
    ParityVolumeWithSha256(String),
    /// A parity volume with the wrong number of chunk digests for its size.
    #[error("lists {listed} chunk digests for parity volume {name}, its size needs {needed}")]
    ParityChunkCount {
        /// The volume.
        name: String,
        /// Digests listed.
        listed: usize,
        /// Digests its size needs.
        needed: u64,
    },
    /// The parity volumes do not hold the recovery units the geometry makes.
    #[error("lists {listed} recovery units in its parity volumes, its geometry makes {made}")]
    RecoveryUnits {
        /// Units listed.
        listed: u64,
        /// What the geometry makes.
        made: u64,
    },

    // Carried trust roots (section 18).
    /// No root, or more than [`MAX_CARRIED_ROOTS`].
    #[error("has a trust_update with {0} roots (1 to {MAX_CARRIED_ROOTS} allowed)")]
    CarriedRootCount(usize),
    /// A root of version 0 or `u64::MAX`.
    #[error("has a trust_update root of version {0}")]
    CarriedRootVersion(u64),
    /// Root versions that are not consecutive.
    #[error("has trust_update roots whose versions do not follow one another")]
    CarriedRootsGap,
    /// A root file of 0 bytes or more than [`MAX_ROOT_FILE_BYTES`].
    #[error("has a trust_update root of {0} bytes (1 to {MAX_ROOT_FILE_BYTES} allowed)")]
    CarriedRootSize(u64),

    // OMS (section 19.1).
    /// An empty `oms` object.
    #[error("has an empty oms object")]
    EmptyOms,
    /// The OMS signature under a name other than the two it may have.
    #[error(
        "names the OMS signature {0:?} (only {OMS_SIGNATURE_NAME:?} or {OMS_SIGNATURE_NAME_BESIDE_PUBLISHER:?})"
    )]
    OmsSignatureName(String),
    /// The OMS signature under the name of a top-level entry of the model.
    #[error("names the OMS signature {name:?}, the name of the model's own {path:?}")]
    OmsSignatureTaken {
        /// The signature's name.
        name: String,
        /// The model's entry.
        path: String,
    },
    /// An OMS signature of 0 bytes or more than [`MAX_OMS_SIGNATURE_BYTES`].
    #[error("has an OMS signature of {0} bytes (1 to {MAX_OMS_SIGNATURE_BYTES} allowed)")]
    OmsSignatureSize(u64),
    /// The publisher's signature is not a file of the bundle.
    #[error("says the publisher's OMS signature is {0:?}, which is not a file of the bundle")]
    PublisherSignatureMissing(String),
    /// An OMS method other than `key` and `certificate`.
    #[error("names the OMS method {0:?} (key or certificate)")]
    OmsMethod(String),

    // Values (section 20).
    /// `values.rules` is 0.
    #[error("has values made by rules 0")]
    ValuesRulesZero,
    /// `values.files` is empty.
    #[error("has values for no file")]
    ValuesEmpty,
    /// Values for a path that is not a file, or out of order, or twice.
    #[error("has values for {0:?}, which is not a file it lists, or out of order or twice")]
    ValuesPath(String),
    /// Values in a format the scan does not have.
    #[error("has values for {path:?} in the unknown format {format:?}")]
    ValuesFormat {
        /// The file.
        path: String,
        /// The format.
        format: String,
    },
    /// Counts that do not add up.
    #[error(
        "has values for {0:?} that count more checked, all-zero or constant tensors than it has"
    )]
    ValuesCounts(String),
}
