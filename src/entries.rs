//! The verified entry stream: what every source of a bundle's content produces, what every
//! sink receives, and the one place that holds each entry to the signed manifest.
//!
//! A *source* (the volumes of a bundle on disk, the blobs of a registry artifact) turns what it
//! reads into [`RawEntry`]s and bytes and hands them to a [`Verifier`]. The verifier compares
//! each entry with the next one the signed manifest expects (path, order, type, size, mode),
//! hashes its bytes, and passes it on to an [`EntrySink`] only as far as it has checked it: a
//! file's [`EntrySink::end_file`] comes only after its size and SHA-256 matched. Nothing
//! downstream of a verifier checks content again, and nothing upstream of one is trusted.
//!
//! A sink writes what it is told (a staging directory, a cache's blobs, an upload) and checks
//! nothing about content. [`Tally`] stands in front of the final sink of a pipeline and makes
//! sure that, whatever produced the entries (a stream, or a delta rebuilding files from a
//! base), the sink received exactly the manifest's directories and files, each once.

use std::collections::HashSet;
use std::fs::File;

use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::fsio;
use crate::manifest::{Expected, FileEntry, Manifest};
use crate::progress::Progress;

/// Where a delta's base files are: what a target already holds that an update builds on
/// (`pipeline::Target::base`), read by `delta::apply::DeltaStage`. It lives here, below both,
/// so a target supplies its base without importing the delta stage.
pub trait Base {
    /// The base's signed manifest (the one the delta names by its SHA-256).
    fn manifest(&self) -> &Manifest;

    /// Opens base file `b` to be read from its start; its content is not checked yet (a copy
    /// checks it as it passes).
    fn open(&mut self, b: &FileEntry) -> Result<File>;

    /// The error refusing the delta because of the base as a whole (`reason`), saying where
    /// the base was looked for and what the target needs.
    fn refuse(&self, reason: String) -> Error;

    /// The error for base file `b` whose content is not what the base manifest says (`what`):
    /// rot or a change since it was installed.
    fn rotten(&self, b: &FileEntry, what: String) -> Error;

    /// Opens base file `b` with its content checked against `b`'s size and SHA-256 first (a
    /// patch reads its base at the offsets its alignment gives, so it is hashed whole before
    /// use).
    fn open_checked(&mut self, b: &FileEntry) -> Result<File> {
        let f = self.open(b)?;
        let len = f
            .metadata()
            .map_err(|e| self.rotten(b, format!("cannot be read ({e})")))?
            .len();
        if len != b.size {
            return Err(self.rotten(
                b,
                format!("it has {len} bytes, the manifest says {}", b.size),
            ));
        }
        let digest = fsio::hash_exact(&f, len)
            .map_err(|e| self.rotten(b, format!("cannot be read ({e})")))?;
        if digest != b.sha256 {
            return Err(self.rotten(
                b,
                format!("its sha256 is {digest}, the manifest says {}", b.sha256),
            ));
        }
        Ok(f)
    }
}

