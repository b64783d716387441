//! Opening a bundle: reading `manifest.json` and `manifest.json.minisig` (bounded), verifying
//! the signature against the trust set and validating the manifest. No volume is read here.
//!
//! With a trust policy the co-signatures beside it (`manifest.json.KEYID.minisig`) count too,
//! and the TUF roots the bundle carries (`N.root.json`) may advance the policy first
//! (docs/FORMAT.md section 18); all of them are read bounded, like the signature.
//!
//! Both files come from the media, so both are hostile until the signature verifies: each is
//! opened without blocking (a FIFO must not hang the reader), must be a regular file (not
//! `/dev/zero`, a FIFO or a directory, followed through a symlink or not), and at most its
//! documented limit plus one byte is ever read (FORMAT.md, sections 2 and 9).

use std::ffi::OsStr;
use std::io;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::media::Media;
use crate::error::{Error, Result};
use crate::fsio::{self, Cause, Follow, read_capped};
use crate::keys::{PublicKey, Signature};
use crate::manifest::{self, Manifest};
use crate::trust::Policy;
use crate::trust::policy::{SigFile, Signer};
use crate::trust::update::{self, RootFile, Update};

/// Largest `manifest.json.minisig` accepted, in bytes (FORMAT.md, section 8).
pub const MAX_SIGNATURE_BYTES: u64 = 64 * 1024;

/// Where an opened bundle came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// A bundle directory (on removable media, or anywhere on disk).
    Dir(PathBuf),
    /// An artifact in an OCI registry: its `oci://` reference.
    Registry(String),
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::Dir(d) => d.display().fmt(f),
            Origin::Registry(r) => r.fmt(f),
        }
    }
}

/// A bundle whose manifest signature has been verified.
#[derive(Debug)]
pub struct Opened {
    /// Where it came from.
    pub origin: Origin,
    /// The parsed, validated manifest.
    pub manifest: Manifest,
    /// The exact signed bytes.
    pub manifest_bytes: Vec<u8>,
    /// SHA-256 of the manifest bytes.
    pub manifest_sha256: String,
    /// The signature file's text.
    pub signature_text: String,
    /// The key that signed it.
    pub signer: PublicKey,
    /// Non-fatal observations (trusted comment disagreements).
    pub warnings: Vec<String>,
    /// Who signed, and the trust material the bundle carries.
    pub trust: TrustInfo,
    /// The OMS signature the manifest lists (FORMAT.md section 19), read to its signed size
    /// and checked against its signed digest; targets place it at commit.
    pub oms: Option<crate::oms::Carried>,
}

/// A bundle on disk, its signature verified: the signed parts ([`Opened`], which it derefs
/// to) and the directories holding its volumes ([`Media`]). Only a bundle opened from a
/// directory has one ([`open_with`], [`open_media`]); an artifact opened from a registry is
/// an [`Opened`] alone, so the code that reads volumes cannot be handed one.
#[derive(Debug)]
pub struct BundleDir {
    /// The signed parts.
    pub opened: Opened,
    /// The directories holding the volumes (one, or several media), and how they are read.
    pub media: Media,
}

impl BundleDir {
    /// The bundle directory: the one the signature was checked in.
    pub fn dir(&self) -> &Path {
        self.media.first()
    }
}

impl std::ops::Deref for BundleDir {
    type Target = Opened;
    fn deref(&self) -> &Opened {
        &self.opened
    }
}

fn too_large(len: u64, cap: u64) -> String {
    if len > cap + 1 {
        format!("is {len} bytes, more than the {cap}-byte limit")
    } else {
        format!("holds more than the {cap}-byte limit")
    }
}

