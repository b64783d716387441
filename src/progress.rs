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
    /// A damaged bundle's map, found before the work on it starts (`repair`), for the
    /// operator to see where the damage is while the work goes on.
    fn damage(&self, _map: &crate::bundle::damage::DamageMap) {}
}

/// Reports nothing.
pub struct Silent;

impl Progress for Silent {}
