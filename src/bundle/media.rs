//! A bundle on one or more media (issue 32, FORMAT.md section 21): the bundle directories that
//! together hold its volumes, and how their bytes are read.
//!
//! Every directory must hold the byte-identical signed manifest (two bundles mixed are
//! refused); a volume may be in any of them, or in several (each copy is checked and a good one
//! used). Where a volume is on none of them, the operator may be asked for the medium that
//! holds it ([`crate::progress::Progress::ask_for_medium`]): one USB port, three sticks, the
//! same mount point; after the answer every directory is looked at again, its manifest
//! compared again. The placement file `airlock-media.json` that `airlock copy` leaves on each
//! medium (unsigned, informative) says which medium holds which volume, for messages only.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::fsio::{self, Follow, MediumFile, MediumRead, ReadFrom, read_capped};
use crate::manifest::{self, MAX_MANIFEST_BYTES};
use crate::progress::{MediumRequest, Progress};

/// The placement file `airlock copy` writes beside the manifest on each medium.
pub const PLACEMENT_NAME: &str = "airlock-media.json";

/// Largest placement file read, in bytes.
pub(crate) const MAX_PLACEMENT_BYTES: u64 = 1 << 20;

/// What `airlock-media.json` says (FORMAT.md section 21.2): which medium of how many this is,
/// and which volumes each medium holds. Not signed: it names media in messages, and nothing is
/// trusted because of it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Placement {
    /// The file's own format version: 1.
    pub airlock_media: u32,
    /// SHA-256 of the manifest the media carry.
    pub manifest_sha256: String,
    /// This medium's number, from 1.
    pub medium: usize,
    /// Every medium of the set, in order.
    pub media: Vec<MediumVolumes>,
}

/// One medium of a [`Placement`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MediumVolumes {
    /// Its number, from 1.
    pub number: usize,
    /// The volumes it holds, data then parity, in order.
    pub volumes: Vec<String>,
}

impl Placement {
    /// The number of the medium that holds `volume`, if the placement says.
    pub(crate) fn medium_of(&self, volume: &str) -> Option<usize> {
        self.media
            .iter()
            .find(|m| m.volumes.iter().any(|v| v == volume))
            .map(|m| m.number)
    }
}

/// The directories holding a bundle's volumes, and how they are read.
#[derive(Debug)]
pub struct Media {
    /// The bundle directories; the first is the one the signature was checked in.
    dirs: Vec<PathBuf>,
    /// SHA-256 of the signed manifest every directory must hold.
    manifest_sha256: String,
    /// From the medium (the default) or through the page cache.
    read: MediumRead,
    /// The copy chosen for a volume held by several directories (the one whose digests
    /// matched).
    chosen: Mutex<HashMap<String, PathBuf>>,
    /// The placement file found on any directory, for messages.
    placement: Mutex<Option<Placement>>,
    /// Whether each directory holds the signed manifest now (a mount point whose medium was
    /// swapped for another bundle's is not looked in until it holds this one again).
    usable: Mutex<Vec<bool>>,
    /// How each volume read so far was read.
    reads: Mutex<BTreeMap<String, VolumeRead>>,
    /// What the readers noticed about copies (a bad copy beside a good one).
    notes: Mutex<Vec<String>>,
}

/// How one volume's bytes were read (the report's `read_from`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct VolumeRead {
    /// The volume.
    pub volume: String,
    /// The directory it was read from.
    pub dir: PathBuf,
    /// How.
    pub read_from: ReadFrom,
    /// Why that is not the medium itself; absent when it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

impl Clone for Media {
    fn clone(&self) -> Self {
        Media {
            dirs: self.dirs.clone(),
            manifest_sha256: self.manifest_sha256.clone(),
            read: self.read,
            chosen: Mutex::new(self.chosen.lock().expect("not poisoned").clone()),
            placement: Mutex::new(self.placement.lock().expect("not poisoned").clone()),
            usable: Mutex::new(self.usable.lock().expect("not poisoned").clone()),
            reads: Mutex::new(self.reads.lock().expect("not poisoned").clone()),
            notes: Mutex::new(self.notes.lock().expect("not poisoned").clone()),
        }
    }
}