/// Reads `manifest.json` (bounded); the errors say what a missing or hostile file is.
fn read_manifest_bytes(path: &Path) -> Result<Vec<u8>> {
    let cap = manifest::MAX_MANIFEST_BYTES;
    read_capped(path, cap, Follow::Final).map_err(|e| match e.into_cause() {
        Cause::NotFound => not_a_bundle(path),
        Cause::NotRegular(what) => Error::BadManifest {
            path: path.to_path_buf(),
            reason: format!("is {what}, not a regular file; refusing to read it"),
        },
        Cause::TooLarge(len) => Error::BadManifest {
            path: path.to_path_buf(),
            reason: too_large(len, cap),
        },
        e @ (Cause::Io(_) | Cause::Link) => Error::io(path, e.into()),
    })
}

/// Reads `manifest.json.minisig` (bounded) as UTF-8 text. `Ok(None)` when it does not exist.
fn read_signature_text(path: &Path) -> Result<Option<String>> {
    let bytes = match read_capped(path, MAX_SIGNATURE_BYTES, Follow::Final)
        .map_err(fsio::Error::into_cause)
    {
        Ok(b) => b,
        Err(Cause::NotFound) => return Ok(None),
        Err(Cause::NotRegular(what)) => {
            return Err(Error::BadSignature {
                path: path.to_path_buf(),
                reason: format!("is {what}, not a regular file; refusing to read it"),
            });
        }
        Err(Cause::TooLarge(len)) => {
            return Err(Error::BadSignature {
                path: path.to_path_buf(),
                reason: format!(
                    "{} (too large to be a signature)",
                    too_large(len, MAX_SIGNATURE_BYTES)
                ),
            });
        }
        Err(e @ (Cause::Io(_) | Cause::Link)) => return Err(Error::io(path, e.into())),
    };
    String::from_utf8(bytes)
        .map(Some)
        .map_err(|_| Error::BadSignature {
            path: path.to_path_buf(),
            reason: "is not UTF-8 text".into(),
        })
}

/// The error for a manifest that is not there. A bundle path that does not exist, is not a
/// directory or cannot be read is an operational problem (exit 1: an unmounted stick must not
/// look like tampering); a directory without a manifest is not a bundle (exit 3).
fn not_a_bundle(manifest_path: &Path) -> Error {
    let dir = manifest_path.parent().unwrap_or(Path::new("."));
    let name = manifest_path
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    match std::fs::metadata(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Error::io(
            dir,
            io::Error::new(io::ErrorKind::NotFound, "no such directory"),
        ),
        Err(e) => Error::io(dir, e),
        Ok(m) if !m.is_dir() => Error::io(
            dir,
            io::Error::new(
                io::ErrorKind::NotADirectory,
                "is not a directory (a bundle is a directory)",
            ),
        ),
        Ok(_) => Error::NotABundle {
            path: dir.to_path_buf(),
            reason: format!("has no {name}: it is not a bundle, or an incomplete copy of one"),
        },
    }
}

/// Reads the manifest and signature of `dir` without checking the signature (for `inspect`).
pub fn read_unverified(dir: &Path) -> Result<(Manifest, Vec<u8>, Option<Signature>)> {
    let mpath = dir.join(manifest::MANIFEST_NAME);
    let bytes = read_manifest_bytes(&mpath)?;
    let m = Manifest::parse(&bytes).map_err(|reason| Error::BadManifest {
        path: mpath.clone(),
        reason: reason.to_string(),
    })?;
    let spath = dir.join(manifest::SIGNATURE_NAME);
    let sig = match read_signature_text(&spath)? {
        Some(text) => Some(Signature::parse(&text).map_err(|e| Error::Key {
            path: spath,
            source: e,
        })?),
        None => None,
    };
    Ok((m, bytes, sig))
}

/// A manifest whose signature verified.
pub struct Signed {
    /// The parsed, validated manifest.
    pub manifest: Manifest,
    /// Its exact bytes.
    pub bytes: Vec<u8>,
    /// The signature file's text.
    pub signature_text: String,
    /// The trusted key that signed it (the first that counted).
    pub signer: PublicKey,
    /// Trusted-comment disagreements, and co-signatures that did not count.
    pub warnings: Vec<String>,
    /// Every signer that counted, and the co-signatures to keep.
    pub trust: TrustInfo,
}

