//! Root rotation that travels with a bundle, and the root file on the target.
//!
//! The target keeps its root where `--trust` names it (`root.json`) and every version it has
//! trusted in `root.history/` beside it (`NAME.history/` for a root file `NAME.json`), under the
//! TUF names `N.root.json`. Loading a root ([`load_root`]) also loads that history, keeping
//! only the versions whose chain to the root in force verifies, so a receipt signed under an
//! earlier root can still be checked (and replaced) and says which version vouched for it.
//!
//! A bundle packed with `--trust-update` carries root versions as `N.root.json` beside its
//! manifest, listed (size and SHA-256) in the manifest's `trust_update` object, so the bundle's
//! signature covers them and stripping them breaks the bundle. Reading one ([`advance`]):
//! versions above the trusted one must follow it one by one, each signed by the threshold of
//! the previous version's root keys and of its own (TUF client workflow 5.3); versions at or
//! below it must be the very roots the target trusted (anything else is a rollback or a fork);
//! the last root must not be expired. The bundle's manifest is then verified with the newest
//! root's targets role. Only `unpack`, after a successful install, rewrites the root file
//! ([`apply`]); `verify`, `push` and `check` never change it.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::policy::{self, Policy, TrustRoot};
use super::root::{self, Root};
use crate::error::{Error, Result};
use crate::fsio;
use crate::manifest::{self, CarriedRoot, Manifest, TrustUpdate};

/// A root version as bytes, with its version (as carried in a bundle or a registry).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RootFile {
    /// `signed.version`.
    pub version: u64,
    /// The exact file.
    pub bytes: Vec<u8>,
}

/// The name a root version has in a bundle, a receipt and the history: `N.root.json`.
pub fn file_name(version: u64) -> String {
    format!("{version}.root.json")
}

/// The version in a `N.root.json` name (decimal, no leading zero).
pub fn version_of_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".root.json")?;
    if digits.is_empty() || digits.starts_with('0') || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Whether `name` is a root file the manifest lists.
pub fn is_listed_root(m: &Manifest, name: &str) -> bool {
    let Some(v) = version_of_name(name) else {
        return false;
    };
    m.trust_update
        .as_ref()
        .is_some_and(|t| t.roots.iter().any(|r| r.version == v))
}

/// The manifest's `trust_update` for these roots (`None` for none).
pub fn manifest_entry(roots: &[RootFile]) -> Option<TrustUpdate> {
    (!roots.is_empty()).then(|| TrustUpdate {
        roots: roots
            .iter()
            .map(|r| CarriedRoot {
                version: r.version,
                size: r.bytes.len() as u64,
                sha256: hex::encode(Sha256::digest(&r.bytes)),
            })
            .collect(),
    })
}

/// Writes the roots into the bundle being packed (`dir`) and returns the manifest's entry.
pub fn carry(dir: &Path, roots: &[RootFile]) -> Result<Option<TrustUpdate>> {
    for r in roots {
        crate::durable::write_synced(&dir.join(file_name(r.version)), &r.bytes, 0o644)?;
    }
    Ok(manifest_entry(roots))
}

fn read_root_file(path: &Path, follow: bool) -> Result<Vec<u8>> {
    fsio::read_regular_capped(path, root::MAX_ROOT_BYTES, follow).map_err(|e| match e.kind() {
        std::io::ErrorKind::InvalidInput | std::io::ErrorKind::FileTooLarge => Error::TrustRoot {
            path: path.to_path_buf(),
            reason: e.to_string(),
        },
        _ => Error::io(path, e),
    })
}

/// Reads and parses a root file (bounded); errors name the file (exit 3 for a bad root).
pub fn read_root(path: &Path) -> Result<(Root, Vec<u8>)> {
    let bytes = read_root_file(path, true)?;
    let root = Root::parse(&bytes).map_err(|reason| Error::TrustRoot {
        path: path.to_path_buf(),
        reason: reason.to_string(),
    })?;
    Ok((root, bytes))
}

/// The history directory of a root file: `NAME.history/` beside `NAME.json`.
pub(crate) fn history_dir(root_path: &Path) -> PathBuf {
    let name = root_path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stem = name.strip_suffix(".json").unwrap_or(&name);
    fsio::parent_dir(root_path).join(format!("{stem}.history"))
}

/// Loads the root in force: it must parse and be signed by the threshold of its own root keys.
/// The verified chain of earlier versions in its history directory comes with it.
pub fn load_root(path: &Path) -> Result<TrustRoot> {
    let (root, bytes) = read_root(path)?;
    let own = root.verification(root::ROOT, &root);
    if !own.ok() {
        return Err(Error::TrustRoot {
            path: path.to_path_buf(),
            reason: format!(
                "root version {} is not signed by the threshold of its own root keys: {}",
                root.version,
                own.describe()
            ),
        });
    }
    let (history, notes) = load_history(path, &root);
    Ok(TrustRoot {
        path: path.to_path_buf(),
        root,
        bytes,
        history,
        notes,
    })
}

