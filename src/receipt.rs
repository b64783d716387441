//! The install receipt: the signed manifest `unpack` leaves in `DIR/.airlock/`, and everything
//! done with it.
//!
//! This module owns the receipt's layout (docs/FORMAT.md section 10): writing it into a staged
//! tree, opening it (verified exactly as a bundle's manifest is, with
//! [`crate::bundle::open::verify_signed_bytes`], when a trust set is given), recognising its
//! files in error messages, and comparing a tree with it. `check`, `unpack --replace` and the
//! error hints all ask here rather than knowing the paths themselves.
//!
//! A receipt is only ever read through the install directory's handle: `.airlock` is opened
//! with `O_NOFOLLOW`, so a link named `.airlock` (to another install's receipt) never makes a
//! directory look like an airlock install, for `--replace`, a delta base or `check`.
//!
//! Comparing catches bit rot and drift: every file in the receipt is re-hashed (in parallel)
//! or, with `sizes_only`, just sized; files that are missing, modified or not in the receipt,
//! files planted under `.airlock/`, and modes that drifted (group- or world-writable, setuid,
//! setgid) are each named.

use std::os::fd::OwnedFd;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType};

use crate::bundle::open;
use crate::error::{Error, Result};
use crate::fsio::{self, Cause};
use crate::inspect::TreeChecks;
use crate::inspect::values::{self, FileScan};
use crate::manifest::{self, Manifest};
use crate::paths::{self, RECEIPT_DIR};
use crate::progress::{Phase, Progress};
use crate::trust::Policy;
use crate::trust::policy::Signer;
use crate::work;

/// Mode of the receipt directory and of every installed directory.
pub const DIR_MODE: u32 = 0o755;
/// Mode of the receipt files.
pub const FILE_MODE: u32 = 0o644;

/// `DIR/.airlock/manifest.json`.
pub fn manifest_path(dir: &Path) -> PathBuf {
    dir.join(RECEIPT_DIR).join(manifest::MANIFEST_NAME)
}

/// `DIR/.airlock/manifest.json.minisig`.
pub fn signature_path(dir: &Path) -> PathBuf {
    dir.join(RECEIPT_DIR).join(manifest::SIGNATURE_NAME)
}

/// Whether `dir` holds a receipt manifest: `.airlock` a directory and `manifest.json` in it a
/// regular file, neither a link (a linked `.airlock` would lend another install's receipt to
/// whatever directory holds the link).
pub fn exists(dir: &Path) -> bool {
    open_receipt_dir(dir).is_ok_and(|fd| {
        rustix::fs::statat(&fd, manifest::MANIFEST_NAME, AtFlags::SYMLINK_NOFOLLOW)
            .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::RegularFile)
    })
}

/// Opens `DIR/.airlock` through the handle of `dir`, refusing a link (`ELOOP` or `ENOTDIR`
/// from `O_NOFOLLOW | O_DIRECTORY`).
fn open_receipt_dir(dir: &Path) -> std::io::Result<OwnedFd> {
    let root = fsio::open_dir_path(dir, fsio::Follow::Final)?;
    Ok(fsio::open_dir_at(&root, RECEIPT_DIR)?)
}

/// Reads the receipt file `name` through the receipt directory's handle: a regular file, not a
/// link, opened without blocking, at most `cap` bytes. `Ok(None)` when it does not exist.
fn read_receipt_file(
    receipt_dir: &OwnedFd,
    path: &Path,
    name: &str,
    cap: u64,
) -> Result<Option<Vec<u8>>> {
    let bad = |reason: String| {
        if name == manifest::SIGNATURE_NAME {
            Error::BadSignature {
                path: path.to_path_buf(),
                reason,
            }
        } else {
            Error::BadManifest {
                path: path.to_path_buf(),
                reason,
            }
        }
    };
    let refuse = |what: &str| {
        bad(format!(
            "is {what}, not a regular file; refusing to read it"
        ))
    };
    match fsio::read_below_capped(receipt_dir, name, cap).map_err(fsio::Error::into_cause) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(Cause::NotFound) => Ok(None),
        Err(Cause::Link) => Err(refuse("a symbolic link")),
        Err(Cause::NotRegular(_)) => Err(refuse("a directory, FIFO, socket or device")),
        Err(Cause::TooLarge(_)) => Err(bad(format!("is larger than the {cap}-byte limit"))),
        Err(e @ Cause::Io(_)) => Err(Error::io(path, e.into())),
    }
}