/// Who signed a manifest and what trust material travels with it (docs/FORMAT.md section 18).
#[derive(Clone, Debug, Default)]
pub struct TrustInfo {
    /// Every signature that counted, one per key.
    pub signers: Vec<Signer>,
    /// The co-signatures that counted, as `(file name, text)`, to keep in a receipt or
    /// publish.
    pub cosignatures: Vec<(String, String)>,
    /// The root files the manifest lists, to keep in a receipt or publish.
    pub roots: Vec<RootFile>,
    /// The newer roots the bundle carries, verified; `unpack` writes them after installing.
    pub update: Option<Update>,
    /// The policy the manifest was verified with (after `update`).
    pub policy: Option<Policy>,
    /// For a receipt verified with an earlier root version than the one in force: that version.
    pub vouched_by: Option<u64>,
    /// What the operator should know (roots carried but not used).
    pub notes: Vec<String>,
}

/// The name of a co-signature file: `manifest.json.KEYID.EXT`, KEYID the signer's key id in 16
/// uppercase hex digits, EXT its scheme's extension ([`crate::scheme::Scheme::extension`]:
/// `minisig` for minisign).
pub fn cosignature_name(key_id_hex: &str, extension: &str) -> String {
    format!("{}.{key_id_hex}.{extension}", manifest::MANIFEST_NAME)
}

/// The name of a co-signature of the file named `signed`: `SIGNED.KEYID.EXT`, as
/// [`cosignature_name`] names `manifest.json`'s.
pub fn cosignature_name_of(
    signed: &OsStr,
    key_id_hex: &str,
    extension: &str,
) -> std::ffi::OsString {
    let mut name = signed.to_owned();
    name.push(format!(".{key_id_hex}.{extension}"));
    name
}

/// Whether `name` is a co-signature file name.
pub fn is_cosignature_name(name: &str) -> bool {
    is_cosignature_of(OsStr::new(manifest::MANIFEST_NAME), OsStr::new(name))
}

/// Whether `name` is a co-signature of the file named `signed`: `SIGNED.KEYID.EXT`, the
/// scheme of `manifest.json.KEYID.minisig` for any signed file (`airlock verify FILE`) and
/// any scheme (EXT its extension, [`crate::scheme::is_extension`]). Compared as bytes, so a
/// name that is not UTF-8 never matches another's co-signatures.
pub(crate) fn is_cosignature_of(signed: &OsStr, name: &OsStr) -> bool {
    name.as_encoded_bytes()
        .strip_prefix(signed.as_encoded_bytes())
        .and_then(|r| r.strip_prefix(b"."))
        .filter(|r| r.len() > 17 && r[16] == b'.')
        .is_some_and(|r| {
            r[..16]
                .iter()
                .all(|b| matches!(b, b'0'..=b'9' | b'A'..=b'F'))
                && crate::scheme::is_extension(&r[17..])
        })
}

/// Most co-signature files a bundle or receipt may hold.
pub(crate) const MAX_COSIGNATURES: usize = 64;

/// Reads the co-signatures of the file named `signed` in `dir` (`SIGNED.KEYID.minisig`, at
/// most [`MAX_COSIGNATURES`], each bounded like a signature), in name order; a file that is not
/// a readable signature is named in `notes` rather than read. A bundle's are those of
/// `manifest.json`.
pub fn read_cosignatures(
    dir: &Path,
    signed: &OsStr,
    notes: &mut Vec<String>,
) -> Result<Vec<SigFile>> {
    let rd = match crate::fsio::list_dir(dir, crate::fsio::Follow::Final) {
        Ok(rd) => rd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io(dir, e.into())),
    };
    let mut names = Vec::new();
    for (name, _) in rd {
        if is_cosignature_of(signed, &name) {
            names.push(name);
        }
    }
    if names.len() > MAX_COSIGNATURES {
        return Err(Error::BadSignature {
            path: dir.to_path_buf(),
            reason: format!(
                "holds {} co-signature files of {}, more than the {MAX_COSIGNATURES} allowed",
                names.len(),
                signed.to_string_lossy()
            ),
        });
    }
    names.sort();
    let mut out = Vec::new();
    for name in names {
        let path = dir.join(&name);
        match read_signature_text(&path) {
            Ok(Some(text)) => out.push(SigFile { path, text }),
            Ok(None) => {}
            Err(Error::Io { path, source }) => return Err(Error::Io { path, source }),
            Err(e) => notes.push(format!("{e} (not counted)")),
        }
    }
    Ok(out)
}