/// The earlier versions in the history directory whose chain to `current` verifies, oldest
/// first. A version that does not link is left out with a note, and so is everything older.
fn load_history(path: &Path, current: &Root) -> (Vec<Root>, Vec<String>) {
    let dir = history_dir(path);
    let mut notes = Vec::new();
    let mut chain: Vec<Root> = Vec::new();
    let mut next = current.clone();
    while next.version > 1 {
        let v = next.version - 1;
        let file = dir.join(file_name(v));
        let prev = match read_root(&file) {
            Ok((r, _)) => r,
            Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                break;
            }
            Err(e) => {
                notes.push(format!("{e}; root versions up to {v} are not used"));
                break;
            }
        };
        if let Err(why) = root::verify_rotation(&prev, &next) {
            notes.push(format!(
                "{}: version {} {why}; root versions up to {v} are not used",
                file.display(),
                next.version
            ));
            break;
        }
        chain.push(prev.clone());
        next = prev;
    }
    chain.reverse();
    (chain, notes)
}

/// Root files carried by a bundle directory: every `N.root.json` in it (bounded reads), parsed.
/// With `strict` false (a target that trusts plain keys), a file that is not a valid root is
/// only noted.
pub fn read_carried(
    dir: &Path,
    strict: bool,
    notes: &mut Vec<String>,
) -> Result<Vec<(PathBuf, RootFile, Root)>> {
    let mut found = Vec::new();
    let rd = fsio::list_dir(dir, fsio::Follow::Final).map_err(|e| Error::io(dir, e.into()))?;
    for (name, _) in rd {
        let name = name.to_string_lossy().into_owned();
        if version_of_name(&name).is_some() {
            found.push(name);
        }
    }
    if found.len() > manifest::MAX_CARRIED_ROOTS {
        return Err(Error::TrustUpdate {
            path: dir.to_path_buf(),
            reason: format!(
                "holds {} root files, more than the {} a bundle may carry",
                found.len(),
                manifest::MAX_CARRIED_ROOTS
            ),
        });
    }
    let mut out = Vec::new();
    for name in found {
        let path = dir.join(&name);
        let parsed = read_root_file(&path, false).and_then(|b| parse_carried(path, b));
        match parsed {
            Ok(p) => out.push(p),
            Err(e) if !strict => notes.push(format!("{e} (not used)")),
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

/// Parses one carried root (from a bundle or a registry layer); its name's version must be its
/// own.
pub fn parse_carried(path: PathBuf, bytes: Vec<u8>) -> Result<(PathBuf, RootFile, Root)> {
    let root = Root::parse(&bytes).map_err(|reason| Error::TrustUpdate {
        path: path.clone(),
        reason: format!("is not a valid TUF root: {reason}"),
    })?;
    let named = path
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(version_of_name);
    if named.is_some_and(|v| v != root.version) {
        return Err(Error::TrustUpdate {
            path,
            reason: format!(
                "holds root version {}, not the one its name says",
                root.version
            ),
        });
    }
    let version = root.version;
    Ok((path, RootFile { version, bytes }, root))
}

/// A verified chain of newer roots, to be written on the target after the install.
#[derive(Clone, Debug)]
pub struct Update {
    /// The version trusted before.
    pub from: u64,
    /// The newer roots, in order, with their bytes.
    pub chain: Vec<(Root, RootFile)>,
}

impl Update {
    /// The version the update leads to.
    pub fn to(&self) -> u64 {
        self.chain.last().map_or(self.from, |(r, _)| r.version)
    }
}

/// The policy after the roots a bundle carries: unchanged without newer versions, else the
/// newest root's (see the module documentation for the rules). `notes` collects what the
/// operator should know (roots carried but not needed).
pub fn advance(
    policy: &Policy,
    carried: &[(PathBuf, RootFile, Root)],
    notes: &mut Vec<String>,
) -> Result<(Policy, Option<Update>)> {
    let Some(tr) = &policy.root else {
        if let Some((path, _, r)) = carried.first() {
            notes.push(format!(
                "{} carries trust root version {}; this target trusts plain keys, so it is not used",
                path.display(),
                r.version
            ));
        }
        return Ok((policy.clone(), None));
    };
    let current = &tr.root;
    let mut sorted: Vec<&(PathBuf, RootFile, Root)> = carried.iter().collect();
    sorted.sort_by_key(|(_, f, _)| f.version);
    let mut next_version = current.version + 1;
    let newest = sorted.last().map_or(current.version, |(_, f, _)| f.version);
    let mut chain: Vec<(Root, RootFile)> = Vec::new();
    for (path, file, r) in sorted {
        if r.version <= current.version {
            let known = std::iter::once(current)
                .chain(tr.history.iter())
                .find(|h| h.version == r.version);
            match known {
                Some(h) if h.canonical_signed() == r.canonical_signed() => {}
                Some(_) => {
                    return Err(Error::TrustUpdate {
                        path: path.clone(),
                        reason: format!(
                            "is a root version {} that differs from the version {} this target trusted ({} is at version {}): a rollback or a forked root is refused",
                            r.version,
                            r.version,
                            tr.path.display(),
                            current.version
                        ),
                    });
                }
                None => notes.push(format!(
                    "{}: root version {} is older than the history this target keeps; not used",
                    path.display(),
                    r.version
                )),
            }
            continue;
        }
        if r.version != next_version {
            return Err(Error::TrustUpdateGap {
                path: path.clone(),
                trusted: current.version,
                missing: next_version,
                carried: r.version,
                newest,
            });
        }
        let prev = chain.last().map_or(current, |(p, _)| p);
        root::verify_rotation(prev, r).map_err(|why| Error::TrustUpdate {
            path: path.clone(),
            reason: format!("root version {} {why}", r.version),
        })?;
        chain.push((r.clone(), file.clone()));
        next_version += 1;
    }
    let Some((last, last_file)) = chain.last().cloned() else {
        return Ok((policy.clone(), None));
    };
    if last.is_expired(policy.clock.now) {
        let path = carried
            .iter()
            .find(|(_, f, _)| f.version == last.version)
            .map(|(p, _, _)| p.clone())
            .unwrap_or_default();
        return Err(policy::expired(&path, &last, policy.clock));
    }
    let mut history = tr.history.clone();
    history.push(current.clone());
    history.extend(chain[..chain.len() - 1].iter().map(|(r, _)| r.clone()));
    let next = Policy::from_root(
        TrustRoot {
            path: tr.path.clone(),
            root: last,
            bytes: last_file.bytes,
            history,
            notes: tr.notes.clone(),
        },
        policy.clock,
    );
    Ok((
        next,
        Some(Update {
            from: current.version,
            chain,
        }),
    ))
}

/// Holds the manifest to the roots: every root the update used is listed with its digest, and
/// every listed root is there. Run after the manifest's signature verified.
pub fn check_listed(
    m: &Manifest,
    manifest_path: &Path,
    carried: &[(PathBuf, RootFile, Root)],
    update: Option<&Update>,
) -> Result<()> {
    let listed: &[CarriedRoot] = m.trust_update.as_ref().map_or(&[], |t| &t.roots);
    let entry = |f: &RootFile| CarriedRoot {
        version: f.version,
        size: f.bytes.len() as u64,
        sha256: hex::encode(Sha256::digest(&f.bytes)),
    };
    for (r, f) in update.map_or(&[][..], |u| &u.chain[..]) {
        if !listed.contains(&entry(f)) {
            return Err(Error::TrustUpdate {
                path: manifest_path.to_path_buf(),
                reason: format!(
                    "does not list the root version {} the bundle carries ({}): it was added after signing, so it is not used and the bundle is refused",
                    r.version,
                    file_name(r.version)
                ),
            });
        }
    }
    for l in listed {
        if !carried.iter().any(|(_, f, _)| entry(f) == *l) {
            return Err(Error::TrustUpdate {
                path: manifest_path.to_path_buf(),
                reason: format!(
                    "lists root version {} ({}, {} bytes) but the bundle does not hold that file as signed: copy it again from the staging host",
                    l.version,
                    file_name(l.version),
                    l.size
                ),
            });
        }
    }
    Ok(())
}

/// What [`apply`] did.
#[derive(Debug, serde::Serialize)]
pub struct Applied {
    /// The root file rewritten.
    pub path: PathBuf,
    /// The version before.
    pub from: u64,
    /// The version now.
    pub to: u64,
    /// The history directory.
    pub history: PathBuf,
}

/// Refuses, before anything is installed, a root file that [`apply`] could not replace in
/// place (a symbolic link: the rename would replace the link, not the file it names).
pub fn check_writable(policy: &Policy) -> Result<()> {
    let Some(tr) = &policy.root else {
        return Ok(());
    };
    let meta = fs::symlink_metadata(&tr.path).map_err(|e| Error::io(&tr.path, e))?;
    if !meta.is_file() {
        return Err(Error::TrustRoot {
            path: tr.path.clone(),
            reason: "is a symbolic link (or not a regular file): a root update rewrites the root file in place, so --trust must name the file itself".into(),
        });
    }
    Ok(())
}

/// Writes an accepted update on the target: each new version into the history directory (the
/// old root too), then the root file replaced atomically (a temporary file in its directory,
/// fsync, rename, directory fsync). Under a lock on the history directory, and never
/// backwards: a root file already at or above the update's version is left as it is.
pub fn apply(before: &Policy, update: &Update) -> Result<Option<Applied>> {
    let Some(tr) = &before.root else {
        return Ok(None);
    };
    let path = &tr.path;
    let hist = history_dir(path);
    let dir = fsio::parent_dir(path);
    let dir_fd = crate::durable::open_dir_following(&dir)?;
    let hist_name = hist.file_name().expect("a history directory has a name");
    match rustix::fs::mkdirat(&dir_fd, hist_name, rustix::fs::Mode::from_raw_mode(0o755)) {
        Ok(()) => {
            let fd =
                fsio::open_dir_at(&dir_fd, hist_name).map_err(|e| Error::io(&hist, e.into()))?;
            rustix::fs::fchmod(&fd, rustix::fs::Mode::from_raw_mode(0o755))
                .map_err(|e| Error::io(&hist, e.into()))?;
        }
        Err(rustix::io::Errno::EXIST) => {}
        Err(e) => return Err(Error::io(&hist, e.into())),
    }
    let hist_fd = fsio::open_dir_at(&dir_fd, hist_name).map_err(|e| Error::io(&hist, e.into()))?;
    rustix::fs::flock(&hist_fd, rustix::fs::FlockOperation::LockExclusive)
        .map_err(|e| Error::io(&hist, e.into()))?;
    let (on_disk, _) = read_root(path)?;
    if on_disk.version >= update.to() {
        return Ok(None);
    }
    let write_hist = |version: u64, bytes: &[u8]| -> Result<()> {
        let name = file_name(version);
        match crate::durable::write_synced_at(&hist_fd, &hist, &name, bytes, 0o644) {
            Ok(()) => Ok(()),
            Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::AlreadyExists => {
                Ok(())
            }
            Err(e) => Err(e),
        }
    };
    write_hist(tr.root.version, &tr.bytes)?;
    for (_, f) in &update.chain {
        write_hist(f.version, &f.bytes)?;
    }
    crate::durable::sync_dir_fd(&hist_fd, &hist)?;
    let (_, new) = update.chain.last().expect("an update has a root");
    let mode = fs::symlink_metadata(path)
        .map(|m| m.permissions().mode() & 0o777)
        .unwrap_or(0o644);
    let name = path.file_name().expect("a root file has a name");
    crate::durable::Staged::write(&dir_fd, &dir, name, &new.bytes, mode)?
        .publish(crate::durable::Place::Replace)?;
    Ok(Some(Applied {
        path: path.clone(),
        from: tr.root.version,
        to: update.to(),
        history: hist,
    }))
}

/// Checks the roots given to `pack --trust-update` before anything is written: each a valid
/// root signed by the threshold of its own root keys, versions following one another, each
/// rotation verified, the last not expired, and `signer` in the last root's targets role (a
/// bundle the target's new root would refuse is no use).
pub fn check_for_pack(
    files: &[(PathBuf, Vec<u8>)],
    signer: &crate::keys::PublicKey,
    clock: super::Clock,
) -> Result<Vec<RootFile>> {
    let mut roots: Vec<(PathBuf, Root, Vec<u8>)> = Vec::new();
    for (path, bytes) in files {
        let r = Root::parse(bytes).map_err(|reason| Error::TrustRoot {
            path: path.clone(),
            reason: reason.to_string(),
        })?;
        let own = r.verification(root::ROOT, &r);
        if !own.ok() {
            return Err(Error::TrustRoot {
                path: path.clone(),
                reason: format!(
                    "root version {} is not signed by the threshold of its own root keys: {}",
                    r.version,
                    own.describe()
                ),
            });
        }
        roots.push((path.clone(), r, bytes.clone()));
    }
    roots.sort_by_key(|(_, r, _)| r.version);
    for w in roots.windows(2) {
        root::verify_rotation(&w[0].1, &w[1].1).map_err(|why| Error::TrustUpdate {
            path: w[1].0.clone(),
            reason: format!("root version {} {why}", w[1].1.version),
        })?;
    }
    if let Some((path, last, _)) = roots.last() {
        if last.is_expired(clock.now) {
            return Err(policy::expired(path, last, clock));
        }
        let in_role = last
            .role_keys(root::TARGETS)
            .iter()
            .any(|k| k.public == signer.key);
        if !in_role {
            return Err(Error::Usage(format!(
                "{}: the key signing this bundle ({}) is not in the targets role of root version {}, so targets that take the update would refuse the bundle",
                path.display(),
                signer.key_id_hex(),
                last.version
            )));
        }
    }
    Ok(roots
        .into_iter()
        .map(|(_, r, bytes)| RootFile {
            version: r.version,
            bytes,
        })
        .collect())
}