/// Receives the verified entries of a bundle, in the order its source produces them: a
/// directory before anything in it.
pub trait EntrySink {
    /// A directory.
    fn dir(&mut self, path: &str) -> Result<()>;
    /// A file begins; its bytes follow through [`EntrySink::data`].
    fn begin_file(&mut self, file: &FileEntry) -> Result<()>;
    /// File content.
    fn data(&mut self, bytes: &[u8]) -> Result<()>;
    /// The file's content ended and matched its signed size and SHA-256.
    fn end_file(&mut self, file: &FileEntry) -> Result<()>;
    /// Whether the sink already holds `file`'s content, so that a producer that would have to
    /// make the content (read it, fetch it, rebuild it) may leave it out: a content-addressed
    /// store that has its blob, a file an interrupted install of this manifest staged and
    /// proved, a file outside the part of the bundle being installed. The one way any source
    /// learns what a target holds: a stream starts after the entries held before its first
    /// one not held, a registry does not fetch them, a delta does not copy or patch them.
    /// Asking changes nothing in the sink; asked through a [`Tally`], a yes counts the file
    /// as delivered. Bytes that arrive anyway (in a stream) are still sent. The default: no.
    fn holds(&mut self, _file: &FileEntry) -> Result<bool> {
        Ok(false)
    }
    /// Whether the sink already has directory `path` (or needs nothing for it), so that a
    /// stream may start after it ([`EntrySink::holds`] for files). The default: no.
    fn holds_dir(&mut self, _path: &str) -> Result<bool> {
        Ok(false)
    }
    /// Begins `file` as a clone of the local file `src` (a reflink: shared extents, no shared
    /// inode) where the sink and the filesystem can, and returns the clone open for reading, so
    /// the caller can hash it before calling [`EntrySink::end_file`]. `None`: no clone was made
    /// and nothing was begun; the caller sends the bytes. The default: `None`.
    fn clone_from(&mut self, _file: &FileEntry, _src: &File) -> Result<Option<File>> {
        Ok(None)
    }
}

/// Discards everything (`verify --deep`).
pub struct NullSink;

impl EntrySink for NullSink {
    fn dir(&mut self, _: &str) -> Result<()> {
        Ok(())
    }
    fn begin_file(&mut self, _: &FileEntry) -> Result<()> {
        Ok(())
    }
    fn data(&mut self, _: &[u8]) -> Result<()> {
        Ok(())
    }
    fn end_file(&mut self, _: &FileEntry) -> Result<()> {
        Ok(())
    }
}

/// How a verifier (and the volume reader under it) treats content mismatches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// The first problem of any kind is an error (unpack, push).
    Strict,
    /// Volume and file digest mismatches are collected and reading goes on (verify --deep);
    /// structural problems still stop it.
    Collect,
}

/// Who is to blame for an entry that is not what the manifest says, so the error tells the
/// operator what to fix.
#[derive(Clone, Copy, Debug)]
pub enum Blame<'a> {
    /// A bundle's tar stream (copy the bundle again).
    Stream,
    /// A registry artifact, by its reference (push the bundle again).
    Registry(&'a str),
}

/// An entry as a source found it: nothing about it is trusted yet.
#[derive(Clone, Copy, Debug)]
pub struct RawEntry<'p> {
    /// Its path, as the source gives it.
    pub path: &'p str,
    /// A directory (`false`: a file).
    pub dir: bool,
    /// A file's size in bytes.
    pub size: u64,
    /// A file's executable bit.
    pub executable: bool,
}

impl<'p> RawEntry<'p> {
    /// The raw form of a manifest entry (a source that takes its entries from the signed
    /// manifest itself, such as a registry).
    pub fn of(e: &Expected<'p>) -> RawEntry<'p> {
        match *e {
            Expected::Dir(path) => RawEntry {
                path,
                dir: true,
                size: 0,
                executable: false,
            },
            Expected::File(f) => RawEntry {
                path: &f.path,
                dir: false,
                size: f.size,
                executable: f.executable,
            },
        }
    }
}

/// A file's bytes counted and hashed against its signed size and SHA-256. The one check of
/// content: the [`Verifier`] uses it for every file of a stream, and a delta for every file it
/// rebuilds or copies from a base.
pub struct FileCheck {
    size: u64,
    sha256: String,
    hash: Sha256,
    got: u64,
}

/// How a file failed its [`FileCheck`].
#[derive(Debug)]
pub enum Mismatch {
    /// More bytes than the signed size (the count so far).
    TooLong(u64),
    /// Fewer bytes than the signed size.
    TooShort(u64),
    /// The right size, another SHA-256 (hex).
    Digest(String),
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Mismatch::TooLong(n) => {
                write!(f, "holds more than its signed size (at least {n} bytes)")
            }
            Mismatch::TooShort(n) => write!(f, "holds {n} bytes, fewer than its signed size"),
            Mismatch::Digest(got) => write!(f, "hashes to sha256 {got}"),
        }
    }
}