/// Verifies the signature of a manifest against `trust` and parses it. Used for bundles and
/// for receipts alike: `manifest_path` and `sig_path` name the two files.
pub fn verify_signed(manifest_path: &Path, sig_path: &Path, trust: &[PublicKey]) -> Result<Signed> {
    verify_signed_with(manifest_path, sig_path, &Policy::any_of(trust))
}

/// [`verify_signed`] with a trust policy: the co-signatures beside the signature
/// (`manifest.json.KEYID.minisig`) count too, and the policy's threshold of distinct keys must
/// sign.
pub fn verify_signed_with(
    manifest_path: &Path,
    sig_path: &Path,
    policy: &Policy,
) -> Result<Signed> {
    let bytes = read_manifest_bytes(manifest_path)?;
    let Some(text) = read_signature_text(sig_path)? else {
        return Err(Error::MissingSignature {
            path: sig_path.to_path_buf(),
        });
    };
    let mut notes = Vec::new();
    let cosigs = read_cosignatures(
        &crate::fsio::parent_dir(sig_path),
        OsStr::new(manifest::MANIFEST_NAME),
        &mut notes,
    )?;
    let mut signed = verify_parts(
        bytes,
        manifest_path,
        SigFile {
            path: sig_path.to_path_buf(),
            text,
        },
        cosigs,
        policy,
    )?;
    signed.warnings.extend(notes);
    Ok(signed)
}

/// [`verify_signed`] on a manifest and signature already read (bounded) from elsewhere, such
/// as a registry: the same checks, in the same order. `manifest_path` and `sig_path` only name
/// the two in errors.
pub fn verify_signed_bytes(
    bytes: Vec<u8>,
    text: String,
    manifest_path: &Path,
    sig_path: &Path,
    trust: &[PublicKey],
) -> Result<Signed> {
    verify_parts(
        bytes,
        manifest_path,
        SigFile {
            path: sig_path.to_path_buf(),
            text,
        },
        Vec::new(),
        &Policy::any_of(trust),
    )
}

/// The checks every signed manifest goes through: the policy's root is current; the primary
/// signature parses; the signatures that verify with distinct keys of the policy reach its
/// threshold; then the manifest is parsed and the trusted comments compared with it.
pub(crate) fn verify_parts(
    bytes: Vec<u8>,
    manifest_path: &Path,
    primary: SigFile,
    cosigs: Vec<SigFile>,
    policy: &Policy,
) -> Result<Signed> {
    policy.check_current()?;
    let sig_path = primary.path.clone();
    policy
        .identify(&primary.text)
        .map_err(|e| Error::BadSignature {
            path: sig_path.clone(),
            reason: format!("is not a valid minisign signature: {e}"),
        })?;
    let text = primary.text.clone();
    let mut files = vec![primary];
    files.extend(cosigs);
    let counted = policy.require_manifest(&bytes, manifest_path, &files)?;
    let manifest = Manifest::parse(&bytes).map_err(|reason| Error::BadManifest {
        path: manifest_path.to_path_buf(),
        reason: reason.to_string(),
    })?;
    let sha = hex::encode(Sha256::digest(&bytes));
    let mut warnings = Vec::new();
    for (sig, _) in &counted.signatures {
        if let Some(comment) = &sig.comment {
            comment_warnings(comment, &sha, &manifest, &mut warnings);
        }
    }
    warnings.dedup();
    warnings.extend(
        counted
            .not_counted
            .iter()
            .map(|n| format!("{n} (not counted)")),
    );
    let (first, _) = &counted.signatures[0];
    let signer = policy.signer_key(first);
    let cosignatures = counted
        .signatures
        .iter()
        .filter(|(_, f)| f.path != sig_path)
        .map(|(s, f)| {
            // Under the inner key's name, with the file's own scheme extension.
            let ext = f
                .path
                .extension()
                .and_then(|e| e.to_str())
                .unwrap_or(crate::scheme::minisign::EXTENSION);
            (cosignature_name(&s.key_id, ext), f.text.clone())
        })
        .collect();
    Ok(Signed {
        manifest,
        bytes,
        signature_text: text,
        signer,
        warnings,
        trust: TrustInfo {
            signers: counted.signers,
            cosignatures,
            policy: Some(policy.clone()),
            ..TrustInfo::default()
        },
    })
}

