//! Where the volume bytes come from: [`VolumeSource`], and [`DirVolumes`], the volumes of a
//! bundle directory or of a bundle spread over several media.

use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::at_rest::*;
use crate::bundle::open::BundleDir;
use crate::fsio::{Follow, MediumFile, MediumRead, open_medium};
use crate::parity;
use crate::progress::Progress;

/// Buffers in flight between the volume-reading thread and the stream's consumer.
pub(in crate::bundle) const STREAM_BUFFERS: usize = 8;
/// Size of each of them.
pub(in crate::bundle) const STREAM_BUFFER_SIZE: usize = 1 << 20;

/// Where the volume reader gets each volume's bytes: the bundle directory, or (for the fuzz
/// target) memory.
pub trait VolumeSource: Sync {
    /// Opens the volume called `name`, the `index`-th (0-based) of the manifest. A volume that
    /// does not exist is an error of kind `NotFound`.
    fn open(&self, index: usize, name: &str) -> io::Result<Box<dyn Read + Send + '_>>;
    /// [`VolumeSource::open`], reading from byte `pos` on (a resumed stream). The default reads
    /// the first `pos` bytes and drops them.
    fn open_at(&self, index: usize, name: &str, pos: u64) -> io::Result<Box<dyn Read + Send + '_>> {
        let mut r = self.open(index, name)?;
        io::copy(&mut (&mut r).take(pos), &mut io::sink())?;
        Ok(r)
    }
    /// The path that errors about the volume name.
    fn path(&self, name: &str) -> PathBuf;
    /// What the report says of a volume that is not there ("is missing", and where it is when
    /// the media say).
    fn missing(&self, _name: &str) -> (String, Option<String>) {
        ("is missing".to_string(), None)
    }
    /// Fills `buf` from the volume (data or parity) called `name` at `offset`; a volume that is
    /// missing or too short is an error. Only needed for bundles with parity, which are read
    /// unit by unit (FORMAT.md section 17.3).
    fn read_at(&self, name: &str, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let _ = (name, offset, buf);
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "this volume source has no random access",
        ))
    }
    /// The largest parity unit the reader holds in memory, to read it once (FORMAT.md 17.3);
    /// larger units are read twice, hashed and then streamed. The tests lower it to read the
    /// second way.
    fn unit_memory(&self) -> u64 {
        parity::MAX_UNIT_SIZE
    }
}

/// The volumes of a bundle directory, or of a bundle spread over several media. Each is opened
/// without blocking and must be a regular file: a FIFO or device planted as a volume must not
/// hang or feed the reader. Its bytes are read from the medium, not the page cache, where the
/// media ask for it ([`crate::fsio::MediumFile`]). A volume read at random (`read_at`, unit by
/// unit) is opened once and kept open.
pub struct DirVolumes<'a> {
    place: Place<'a>,
    opened: std::sync::Mutex<std::collections::HashMap<String, std::sync::Arc<std::fs::File>>>,
}

/// Where [`DirVolumes`] finds the volumes.
pub(super) enum Place<'a> {
    /// One directory (another copy `repair` takes chunks from), its cached pages dropped when
    /// a volume is opened: read from the medium at no cost.
    Dir(&'a Path),
    /// The media of an opened bundle, with whom to ask for a missing medium.
    Media(&'a crate::bundle::media::Media, &'a dyn Progress),
}

impl<'a> DirVolumes<'a> {
    /// The volumes in `dir`.
    pub fn new(dir: &'a Path) -> Self {
        DirVolumes {
            place: Place::Dir(dir),
            opened: Default::default(),
        }
    }

    /// The volumes of `opened`, in whichever of its directories holds each, read as its media
    /// say; a volume held by none is asked for through `progress` before it is missing.
    pub fn of(opened: &'a BundleDir, progress: &'a dyn Progress) -> Self {
        DirVolumes {
            place: Place::Media(&opened.media, progress),
            opened: Default::default(),
        }
    }

    /// Records how volume `name` is read, for the report.
    fn record(&self, name: &str, path: &Path, f: &MediumFile) {
        if let Place::Media(media, _) = &self.place {
            media.record_read(name, path, f);
        }
    }

    /// Opens volume `name` as [`open_medium`] does, asking for its medium first where none of
    /// the directories holds it.
    fn open_file(&self, name: &str) -> io::Result<(MediumFile, u64, PathBuf)> {
        match &self.place {
            Place::Dir(dir) => {
                let path = dir.join(name);
                let (f, len) = open_medium(&path, Follow::Final, MediumRead::DropCache)?;
                Ok((f, len, path))
            }
            Place::Media(media, progress) => {
                if !media.holds(name) {
                    media.ask_for(&[name.to_string()], *progress);
                }
                let path = media.volume_path(name);
                let (f, len) = open_medium(&path, Follow::Final, media.read())?;
                Ok((f, len, path))
            }
        }
    }
}

impl VolumeSource for DirVolumes<'_> {
    fn open(&self, _index: usize, name: &str) -> io::Result<Box<dyn Read + Send + '_>> {
        self.open_at(_index, name, 0)
    }
    fn open_at(
        &self,
        _index: usize,
        name: &str,
        pos: u64,
    ) -> io::Result<Box<dyn Read + Send + '_>> {
        let (f, _, path) = self.open_file(name)?;
        self.record(name, &path, &f);
        Ok(Box::new(f.into_reader_at(STREAM_BUFFER_SIZE * 4, pos)))
    }
    fn path(&self, name: &str) -> PathBuf {
        match &self.place {
            Place::Dir(dir) => dir.join(name),
            Place::Media(media, _) => media.volume_path(name),
        }
    }
    fn missing(&self, name: &str) -> (String, Option<String>) {
        match &self.place {
            Place::Media(media, _) => missing_from(media, name),
            Place::Dir(_) => ("is missing".to_string(), None),
        }
    }
    fn read_at(&self, name: &str, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let cached = self.opened.lock().expect("not poisoned").get(name).cloned();
        let f = match cached {
            Some(f) => f,
            None => {
                // Unit by unit, the reads are small and at random: the cache is dropped once
                // when the volume is opened, and read through from then on.
                let (f, _, path) = self.open_file(name)?;
                let f = f.into_cached();
                self.record(name, &path, &f);
                let f = std::sync::Arc::new(f.into_file());
                self.opened
                    .lock()
                    .expect("not poisoned")
                    .insert(name.to_string(), f.clone());
                f
            }
        };
        crate::fsio::test_volume_read_delay();
        f.read_exact_at(buf, offset)?;
        crate::fsio::count_volume_read(buf.len() as u64);
        Ok(())
    }
}