impl FileCheck {
    /// Starts checking `file`.
    pub fn new(file: &FileEntry) -> Self {
        FileCheck {
            size: file.size,
            sha256: file.sha256.clone(),
            hash: Sha256::new(),
            got: 0,
        }
    }

    /// Counts and hashes `bytes`; more than the signed size is refused before it is hashed.
    pub fn update(&mut self, bytes: &[u8]) -> std::result::Result<(), Mismatch> {
        let got = self.got + bytes.len() as u64;
        if got > self.size {
            return Err(Mismatch::TooLong(got));
        }
        self.hash.update(bytes);
        self.got = got;
        Ok(())
    }

    /// Whether the bytes were exactly the file's.
    pub fn finish(self) -> std::result::Result<(), Mismatch> {
        if self.got != self.size {
            return Err(Mismatch::TooShort(self.got));
        }
        let digest = hex::encode(self.hash.finalize());
        if digest != self.sha256 {
            return Err(Mismatch::Digest(digest));
        }
        Ok(())
    }
}

/// Holds a source's entries to the list the signed manifest expects, in order, and passes
/// them on to a sink as far as they checked out (module documentation).
pub struct Verifier<'m, 's> {
    expected: Vec<Expected<'m>>,
    next: usize,
    seen: HashSet<&'m str>,
    mode: Mode,
    blame: Blame<'m>,
    current: Option<(&'m FileEntry, FileCheck)>,
    sink: &'s mut dyn EntrySink,
    bad_files: Vec<String>,
    progress: &'s dyn Progress,
}

impl<'m, 's> Verifier<'m, 's> {
    /// A verifier of `expected` (a manifest's [`Manifest::expected_entries`], or for a delta
    /// bundle's stream its [`Manifest::stream_entries`]) feeding `sink`.
    pub fn new(
        expected: Vec<Expected<'m>>,
        mode: Mode,
        blame: Blame<'m>,
        sink: &'s mut dyn EntrySink,
        progress: &'s dyn Progress,
    ) -> Self {
        Verifier {
            expected,
            next: 0,
            seen: HashSet::new(),
            mode,
            blame,
            current: None,
            sink,
            bad_files: Vec::new(),
            progress,
        }
    }

    fn structure(&self, reason: String) -> Error {
        match self.blame {
            Blame::Stream => Error::BadStream {
                volume: "tar stream".into(),
                reason,
            },
            Blame::Registry(reference) => Error::Artifact {
                reference: reference.to_string(),
                reason,
            },
        }
    }

    fn content(&self, f: &FileEntry, why: Mismatch) -> Error {
        match self.blame {
            Blame::Stream => Error::BadFile {
                path: f.path.clone(),
                reason: match why {
                    Mismatch::Digest(got) => format!(
                        "content does not match the signed manifest: its sha256 is {got}, the manifest says {}",
                        f.sha256
                    ),
                    other => format!("content {other}, the manifest says {} bytes", f.size),
                },
            },
            Blame::Registry(reference) => Error::Artifact {
                reference: reference.to_string(),
                reason: match why {
                    Mismatch::Digest(got) => format!(
                        "{}: the registry's blob sha256:{} does not match the signed manifest: its content hashes to sha256:{got}",
                        f.path, f.sha256
                    ),
                    other => format!(
                        "{}: blob sha256:{} {other}, the signed manifest gives {} bytes",
                        f.path, f.sha256, f.size
                    ),
                },
            },
        }
    }