fn comment_warnings(comment: &str, sha: &str, manifest: &Manifest, warnings: &mut Vec<String>) {
    match manifest::parse_trusted_comment(comment) {
        Some(tc) => {
            if tc.manifest_sha256 != sha {
                warnings.push(format!(
                    "the signature's trusted comment names manifest sha256 {}, the manifest is {sha}",
                    tc.manifest_sha256
                ));
            }
            if tc.name != manifest.name || tc.version != manifest.version {
                warnings.push(format!(
                    "the signature's trusted comment says {:?} version {}, the manifest says {:?} version {}",
                    tc.name, tc.version, manifest.name, manifest.version
                ));
            }
        }
        None => warnings.push(format!(
            "the signature's trusted comment {comment:?} is not in airlock's form"
        )),
    }
}

/// Opens `dir` and verifies its manifest signature against `trust`. No volume is read.
pub fn open(dir: &Path, trust: &[PublicKey]) -> Result<BundleDir> {
    open_with(dir, &Policy::any_of(trust))
}

/// [`open`] with a trust policy: co-signatures count, and the roots the bundle carries are
/// verified and may advance the policy (docs/FORMAT.md section 18). Nothing is written.
pub fn open_with(dir: &Path, policy: &Policy) -> Result<BundleDir> {
    let mpath = dir.join(manifest::MANIFEST_NAME);
    let spath = dir.join(manifest::SIGNATURE_NAME);
    let bytes = read_manifest_bytes(&mpath)?;
    let Some(text) = read_signature_text(&spath)? else {
        return Err(Error::MissingSignature { path: spath });
    };
    let mut notes = Vec::new();
    let carried = update::read_carried(dir, policy.root.is_some(), &mut notes)?;
    let cosigs = read_cosignatures(dir, OsStr::new(manifest::MANIFEST_NAME), &mut notes)?;
    let mut opened = open_parts(
        Origin::Dir(dir.to_path_buf()),
        &mpath,
        bytes,
        SigFile { path: spath, text },
        cosigs,
        carried,
        notes,
        policy,
    )?;
    opened.oms = crate::oms::read_carried(dir, &opened.manifest)?;
    let media = Media::new(vec![dir.to_path_buf()], &opened.manifest_sha256);
    Ok(BundleDir { opened, media })
}

/// [`open_with`] for a bundle spread over several media (or duplicated on them): the
/// signature is checked in the first directory, and every other must hold the byte-identical
/// signed manifest (two bundles mixed are refused before anything else is read). Volumes may
/// be in any of them.
pub fn open_media(dirs: &[PathBuf], policy: &Policy) -> Result<BundleDir> {
    let Some((first, _)) = dirs.split_first() else {
        return Err(Error::Usage("no bundle directory given".into()));
    };
    let mut opened = open_with(first, policy)?;
    if dirs.len() > 1 {
        let mut unique: Vec<PathBuf> = Vec::with_capacity(dirs.len());
        for d in dirs {
            if !unique.contains(d) {
                unique.push(d.clone());
            }
        }
        opened.media = Media::new(unique, &opened.manifest_sha256);
        opened.media.check_same_bundle(false)?;
    }
    Ok(opened)
}