impl PartialEq for Media {
    fn eq(&self, other: &Self) -> bool {
        self.dirs == other.dirs && self.manifest_sha256 == other.manifest_sha256
    }
}

impl Media {
    /// One bundle directory (or none, for a registry artifact).
    pub fn new(dirs: Vec<PathBuf>, manifest_sha256: &str) -> Self {
        let m = Media {
            usable: Mutex::new(vec![true; dirs.len()]),
            dirs,
            manifest_sha256: manifest_sha256.to_string(),
            read: MediumRead::default(),
            chosen: Mutex::default(),
            placement: Mutex::default(),
            reads: Mutex::default(),
            notes: Mutex::default(),
        };
        m.read_placement();
        m
    }

    /// The bundle directories, the first being the one the signature was checked in.
    pub fn dirs(&self) -> &[PathBuf] {
        &self.dirs
    }

    /// Whether the bundle is spread over (or duplicated on) more than one directory.
    pub fn is_spread(&self) -> bool {
        self.dirs.len() > 1
    }

    /// How volumes are read.
    pub fn read(&self) -> MediumRead {
        self.read
    }

    /// Reads volumes through the page cache (`--cached`) or from the medium.
    pub fn set_read(&mut self, read: MediumRead) {
        self.read = read;
    }

    /// The directories that hold an entry called `name` (of any type: a directory or a link
    /// where a volume belongs is the volume's problem, named when it is opened).
    pub fn holders(&self, name: &str) -> Vec<PathBuf> {
        let usable = self.usable.lock().expect("not poisoned").clone();
        self.dirs
            .iter()
            .zip(usable)
            .filter(|(_, ok)| *ok)
            .map(|(d, _)| d.join(name))
            .filter(|p| std::fs::symlink_metadata(p).is_ok())
            .collect()
    }

    /// Whether any directory holds `name`.
    pub fn holds(&self, name: &str) -> bool {
        !self.holders(name).is_empty()
    }

    /// The path to read volume `name` from: the copy chosen for it, or the first directory
    /// that holds it, or (held nowhere) its path in the first directory, whose error says it
    /// is missing.
    pub fn volume_path(&self, name: &str) -> PathBuf {
        if let Some(p) = self.chosen.lock().expect("not poisoned").get(name) {
            return p.clone();
        }
        self.holders(name)
            .into_iter()
            .next()
            .unwrap_or_else(|| self.dirs[0].join(name))
    }

    /// Reads volume `name` from `path` from now on (a copy whose digests matched).
    pub fn choose(&self, name: &str, path: PathBuf) {
        self.chosen
            .lock()
            .expect("not poisoned")
            .insert(name.to_string(), path);
    }

    /// Checks that every directory holds the byte-identical signed manifest. A directory that
    /// holds no manifest (a mount point whose medium was taken out) is skipped when
    /// `allow_empty`; one with another manifest is refused: two bundles mixed.
    pub fn check_same_bundle(&self, allow_empty: bool) -> Result<()> {
        for (i, d) in self.dirs.iter().enumerate() {
            self.usable.lock().expect("not poisoned")[i] = false;
            match self.holds_this_bundle(d) {
                Ok(true) => self.usable.lock().expect("not poisoned")[i] = true,
                Ok(false) if allow_empty => {}
                Ok(false) => {
                    return Err(Error::NotABundle {
                        path: d.clone(),
                        reason: format!(
                            "has no {}: every directory given must hold the bundle's signed manifest",
                            manifest::MANIFEST_NAME
                        ),
                    });
                }
                Err(e) => return Err(e),
            }
        }
        self.read_placement();
        Ok(())
    }