    /// The next entry begins.
    pub fn entry(&mut self, raw: RawEntry<'_>) -> Result<()> {
        if self.current.is_some() {
            return Err(self.structure(format!(
                "entry {:?} begins before the previous file ended",
                raw.path
            )));
        }
        let Some(&want) = self.expected.get(self.next) else {
            return Err(self.structure(format!(
                "entry {:?} is not in the manifest (extra entry after the last one)",
                raw.path
            )));
        };
        if raw.path != want.path() {
            let reason = if self.seen.contains(raw.path) {
                format!("entry {:?} appears twice", raw.path)
            } else if self.expected.iter().any(|e| e.path() == raw.path) {
                format!(
                    "entry {:?} is out of manifest order (expected {:?})",
                    raw.path,
                    want.path()
                )
            } else {
                format!(
                    "entry {:?} is not in the manifest (expected {:?})",
                    raw.path,
                    want.path()
                )
            };
            return Err(self.structure(reason));
        }
        match (want, raw.dir) {
            (Expected::Dir(p), true) => {
                self.seen.insert(p);
                self.next += 1;
                self.sink.dir(p)
            }
            (Expected::File(f), false) => {
                if raw.size != f.size {
                    return Err(self.structure(format!(
                        "entry {:?} is {} bytes in the stream, the manifest says {}",
                        f.path, raw.size, f.size
                    )));
                }
                if raw.executable != f.executable {
                    return Err(self.structure(format!(
                        "entry {:?} has a mode that disagrees with the manifest",
                        f.path
                    )));
                }
                self.seen.insert(&f.path);
                self.next += 1;
                self.progress.item(&f.path);
                self.sink.begin_file(f)?;
                self.current = Some((f, FileCheck::new(f)));
                Ok(())
            }
            (want, _) => Err(self.structure(format!(
                "entry {:?} is a {}, the manifest says it is a {}",
                raw.path,
                if raw.dir { "directory" } else { "file" },
                if matches!(want, Expected::Dir(_)) {
                    "directory"
                } else {
                    "file"
                }
            ))),
        }
    }

    /// Bytes of the current file.
    pub fn data(&mut self, bytes: &[u8]) -> Result<()> {
        let Some((f, check)) = self.current.as_mut() else {
            return Err(self.structure("data outside a file entry".into()));
        };
        if let Err(why) = check.update(bytes) {
            let f = *f;
            return Err(self.content(f, why));
        }
        self.sink.data(bytes)?;
        self.progress.advance(bytes.len() as u64);
        Ok(())
    }

    /// The current file ended: its size and digest are checked, and only then does the sink
    /// hear of its end ([`Mode::Collect`] records a mismatch and goes on).
    pub fn end(&mut self) -> Result<()> {
        let Some((f, check)) = self.current.take() else {
            return Err(self.structure("a file ended that never began".into()));
        };
        match check.finish() {
            Ok(()) => self.sink.end_file(f),
            Err(why @ Mismatch::Digest(_)) if self.mode == Mode::Collect => {
                let _ = why;
                self.bad_files.push(f.path.clone());
                Ok(())
            }
            Err(why) => Err(self.content(f, why)),
        }
    }

    /// The source has no more entries: every expected one must have come. Returns the files
    /// whose content failed ([`Mode::Collect`]; empty in strict mode).
    pub fn finish(self) -> Result<Vec<String>> {
        if self.current.is_some() {
            return Err(self.structure("the last file did not end".into()));
        }
        if let Some(missing) = self.expected.get(self.next) {
            return Err(self.structure(format!(
                "ends before {:?} and {} more manifest entries (missing from the stream)",
                missing.path(),
                self.expected.len() - self.next - 1
            )));
        }
        Ok(self.bad_files)
    }
}

/// Stands in front of a pipeline's final sink: counts what it receives and, at
/// [`Tally::finish`], proves that it was exactly the manifest's directories and files, each
/// once (files the sink already [`EntrySink::holds`] count as delivered).
pub struct Tally<'m, 's> {
    m: &'m Manifest,
    sink: &'s mut dyn EntrySink,
    listed_dirs: HashSet<&'m str>,
    listed_files: HashSet<&'m str>,
    dirs: HashSet<&'m str>,
    files: HashSet<&'m str>,
}

impl<'m, 's> Tally<'m, 's> {
    /// A tally of what `sink` receives for `m`.
    pub fn new(m: &'m Manifest, sink: &'s mut dyn EntrySink) -> Self {
        Tally {
            m,
            sink,
            listed_dirs: m.directories.iter().map(String::as_str).collect(),
            listed_files: m.files.iter().map(|f| f.path.as_str()).collect(),
            dirs: HashSet::new(),
            files: HashSet::new(),
        }
    }

