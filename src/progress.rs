//! The progress callbacks the library reports through; the binary decides how to show them.

/// Receives progress from long operations. Implementations must be cheap: `advance` is called
/// for every buffer (about every megabyte).
pub trait Progress: Sync {
    /// A phase starts with `total` bytes of work.
    fn start(&self, _phase: &str, _total: u64) {}
    /// `bytes` more are done.
    fn advance(&self, _bytes: u64) {}
    /// Work moved on to this file or volume.
    fn item(&self, _name: &str) {}
    /// The phase ended.
    fn finish(&self) {}
    /// Volumes are on none of the directories given (a bundle spread over several media, one
    /// drive for them all): ask for the medium that holds the first of them. `true` when the
    /// operator says it is in place (the directories are looked at again), `false` to stop
    /// (the default: nobody to ask, so what is missing fails at once).
    fn ask_for_medium(&self, _request: &MediumRequest<'_>) -> bool {
        false
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
