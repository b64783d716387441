//! The progress callbacks the library reports through; the binary decides how to show them.

/// Receives progress from long operations. Implementations must be cheap: `advance` is called
/// for every buffer (about every megabyte).
pub trait Progress: Sync {
    /// A phase starts with `total` bytes of work.
    fn start(&self, _phase: Phase, _total: u64) {}
    /// `bytes` more are done.
    fn advance(&self, _bytes: u64) {}
    /// Work moved on to this file or volume.
    fn item(&self, _name: &str) {}
    /// The phase ended.
    fn finish(&self) {}
    /// A line for the operator about how the work goes (a resumed install says what it kept
    /// and where it reads from).
    fn note(&self, _line: &str) {}
    /// Volumes are on none of the directories given (a bundle spread over several media, one
    /// drive for them all): ask for the medium that holds the first of them. `true` when the
    /// operator says it is in place (the directories are looked at again), `false` to stop
    /// (the default: nobody to ask, so what is missing fails at once).
    fn ask_for_medium(&self, _request: &MediumRequest<'_>) -> bool {
        false
    }
}

/// A phase of a long operation, as the library names it; a display may name it the operator's
/// way (`airlock unpack` calls [`Phase::Stream`] "unpack"). [`Phase::name`] (and `Display`) is
/// the library's word for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Reading the model and writing the volumes (`pack`).
    Pack,
    /// Encoding a delta against its base (`pack --base`).
    Delta,
    /// Writing the parity volumes.
    Parity,
    /// Checking the volumes at rest: sizes and signed digests.
    VerifyVolumes,
    /// Checking the parity volumes at rest.
    VerifyParityVolumes,
    /// Reading the bundle's stream, every file checked (`unpack`, `verify --deep`).
    Stream,
    /// Fetching the files from a registry.
    Download,
    /// Hashing files: a tree against its receipt, or against an OMS signature.
    Hash,
    /// Comparing a tree's sizes with its receipt (`check --sizes-only`).
    Sizes,
    /// Proving what an interrupted install staged, or what a target already holds.
    Prove,
    /// Checking the blobs a Hugging Face cache already holds before an install.
    CheckExistingBlobs,
    /// Checking every blob of a Hugging Face cache against its name.
    CheckBlobs,
    /// The value scan of model files read on their own.
    ScanValues,
    /// Writing medium N of a `copy` (from 1).
    CopyToMedium(usize),
    /// Reading medium N back from the device.
    ReadBackMedium(usize),
}

impl Phase {
    /// The library's word for the phase (`verify volumes`, `copy to medium 2`).
    pub fn name(self) -> String {
        match self {
            Phase::Pack => "pack".into(),
            Phase::Delta => "delta".into(),
            Phase::Parity => "parity".into(),
            Phase::VerifyVolumes => "verify volumes".into(),
            Phase::VerifyParityVolumes => "verify parity volumes".into(),
            Phase::Stream => "stream".into(),
            Phase::Download => "download".into(),
            Phase::Hash => "hash".into(),
            Phase::Sizes => "sizes".into(),
            Phase::Prove => "prove".into(),
            Phase::CheckExistingBlobs => "check existing blobs".into(),
            Phase::CheckBlobs => "check blobs".into(),
            Phase::ScanValues => "scan values".into(),
            Phase::CopyToMedium(n) => format!("copy to medium {n}"),
            Phase::ReadBackMedium(n) => format!("read back medium {n}"),
        }
    }
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name())
    }
}

/// What [`Progress::ask_for_medium`] asks for.
#[derive(Debug)]
pub struct MediumRequest<'a> {
    /// The volumes on none of the directories, in order.
    pub missing: &'a [String],
    /// Which medium holds the first of them ("medium 2 of 3"), when the media say.
    pub hint: Option<String>,
    /// The directories looked in.
    pub looked_in: &'a [std::path::PathBuf],
    /// Why the last answer brought none of them (the medium held another bundle).
    pub complaint: Option<String>,
}

/// Reports nothing.
pub struct Silent;

impl Progress for Silent {}