    fn extra(what: &str, path: &str) -> Error {
        Error::BadStream {
            volume: "source".into(),
            reason: format!("{what} {path:?} was delivered twice or is not in the manifest"),
        }
    }

    /// Records the delivery of file `path`: listed, and not delivered before.
    fn deliver_file(&mut self, path: &str) -> Result<()> {
        match self.listed_files.get(path) {
            Some(&p) if self.files.insert(p) => Ok(()),
            _ => Err(Self::extra("file", path)),
        }
    }

    /// Records `e` as delivered without telling the sink: the target already holds it from an
    /// interrupted install of the same manifest, proven (a resumed install).
    pub fn already_held(&mut self, e: &Expected<'_>) -> Result<()> {
        match e {
            Expected::Dir(d) => match self.listed_dirs.get(*d) {
                Some(&p) if self.dirs.insert(p) => Ok(()),
                _ => Err(Self::extra("directory", d)),
            },
            Expected::File(f) => self.deliver_file(&f.path),
        }
    }

    /// Whether the sink behind holds `e` ([`EntrySink::holds`], [`EntrySink::holds_dir`]),
    /// without counting it as delivered: where a resumed stream may start.
    pub fn sink_holds(&mut self, e: &Expected<'_>) -> Result<bool> {
        match e {
            Expected::Dir(d) => self.sink.holds_dir(d),
            Expected::File(f) => self.sink.holds(f),
        }
    }

    /// Every directory and file of the manifest arrived, and nothing else.
    pub fn finish(self) -> Result<()> {
        let missing = self
            .m
            .files
            .iter()
            .map(|f| f.path.as_str())
            .find(|p| !self.files.contains(p))
            .or_else(|| {
                self.m
                    .directories
                    .iter()
                    .map(String::as_str)
                    .find(|d| !self.dirs.contains(d))
            });
        if let Some(path) = missing {
            return Err(Error::BadStream {
                volume: "source".into(),
                reason: format!("{path:?} is listed in the manifest but was not installed"),
            });
        }
        Ok(())
    }
}

impl EntrySink for Tally<'_, '_> {
    fn dir(&mut self, path: &str) -> Result<()> {
        match self.listed_dirs.get(path) {
            Some(&p) if self.dirs.insert(p) => self.sink.dir(path),
            _ => Err(Self::extra("directory", path)),
        }
    }
    fn begin_file(&mut self, file: &FileEntry) -> Result<()> {
        self.deliver_file(&file.path)?;
        self.sink.begin_file(file)
    }
    fn data(&mut self, bytes: &[u8]) -> Result<()> {
        self.sink.data(bytes)
    }
    fn end_file(&mut self, file: &FileEntry) -> Result<()> {
        self.sink.end_file(file)
    }
    fn holds(&mut self, file: &FileEntry) -> Result<bool> {
        if !self.sink.holds(file)? {
            return Ok(false);
        }
        self.deliver_file(&file.path)?;
        Ok(true)
    }
    fn clone_from(&mut self, file: &FileEntry, src: &File) -> Result<Option<File>> {
        if !self.listed_files.contains(file.path.as_str())
            || self.files.contains(file.path.as_str())
        {
            return Err(Self::extra("file", &file.path));
        }
        let cloned = self.sink.clone_from(file, src)?;
        if cloned.is_some() {
            self.deliver_file(&file.path)?;
        }
        Ok(cloned)
    }
}
