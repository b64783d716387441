//! The source for a bundle on disk (removable media, or several media holding its volumes):
//! its volumes → zstd → tar → the verifier ([`crate::bundle::stream`]), beside the registry
//! source ([`super::registry`]).

use crate::bundle::open::{BundleDir, Opened};
use crate::bundle::stream::{self, StreamReport};
use crate::entries::{EntrySink, Mode};
use crate::error::Result;
use crate::pipeline::{Fed, Source};
use crate::progress::Progress;

/// A bundle on disk (removable media): its volumes → zstd → tar, in strict mode (the first
/// problem stops it; damaged volumes are rebuilt from parity where it can).
pub struct BundleOnDisk<'a>(pub &'a BundleDir);

impl Source for BundleOnDisk<'_> {
    fn opened(&self) -> &Opened {
        &self.0.opened
    }
    fn complete(&self) -> bool {
        self.0.manifest.base.is_none()
    }
    fn feed(&self, sink: &mut dyn EntrySink, progress: &dyn Progress) -> Result<Fed> {
        self.feed_from(sink, progress, 0)
    }
    fn start_at(&self, wanted: usize) -> usize {
        // A compressed payload is one zstd frame (FORMAT.md section 5): it can only be
        // decoded from its start. A stored one starts at any entry's header.
        if self.0.manifest.compression.algorithm == "none" {
            wanted
        } else {
            0
        }
    }
    fn reads_from(&self, start: usize) -> String {
        if start == 0 {
            if self.0.manifest.compression.algorithm == "none" {
                ", reading from the start".to_string()
            } else {
                ", reading the stream from its start (a zstd stream is one frame: the kept files' bytes are read and dropped)".to_string()
            }
        } else {
            match stream::resume_volume(&self.0.manifest, start) {
                Some((volume, offset)) => {
                    format!(", reading from volume {volume} at byte {offset}")
                }
                None => String::new(),
            }
        }
    }
    fn feed_from(
        &self,
        sink: &mut dyn EntrySink,
        progress: &dyn Progress,
        start: usize,
    ) -> Result<Fed> {
        let StreamReport {
            repaired,
            started_at,
            ..
        } = stream::stream_from(self.0, Mode::Strict, sink, progress, start)?;
        Ok(Fed {
            repaired_volumes: repaired,
            started_at,
        })
    }
}
