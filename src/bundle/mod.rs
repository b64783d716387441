//! Bundles on disk: writing (`write`: tar → zstd → volumes) and reading, split by concept:
//! `open` (the signature and the manifest), `volumes` (each volume's size and digests, stray
//! files, the volume-reading thread) and `stream` (volumes → zstd → cap → tar → entry checks →
//! a sink). The verdict that combines them is `crate::verify`.

pub mod open;
pub mod parity_write;
pub mod stream;
pub mod volumes;
pub mod write;

/// The reading API under the module path it had before the split (`bundle::read::open`,
/// `bundle::read::verify_signed`, `bundle::read::stream`, ...), so callers can move over one at
/// a time.
pub mod read {
    pub use super::open::{
        Opened, Signed, TrustInfo, is_cosignature_name, open, read_unverified, verify_signed,
        verify_signed_with,
    };
    pub use super::stream::{EntrySink, Mode, NullSink, StreamReport, stream};
    pub use super::volumes::{VolumeProblem, is_volume_like};
}