    /// Whether directory `d` holds this bundle's signed manifest, byte for byte: `Ok(false)`
    /// when it holds none; an error when it holds another or one that cannot be read.
    fn holds_this_bundle(&self, d: &Path) -> Result<bool> {
        let path = d.join(manifest::MANIFEST_NAME);
        let bytes = match read_capped(&path, MAX_MANIFEST_BYTES, Follow::Never)
            .map_err(fsio::Error::into_cause)
        {
            Ok(b) => b,
            Err(crate::fsio::Cause::NotFound) => return Ok(false),
            Err(e) => {
                return Err(Error::NotABundle {
                    path: d.to_path_buf(),
                    reason: format!(
                        "its {} cannot be read ({e}): every directory given must hold the bundle's signed manifest",
                        manifest::MANIFEST_NAME
                    ),
                });
            }
        };
        let digest = hex::encode(Sha256::digest(&bytes));
        if digest != self.manifest_sha256 {
            return Err(Error::MixedMedia {
                path: d.to_path_buf(),
                reason: format!(
                    "holds another bundle: its {} (sha256 {}) differs from the one verified in {} (sha256 {}); every directory given must hold the same signed manifest",
                    manifest::MANIFEST_NAME,
                    &digest[..16],
                    self.dirs[0].display(),
                    &self.manifest_sha256[..16]
                ),
            });
        }
        Ok(true)
    }

    /// Looks at every directory again after the operator changed media: each holding this
    /// bundle's manifest is looked in, the others not; returns what was wrong with them
    /// (another bundle), for the next question.
    fn rescan(&self) -> Vec<String> {
        let mut complaints = Vec::new();
        for (i, d) in self.dirs.iter().enumerate() {
            let ok = self.holds_this_bundle(d).unwrap_or_else(|e| {
                complaints.push(e.to_string());
                false
            });
            self.usable.lock().expect("not poisoned")[i] = ok;
        }
        self.read_placement();
        complaints
    }

    /// Asks the operator (through `progress`) for the medium holding the first of `missing`,
    /// again after an answer that brought none of them, until one of them is held (`true`)
    /// or the operator stops or nobody can be asked (`false`).
    pub fn ask_for(&self, missing: &[String], progress: &dyn Progress) -> bool {
        // A bundle in one directory that lacks a volume is damaged, not spread: only a bundle
        // given as several directories, or whose placement file puts the volume on another
        // medium, is worth a question.
        if self.dirs.is_empty()
            || missing.is_empty()
            || !(self.is_spread() || self.where_missing(&missing[0]).is_some())
        {
            return false;
        }
        let mut complaint = None;
        loop {
            let request = MediumRequest {
                missing,
                hint: self.where_missing(&missing[0]),
                looked_in: &self.dirs,
                complaint: complaint.take(),
            };
            if !progress.ask_for_medium(&request) {
                return false;
            }
            let complaints = self.rescan();
            if missing.iter().any(|n| self.holds(n)) {
                return true;
            }
            complaint = Some(if complaints.is_empty() {
                format!("{} is still on none of them", missing[0])
            } else {
                complaints.join("; ")
            });
        }
    }

    /// Records how volume `name` was read from `path`.
    pub fn record_read(&self, name: &str, path: &Path, f: &MediumFile) {
        let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        self.reads.lock().expect("not poisoned").insert(
            name.to_string(),
            VolumeRead {
                volume: name.to_string(),
                dir,
                read_from: f.read_from(),
                why: f.why(),
            },
        );
    }

    /// How each volume read so far was read, in name order.
    pub fn reads(&self) -> Vec<VolumeRead> {
        self.reads
            .lock()
            .expect("not poisoned")
            .values()
            .cloned()
            .collect()
    }

    /// Notes a reader made about the copies (a bad copy beside a good one).
    pub fn note(&self, text: String) {
        self.notes.lock().expect("not poisoned").push(text);
    }

    /// The notes made so far.
    pub fn notes(&self) -> Vec<String> {
        self.notes.lock().expect("not poisoned").clone()
    }