/// The receipt manifest's bytes and, if present, its signature's, read through the handle.
fn read_pair(dir: &Path) -> Result<(Vec<u8>, Option<Vec<u8>>)> {
    let manifest_path = manifest_path(dir);
    let receipt_dir = match open_receipt_dir(dir) {
        Ok(fd) => fd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(Error::MissingSignature {
                path: manifest_path,
            });
        }
        Err(e) => {
            let receipt = dir.join(RECEIPT_DIR);
            if std::fs::symlink_metadata(&receipt).is_ok_and(|m| m.file_type().is_symlink()) {
                return Err(Error::BadManifest {
                    path: receipt,
                    reason: "is a symbolic link, not a receipt directory airlock wrote; refusing to follow it".into(),
                });
            }
            return Err(Error::io(receipt, e));
        }
    };
    let Some(bytes) = read_receipt_file(
        &receipt_dir,
        &manifest_path,
        manifest::MANIFEST_NAME,
        manifest::MAX_MANIFEST_BYTES,
    )?
    else {
        return Err(Error::MissingSignature {
            path: manifest_path,
        });
    };
    let sig = read_receipt_file(
        &receipt_dir,
        &signature_path(dir),
        manifest::SIGNATURE_NAME,
        open::MAX_SIGNATURE_BYTES,
    )?;
    Ok((bytes, sig))
}

/// Writes the receipt into the staged tree `tree` (shown as `tree_path`): `.airlock/` mode
/// 0755 holding the exact manifest bytes and signature text, the co-signatures that counted
/// and the trust roots the manifest lists (docs/FORMAT.md sections 10 and 18), modes 0644, all
/// synced.
pub fn write(
    tree: &OwnedFd,
    tree_path: &Path,
    manifest_bytes: &[u8],
    signature_text: &str,
    trust: &open::TrustInfo,
) -> Result<()> {
    let dir = crate::durable::mkdir_at(tree, tree_path, RECEIPT_DIR, DIR_MODE)?;
    let dir_path = tree_path.join(RECEIPT_DIR);
    crate::durable::write_synced_at(
        &dir,
        &dir_path,
        manifest::MANIFEST_NAME,
        manifest_bytes,
        FILE_MODE,
    )?;
    crate::durable::write_synced_at(
        &dir,
        &dir_path,
        manifest::SIGNATURE_NAME,
        signature_text.as_bytes(),
        FILE_MODE,
    )?;
    for (name, text) in &trust.cosignatures {
        crate::durable::write_synced_at(&dir, &dir_path, name, text.as_bytes(), FILE_MODE)?;
    }
    for r in &trust.roots {
        let name = crate::trust::update::file_name(r.version);
        crate::durable::write_synced_at(&dir, &dir_path, &name, &r.bytes, FILE_MODE)?;
    }
    crate::durable::sync_dir_fd(&dir, &dir_path)
}

/// `DIR/.airlock/part.json`: which repositories of a bundle of several (FORMAT.md section
/// 14.4) an install of part of it holds (`unpack --dest D --repo R`). Not signed: it says
/// which part of the signed manifest the tree is, never what a file holds.
pub(crate) const PART_NAME: &str = "part.json";

/// Largest `part.json` read.
const MAX_PART_BYTES: u64 = 1 << 16;

/// What `part.json` holds.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct PartFile {
    repos: Vec<String>,
}

/// Writes `part.json` into the staged tree's receipt (after [`write`]): `{"repos":[FOLDER,...]}`
/// and a newline, the chosen repositories' folders in bundle order, mode 0644, synced.
pub fn write_part(tree: &OwnedFd, tree_path: &Path, folders: &[String]) -> Result<()> {
    let dir_path = tree_path.join(RECEIPT_DIR);
    let dir = fsio::open_dir_at(tree, RECEIPT_DIR).map_err(|e| Error::io(&dir_path, e.into()))?;
    let mut bytes = serde_json::to_vec(&PartFile {
        repos: folders.to_vec(),
    })
    .expect("json");
    bytes.push(b'\n');
    crate::durable::write_synced_at(&dir, &dir_path, PART_NAME, &bytes, FILE_MODE)?;
    crate::durable::sync_dir_fd(&dir, &dir_path)
}