/// The root files a bundle source holds, parsed, for [`open_parts`].
pub type Carried = Vec<(PathBuf, RootFile, crate::trust::root::Root)>;

/// Verifies a bundle's signed parts however they were read (a directory, a registry): the
/// carried roots advance the policy, the signatures must meet it, the manifest must list the
/// roots used.
#[allow(clippy::too_many_arguments)]
pub fn open_parts(
    origin: Origin,
    manifest_path: &Path,
    bytes: Vec<u8>,
    primary: SigFile,
    cosigs: Vec<SigFile>,
    carried: Carried,
    mut notes: Vec<String>,
    policy: &Policy,
) -> Result<Opened> {
    let (effective, pending) = update::advance(policy, &carried, &mut notes)?;
    let Signed {
        manifest,
        bytes: manifest_bytes,
        signature_text,
        signer,
        mut warnings,
        mut trust,
    } = verify_parts(bytes, manifest_path, primary, cosigs, &effective)?;
    if policy.root.is_some() {
        update::check_listed(&manifest, manifest_path, &carried, pending.as_ref())?;
    }
    let listed: &[manifest::CarriedRoot] = manifest.trust_update.as_ref().map_or(&[], |t| &t.roots);
    for l in listed {
        match carried
            .iter()
            .find(|(_, f, _)| f.version == l.version && hex::encode(Sha256::digest(&f.bytes)) == l.sha256)
        {
            Some((_, f, _)) => trust.roots.push(f.clone()),
            None => notes.push(format!(
                "the manifest lists trust root version {} ({}), which the bundle does not hold as signed",
                l.version,
                update::file_name(l.version)
            )),
        }
    }
    trust.update = pending;
    warnings.append(&mut notes);
    let manifest_sha256 = hex::encode(Sha256::digest(&manifest_bytes));
    Ok(Opened {
        origin,
        manifest,
        manifest_bytes,
        manifest_sha256,
        signature_text,
        signer,
        warnings,
        trust,
        oms: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStrExt;

    #[test]
    fn a_cosignature_is_named_after_exactly_its_signed_file() {
        let id = "8A1C66BC2E7F49EA";
        let of = |signed: &str, name: &str| is_cosignature_of(OsStr::new(signed), OsStr::new(name));
        assert!(of("release", &format!("release.{id}.minisig")));
        assert_eq!(
            cosignature_name_of(OsStr::new("release"), id, "minisig"),
            format!("release.{id}.minisig").as_str()
        );
        assert!(is_cosignature_name(&cosignature_name(id, "minisig")));
        // Each scheme's co-signatures carry its own extension: 1 to 16 of a-z0-9.
        assert!(of("release", &format!("release.{id}.token")));
        assert!(of("release", &format!("release.{id}.p256sig2")));
        assert!(!of("release", &format!("release.{id}.")));
        assert!(!of("release", &format!("release.{id}.Token")));
        assert!(!of("release", &format!("release.{id}.sigstore.json")));
        assert!(!of("release", &format!("release.{id}.abcdefghijklmnopq")));
        assert!(!of("release", &format!("release.{id}minisig")));
        // Another file's, the primary signature, a lowercase or short id: not this file's.
        assert!(!of("release", &format!("release2.{id}.minisig")));
        assert!(!of("release", &format!("rel.{id}.minisig")));
        assert!(!of("release", "release.minisig"));
        assert!(!of(
            "release",
            &format!("release.{}.minisig", id.to_lowercase())
        ));
        assert!(!of("release", "release.8A1C66BC.minisig"));
        assert!(!of("release", &format!("release.{id}.minisig.bak")));
        // Names that are not UTF-8 compare as bytes: no two files share co-signatures.
        let a = OsStr::from_bytes(b"r\xff");
        let b = OsStr::from_bytes(b"r\xfe");
        let cosig = cosignature_name_of(a, id, "minisig");
        assert!(is_cosignature_of(a, &cosig));
        assert!(!is_cosignature_of(b, &cosig));
    }
}