    /// Reads the first valid placement file of any directory (it names media in messages).
    fn read_placement(&self) {
        for d in &self.dirs {
            let Ok(bytes) =
                read_capped(&d.join(PLACEMENT_NAME), MAX_PLACEMENT_BYTES, Follow::Never)
            else {
                continue;
            };
            if let Ok(p) = serde_json::from_slice::<Placement>(&bytes)
                && p.manifest_sha256 == self.manifest_sha256
            {
                *self.placement.lock().expect("not poisoned") = Some(p);
                return;
            }
        }
    }

    /// Where a missing volume would be, for a message: "medium 2 of 3" when a placement file
    /// says so.
    pub fn where_missing(&self, volume: &str) -> Option<String> {
        let p = self.placement.lock().expect("not poisoned");
        let p = p.as_ref()?;
        p.medium_of(volume)
            .map(|n| format!("medium {n} of {}", p.media.len()))
    }

    /// The first directory (errors about the bundle as a whole name it).
    pub fn first(&self) -> &Path {
        &self.dirs[0]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bundle(dir: &Path, manifest: &[u8], volumes: &[&str]) {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join(manifest::MANIFEST_NAME), manifest).unwrap();
        for v in volumes {
            std::fs::write(dir.join(v), b"x").unwrap();
        }
    }

    #[test]
    fn volumes_are_found_on_any_medium_and_mixed_bundles_refused() {
        let t = tempfile::tempdir().unwrap();
        let (a, b) = (t.path().join("a"), t.path().join("b"));
        bundle(&a, b"{m}", &["data.000"]);
        bundle(&b, b"{m}", &["data.001", "data.000"]);
        let sha = hex::encode(Sha256::digest(b"{m}"));
        let media = Media::new(vec![a.clone(), b.clone()], &sha);
        assert!(media.check_same_bundle(false).is_ok());
        assert_eq!(media.volume_path("data.000"), a.join("data.000"));
        assert_eq!(media.volume_path("data.001"), b.join("data.001"));
        assert_eq!(media.holders("data.000").len(), 2);
        assert_eq!(media.volume_path("data.002"), a.join("data.002"));
        media.choose("data.000", b.join("data.000"));
        assert_eq!(media.volume_path("data.000"), b.join("data.000"));

        std::fs::write(b.join(manifest::MANIFEST_NAME), b"{other}").unwrap();
        let e = media.check_same_bundle(false).unwrap_err();
        assert!(matches!(e, Error::MixedMedia { .. }), "{e}");
        assert!(e.to_string().contains("holds another bundle"), "{e}");
        // A mount point whose medium was taken out holds nothing: skipped after a prompt.
        std::fs::remove_file(b.join(manifest::MANIFEST_NAME)).unwrap();
        assert!(media.check_same_bundle(false).is_err());
        assert!(media.check_same_bundle(true).is_ok());
    }

    #[test]
    fn the_placement_file_names_the_medium_of_a_missing_volume() {
        let t = tempfile::tempdir().unwrap();
        let a = t.path().join("a");
        bundle(&a, b"{m}", &["data.000"]);
        let sha = hex::encode(Sha256::digest(b"{m}"));
        let p = Placement {
            airlock_media: 1,
            manifest_sha256: sha.clone(),
            medium: 1,
            media: vec![
                MediumVolumes {
                    number: 1,
                    volumes: vec!["data.000".into()],
                },
                MediumVolumes {
                    number: 2,
                    volumes: vec!["data.001".into()],
                },
            ],
        };
        std::fs::write(a.join(PLACEMENT_NAME), serde_json::to_vec(&p).unwrap()).unwrap();
        let media = Media::new(vec![a.clone()], &sha);
        assert_eq!(
            media.where_missing("data.001").as_deref(),
            Some("medium 2 of 2")
        );
        // A placement file of another bundle is not believed.
        let media = Media::new(vec![a], &"0".repeat(64));
        assert_eq!(media.where_missing("data.001"), None);
    }
}