/// The part of the receipt manifest `m` the tree at `dir` holds: `None` when there is no
/// `part.json` (the whole tree), else the chosen repositories' indices into `m.repos` and
/// the manifest of that part ([`Manifest::select_repos`]). A `part.json` that is not one
/// airlock writes for this manifest is refused, naming it.
pub fn part_of(dir: &Path, m: &Manifest) -> Result<Option<(Vec<String>, Manifest)>> {
    let path = dir.join(RECEIPT_DIR).join(PART_NAME);
    let receipt_dir = open_receipt_dir(dir).map_err(|e| Error::io(dir.join(RECEIPT_DIR), e))?;
    let Some(bytes) = read_receipt_file(&receipt_dir, &path, PART_NAME, MAX_PART_BYTES)? else {
        return Ok(None);
    };
    let bad = |reason: String| Error::BadManifest {
        path: path.clone(),
        reason,
    };
    let part: PartFile = serde_json::from_slice(&bytes)
        .map_err(|e| bad(format!("is not the part list airlock writes: {e}")))?;
    if part.repos.is_empty() {
        return Err(bad("names no repository".into()));
    }
    if !part.repos.windows(2).all(|w| w[0] < w[1]) {
        return Err(bad(
            "does not list its repositories once each, in order".into()
        ));
    }
    let chosen = part
        .repos
        .iter()
        .map(|f| m.repos.iter().position(|r| r.path == *f))
        .collect::<Option<Vec<usize>>>()
        .ok_or_else(|| {
            bad(format!(
                "names a repository the receipt's manifest does not carry ({})",
                part.repos.join(", ")
            ))
        })?;
    let view = m
        .select_repos(&chosen)
        .ok_or_else(|| bad("names no repository of the receipt's manifest".into()))?;
    Ok(Some((part.repos, view)))
}

/// The bytes [`write`] adds to a tree.
pub fn size(manifest_bytes: &[u8], signature_text: &str, trust: &open::TrustInfo) -> u64 {
    (manifest_bytes.len() + signature_text.len()) as u64
        + trust
            .cosignatures
            .iter()
            .map(|(_, t)| t.len() as u64)
            .sum::<u64>()
        + trust
            .roots
            .iter()
            .map(|r| r.bytes.len() as u64)
            .sum::<u64>()
}

/// An opened receipt.
#[derive(Debug)]
pub struct Receipt {
    /// The manifest the tree was installed from.
    pub manifest: Manifest,
    /// The signer's key id, when the receipt was verified against a trust set.
    pub signer: Option<String>,
    /// Every signature that counted, when verified.
    pub signers: Vec<Signer>,
    /// When an earlier root version than the one in force vouched for the receipt: that
    /// version (its keys signed the install; the root has rotated since).
    pub vouched_by: Option<u64>,
    /// Disagreements between the signature's trusted comment and the manifest.
    pub warnings: Vec<String>,
    /// For an install of part of a bundle of several repositories (`part.json`): their
    /// folders; `manifest` is then that part ([`part_of`]). Empty: the whole bundle.
    pub part: Vec<String>,
}

/// Verifies the receipt of `dir` with `policy`, as a bundle's manifest is verified; when the
/// policy is a TUF root and the receipt's signers are not enough for it, the earlier root
/// versions in its verified history are tried, newest first, and the one that vouches is
/// recorded (`TrustInfo::vouched_by`). Tampering is never excused: only "not signed by enough
/// keys of this version" moves on to an older version.
pub fn verify(dir: &Path, policy: &Policy) -> Result<open::Signed> {
    // `.airlock` itself must not be a link (another install's receipt lent to this one).
    read_pair(dir)?;
    verify_files(&manifest_path(dir), &signature_path(dir), policy)
}

/// Verifies a receipt's manifest `m` and signature `s` (co-signatures beside `s`) with
/// `policy`, falling back to the earlier root versions of a TUF root as [`verify`] does.
pub fn verify_files(m: &Path, s: &Path, policy: &Policy) -> Result<open::Signed> {
    match open::verify_signed_with(m, s, policy) {
        Err(e @ (Error::UntrustedKey { .. } | Error::SignatureThreshold { .. })) => {
            for (version, earlier) in policy.earlier() {
                if let Ok(mut signed) = open::verify_signed_with(m, s, &earlier) {
                    signed.trust.vouched_by = Some(version);
                    return Ok(signed);
                }
            }
            Err(e)
        }
        other => other,
    }
}

/// Opens the receipt of `dir`. With a trust policy the signature is verified exactly as a
/// bundle's is ([`verify`]): a missing receipt or signature, an untrusted signer or a bad
/// signature is an error. Without one the manifest is only parsed (a lint of the files, not a
/// verdict).
pub fn open(dir: &Path, trust: Option<&Policy>) -> Result<Receipt> {
    let manifest_path = manifest_path(dir);
    match trust {
        Some(trust) => {
            let signed = verify(dir, trust)?;
            let (part, manifest) = match part_of(dir, &signed.manifest)? {
                Some(p) => p,
                None => (Vec::new(), signed.manifest),
            };
            Ok(Receipt {
                manifest,
                signer: Some(signed.signer.key_id_hex()),
                signers: signed.trust.signers,
                vouched_by: signed.trust.vouched_by,
                warnings: signed.warnings,
                part,
            })
        }
        None => {
            let (bytes, _) = read_pair(dir)?;
            let manifest = Manifest::parse(&bytes).map_err(|reason| Error::BadManifest {
                path: manifest_path.clone(),
                reason: reason.to_string(),
            })?;
            let (part, manifest) = match part_of(dir, &manifest)? {
                Some(p) => p,
                None => (Vec::new(), manifest),
            };
            Ok(Receipt {
                manifest,
                signer: None,
                signers: Vec::new(),
                vouched_by: None,
                warnings: Vec::new(),
                part,
            })
        }
    }
}

/// One difference between the tree and its receipt.
#[derive(Clone, Debug, serde::Serialize, PartialEq, Eq)]
pub struct Drift {
    /// Relative path.
    pub path: String,
    /// `missing`, `modified`, `size`, `mode`, `extra`, `planted`, `type` or `unreadable`.
    pub kind: &'static str,
    /// Details.
    pub detail: String,
}

/// Mode bits an installed entry never has: group/world write, setuid, setgid, sticky.
const UNSAFE_BITS: u32 = 0o7022;

/// The mode drift of one entry, if its mode has bits an install never sets.
fn mode_drift(path: &str, mode: u32) -> Option<Drift> {
    let bad = mode & UNSAFE_BITS;
    if bad == 0 {
        return None;
    }
    let mut what = Vec::new();
    if bad & 0o020 != 0 {
        what.push("group-writable");
    }
    if bad & 0o002 != 0 {
        what.push("world-writable");
    }
    if bad & 0o4000 != 0 {
        what.push("setuid");
    }
    if bad & 0o2000 != 0 {
        what.push("setgid");
    }
    if bad & 0o1000 != 0 {
        what.push("sticky");
    }
    Some(Drift {
        path: path.to_string(),
        kind: "mode",
        detail: format!(
            "is {} (mode {:04o}); an install sets 0644, 0755 or, for directories, 0755",
            what.join(", "),
            mode & 0o7777
        ),
    })
}

/// The differences of one receipt file; with `checks`, the model checks of it run on the
/// handle the comparison opened (the file is then `checked`).
fn file_drift(
    opener: &mut fsio::BelowOpener<'_, OwnedFd>,
    f: &manifest::FileEntry,
    sizes_only: bool,
    scan: bool,
    checks: Option<&mut Checks<'_>>,
    progress: &dyn Progress,
) -> FileDrift {
    let one = |kind, detail: String| {
        (
            vec![Drift {
                path: f.path.clone(),
                kind,
                detail,
            }],
            None,
        )
    };
    let (file, st) = match opener.open_stat(&f.path).map_err(fsio::Error::into_cause) {
        Ok(opened) => opened,
        Err(Cause::NotFound) => return one("missing", "is missing".into()),
        Err(Cause::Link) => {
            return one(
                "type",
                "is no longer a regular file (a link is in its path)".into(),
            );
        }
        Err(Cause::NotRegular(_)) => {
            return one("type", "is no longer a regular file".into());
        }
        Err(e) => return one("unreadable", format!("cannot be opened: {e}")),
    };
    if let Some(c) = checks {
        c.tree
            .opened(&f.path, &c.dir.join(&f.path), &file, st.st_size as u64);
        c.checked.push(f.path.clone());
    }
    let mut out = Vec::new();
    let mode = st.st_mode;
    out.extend(mode_drift(&f.path, mode));
    let executable = mode & 0o111 != 0;
    if executable != f.executable {
        out.push(Drift {
            path: f.path.clone(),
            kind: "mode",
            detail: format!(
                "is {}executable, the receipt says it is {}",
                if executable { "" } else { "not " },
                if f.executable {
                    "executable"
                } else {
                    "not executable"
                }
            ),
        });
    }
    let len = st.st_size as u64;
    if len != f.size {
        out.push(Drift {
            path: f.path.clone(),
            kind: "size",
            detail: format!("is {len} bytes, the receipt says {}", f.size),
        });
        return (out, None);
    }
    if sizes_only {
        return (out, None);
    }
    progress.item(&f.path);
    let mut scanned = None;
    // The value scan of a model file rides on this read (no second read of the model).
    match values::hash_and_scan(&file, &f.path, scan, &|n| progress.advance(n)) {
        Ok((h, _, s)) if h == f.sha256 => scanned = s,
        Ok((h, _, s)) => {
            scanned = s;
            out.push(Drift {
                path: f.path.clone(),
                kind: "modified",
                detail: format!(
                    "content changed (sha256 {h}, the receipt says {})",
                    f.sha256
                ),
            });
        }
        Err(e) => out.push(Drift {
            path: f.path.clone(),
            kind: "unreadable",
            detail: format!("cannot be read: {e}"),
        }),
    }
    (out, scanned)
}

/// Every entry below `dir` (relative, `/`-separated) with its type, through directory
/// handles; the receipt directory at the top is left out.
fn walk(dir: &OwnedFd, prefix: &str, out: &mut Vec<(String, FileType)>) -> std::io::Result<()> {
    for (name, kind) in fsio::dir_entries(dir)? {
        if prefix.is_empty() && name == RECEIPT_DIR {
            continue;
        }
        let rel = format!("{prefix}{}", name.to_string_lossy());
        if kind == FileType::Directory {
            let sub = fsio::open_dir_at(dir, name.as_os_str())?;
            walk(&sub, &format!("{rel}/"), out)?;
        }
        out.push((rel, kind));
    }
    Ok(())
}

/// The model checks riding on a comparison: fed each file the comparison opens.
struct Checks<'a> {
    dir: &'a Path,
    tree: TreeChecks,
    /// The files checked on the comparison's handle.
    checked: Vec<String>,
}

/// Entries under `DIR/.airlock/` other than the receipt's files (manifest, signature,
/// co-signatures, trust roots).
pub fn planted(dir: &Path) -> Result<Vec<Drift>> {
    let receipt = dir.join(RECEIPT_DIR);
    let mut out = Vec::new();
    let meta = std::fs::symlink_metadata(&receipt).map_err(|e| Error::io(&receipt, e))?;
    if !meta.is_dir() {
        out.push(Drift {
            path: RECEIPT_DIR.into(),
            kind: "type",
            detail: "is not a directory".into(),
        });
        return Ok(out);
    }
    out.extend(mode_drift(RECEIPT_DIR, meta.permissions().mode()));
    let receipt_fd = fsio::open_dir_path(&receipt, fsio::Follow::Never)
        .map_err(|e| Error::io(&receipt, e.into()))?;
    for (name, ft) in fsio::dir_entries(&receipt_fd).map_err(|e| Error::io(&receipt, e))? {
        let name = name.to_string_lossy().into_owned();
        let rel = format!("{RECEIPT_DIR}/{name}");
        let is_file = ft == FileType::RegularFile;
        let receipt_file = name == manifest::MANIFEST_NAME
            || name == manifest::SIGNATURE_NAME
            || name == PART_NAME
            || open::is_cosignature_name(&name)
            || crate::trust::update::version_of_name(&name).is_some();
        if receipt_file && is_file {
            if let Ok(st) = fsio::stat_at(&receipt_fd, name.as_str()) {
                out.extend(mode_drift(&rel, st.st_mode));
            }
            continue;
        }
        out.push(Drift {
            path: rel,
            kind: "planted",
            detail: "is not part of a receipt: something other than airlock put it there".into(),
        });
    }
    Ok(out)
}

/// The value scans of [`compare_scanning`]: each scanned file's path and scan, in bundle order.
pub type FileScans = Vec<(String, FileScan)>;

/// One file's differences and value scan.
type FileDrift = (Vec<Drift>, Option<FileScan>);

/// A run of files compared together, and the model checks it fed.
type Run<'a> = (
    Vec<(&'a manifest::FileEntry, FileDrift)>,
    Option<Checks<'a>>,
);

/// Compares `dir` with `manifest`. Returns every difference, sorted by path.
pub fn compare(
    dir: &Path,
    manifest: &Manifest,
    sizes_only: bool,
    progress: &dyn Progress,
) -> Result<Vec<Drift>> {
    compare_scanning(dir, manifest, sizes_only, false, progress).map(|(drift, _)| drift)
}

/// [`compare`], and with `scan` (and not `sizes_only`) the value scan
/// ([`crate::inspect::values`]) of every model file in the read that hashes it. Returns the
/// differences and the scans of the files with a layout (path and scan, in bundle order).
pub(crate) fn compare_scanning(
    dir: &Path,
    manifest: &Manifest,
    sizes_only: bool,
    scan: bool,
    progress: &dyn Progress,
) -> Result<(Vec<Drift>, FileScans)> {
    compare_inner(dir, manifest, sizes_only, scan, None, progress)
}

/// What [`compare_checking`] found.
pub struct Comparison {
    /// Every difference, sorted by path.
    pub drift: Vec<Drift>,
    /// The value scans ([`compare_scanning`]).
    pub scans: FileScans,
    /// The model checks of the whole tree, to finish against `dir`
    /// ([`TreeChecks::finish`]).
    pub checks: TreeChecks,
}

/// [`compare_scanning`], and the model checks ([`crate::inspect`]) of every entry of the
/// tree in the same pass: each receipt file on the handle the comparison opened (one open and
/// one read a file for hash, value scan and model checks), everything else (files the receipt
/// does not list, links, what could not be opened, the receipt directory) left to the checks'
/// by-path end. [`TreeChecks::finish`] then gives what [`crate::inspect::check_tree`] gives.
pub fn compare_checking(
    dir: &Path,
    manifest: &Manifest,
    sizes_only: bool,
    scan: bool,
    progress: &dyn Progress,
) -> Result<Comparison> {
    let mut checks = TreeChecks::default();
    let (drift, scans) =
        compare_inner(dir, manifest, sizes_only, scan, Some(&mut checks), progress)?;
    Ok(Comparison {
        drift,
        scans,
        checks,
    })
}

fn compare_inner(
    dir: &Path,
    manifest: &Manifest,
    sizes_only: bool,
    scan: bool,
    model_checks: Option<&mut TreeChecks>,
    progress: &dyn Progress,
) -> Result<(Vec<Drift>, FileScans)> {
    progress.start(
        if sizes_only {
            Phase::Sizes
        } else {
            Phase::Hash
        },
        if sizes_only {
            0
        } else {
            manifest.totals.file_bytes
        },
    );
    let root =
        fsio::open_dir_path(dir, fsio::Follow::Final).map_err(|e| Error::io(dir, e.into()))?;
    // The OMS signature the bundle carried is a file of the install like the model's
    // (FORMAT.md section 19).
    let oms_file = manifest
        .oms
        .as_ref()
        .and_then(|o| o.signature.as_ref())
        .map(crate::oms::as_file_entry);
    // In units of files, each unit opening its files below the last one's directory handle: a
    // large file alone, so a model of a few shards hashes them on every core; small ones in
    // runs (`work::units`). A comparison of sizes reads no bytes, so only the count splits it.
    let with_checks = model_checks.is_some();
    let sizes = manifest
        .files
        .iter()
        .map(|f| if sizes_only { 0 } else { f.size });
    let units = work::units(sizes, work::UNIT_FILES, work::UNIT_BYTES);
    let compare_units = || -> Vec<Run<'_>> {
        work::map_units(&manifest.files, &units, |run| {
            let mut opener = fsio::BelowOpener::new(&root);
            let mut checks = with_checks.then(|| Checks {
                dir,
                tree: TreeChecks::default(),
                checked: Vec::new(),
            });
            let compared = run
                .iter()
                .map(|f| {
                    let d = file_drift(&mut opener, f, sizes_only, scan, checks.as_mut(), progress);
                    (f, d)
                })
                .collect::<Vec<_>>();
            (compared, checks)
        })
    };
    // The tree's listing (for the files the receipt does not list) is a walk of every
    // directory: done beside the comparison, by whichever thread is free, rather than after it.
    let list_tree = || {
        let mut present = Vec::new();
        walk(&root, "", &mut present).map(|()| present)
    };
    let (runs, present) = rayon::join(compare_units, list_tree);
    let present = present.map_err(|e| Error::io(dir, e))?;
    let mut drift = Vec::new();
    let mut scans = Vec::new();
    let mut checked = std::collections::HashSet::new();
    let mut tree_checks = TreeChecks::default();
    for (compared, checks) in runs {
        for (f, (d, s)) in compared {
            drift.extend(d);
            scans.extend(s.map(|s| (f.path.clone(), s)));
        }
        if let Some(c) = checks {
            tree_checks.merge(c.tree);
            checked.extend(c.checked);
        }
    }
    if let Some(f) = &oms_file {
        let mut checks = with_checks.then(|| Checks {
            dir,
            tree: TreeChecks::default(),
            checked: Vec::new(),
        });
        let (d, _) = file_drift(
            &mut fsio::BelowOpener::new(&root),
            f,
            sizes_only,
            false,
            checks.as_mut(),
            progress,
        );
        drift.extend(d);
        if let Some(c) = checks {
            tree_checks.merge(c.tree);
            checked.extend(c.checked);
        }
    }
    if let Ok(st) = rustix::fs::fstat(&root) {
        drift.extend(mode_drift(".", st.st_mode));
    }
    for d in &manifest.directories {
        match fsio::open_below(&root, d)
            .ok()
            .and_then(|fd| rustix::fs::fstat(&fd).ok())
            .ok_or(())
        {
            Ok(st) => drift.extend(mode_drift(d, st.st_mode)),
            Err(_) => drift.push(Drift {
                path: d.clone(),
                kind: "missing",
                detail: "directory is missing".into(),
            }),
        }
    }
    let known: std::collections::HashSet<&str> = manifest
        .files
        .iter()
        .map(|f| f.path.as_str())
        .chain(manifest.directories.iter().map(|d| d.as_str()))
        .chain(oms_file.iter().map(|f| f.path.as_str()))
        .collect();
    if let Some(model_checks) = model_checks {
        // What the comparison did not open as a receipt file is checked by path, as the
        // checks' own walk would have: links, files the receipt does not list, the rest.
        for (rel, kind) in &present {
            if *kind != FileType::Directory && !checked.contains(rel) {
                tree_checks.by_path(rel, *kind == FileType::RegularFile);
            }
        }
        tree_checks.subtree(RECEIPT_DIR);
        model_checks.merge(tree_checks);
    }
    for (rel, _) in present {
        if !known.contains(rel.as_str()) {
            drift.push(Drift {
                path: rel,
                kind: "extra",
                detail: "is not in the receipt".into(),
            });
        }
    }
    drift.sort_by(|a, b| paths::bundle_order(&a.path, &b.path));
    progress.finish();
    Ok((drift, scans))
}
