//! OpenSSF Model Signing (OMS) v1.0, the signature `model_signing` (sigstore's
//! model-transparency, the reference tool), the Kubernetes model-validation operator and
//! KServe verify: a Sigstore bundle ([`bundle`]) holding a DSSE envelope over an in-toto
//! statement ([`statement`]) that lists every file of the model with its SHA-256, signed with
//! an ECDSA key ([`keys`]) alone or with its X.509 certificate chain ([`x509`]).
//!
//! airlock speaks it both ways:
//!
//! - **Emit** ([`emit`]): at pack time, from the digests the writer computed as it packed each
//!   file, so nothing is read twice. The signature travels beside `manifest.json`, listed in
//!   the manifest's `oms` object (FORMAT.md section 19), and each unpack target places it.
//! - **Verify** ([`verify_dir`], [`compare`]): any OMS-signed directory, offline, with the
//!   reference's rules: the files of the model (every regular file below it, minus the ignored
//!   paths) must be exactly the signed ones with the signed digests; an unsigned extra file
//!   is a failure unless asked otherwise. Links are never followed (the reference refuses them
//!   too unless told `--allow_symlinks`).
//!
//! What is ignored, as the reference does: the signature file itself when it is inside the
//! model, `.git`, `.gitattributes`, `.github` and `.gitignore` at the top, and the
//! `ignore_paths` the signature records (each a path relative to the model; a directory
//! ignores everything below it). airlock's own `.airlock/` receipt directory is ignored too,
//! and airlock's signatures record it, so `model_signing verify` passes on an install.

pub mod bundle;
pub mod keys;
pub mod pack;
pub mod scheme;
pub mod statement;
pub mod x509;

use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use rayon::prelude::*;
use rustix::fs::FileType;
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::fsio::{self, Cause};
use crate::manifest::{
    FileEntry, MAX_OMS_SIGNATURE_BYTES, Manifest, OMS_SIGNATURE_NAME,
    OMS_SIGNATURE_NAME_BESIDE_PUBLISHER, OmsSignature,
};
use crate::paths::RECEIPT_DIR;
use crate::progress::Progress;

pub use bundle::{Signer, Trust, Verified};
pub use keys::{SigningKey, VerifyingKey};

/// The paths the reference ignores by default (`--ignore-git-paths`).
pub(crate) const GIT_PATHS: [&str; 4] = [".git", ".gitattributes", ".github", ".gitignore"];
/// Largest key, certificate or trust file read.
pub(crate) const MAX_KEY_FILE_BYTES: u64 = 1 << 20;

/// Paths left out of a signature or a comparison (relative, `/`-separated, canonical).
#[derive(Clone, Debug, Default)]
pub struct Ignore(Vec<String>);

impl Ignore {
    /// The reference's defaults: the git paths.
    pub fn git() -> Ignore {
        Ignore(GIT_PATHS.iter().map(|p| p.to_string()).collect())
    }

    /// Adds a path (as the reference resolves it: one outside the model ignores nothing).
    pub(crate) fn add(&mut self, p: &str) {
        if let Some(c) = statement::canonical_ignore(p)
            && !c.is_empty()
            && !self.0.contains(&c)
        {
            self.0.push(c);
        }
    }

    /// Whether `path` is ignored: it is an ignored path or below one.
    pub fn covers(&self, path: &str) -> bool {
        self.0.iter().any(|p| {
            path == p
                || path
                    .strip_prefix(p.as_str())
                    .is_some_and(|r| r.starts_with('/'))
        })
    }

    /// The paths, in the order added.
    pub fn paths(&self) -> &[String] {
        &self.0
    }
}

/// The name airlock's own signature gets for a model with the files `files`: `model.sig`, or
/// `model.airlock.sig` when the model holds a `model.sig` of its own (the publisher's).
pub fn site_signature_name<'a>(files: impl IntoIterator<Item = &'a str>) -> Result<&'static str> {
    let mut taken = (false, false);
    for f in files {
        let top = f.split('/').next().unwrap_or(f);
        let folded = crate::paths::fold(top);
        taken.0 |= folded == crate::paths::fold(OMS_SIGNATURE_NAME);
        taken.1 |= folded == crate::paths::fold(OMS_SIGNATURE_NAME_BESIDE_PUBLISHER);
    }
    match taken {
        (false, _) => Ok(OMS_SIGNATURE_NAME),
        (true, false) => Ok(OMS_SIGNATURE_NAME_BESIDE_PUBLISHER),
        (true, true) => Err(Error::Usage(format!(
            "the model holds both {OMS_SIGNATURE_NAME} and {OMS_SIGNATURE_NAME_BESIDE_PUBLISHER}: airlock's OMS signature has no name left in the install; remove one of them from the model, or pack without --oms-key"
        ))),
    }
}

/// What airlock's own signature leaves out: itself, the receipt directory, the git paths.
pub(crate) fn site_ignore(name: &str) -> Ignore {
    let mut ig = Ignore::default();
    ig.add(name);
    ig.add(RECEIPT_DIR);
    for g in GIT_PATHS {
        ig.add(g);
    }
    ig
}

/// The OMS signature of a model whose files are `files` (the manifest's, with the digests the
/// writer computed), made by `signer`, to be named `name`. Returns the signature's bytes.
pub fn emit(
    model_name: &str,
    files: &[FileEntry],
    name: &str,
    signer: &Signer<'_>,
) -> Result<Vec<u8>> {
    let ignore = site_ignore(name);
    let mut resources = Vec::with_capacity(files.len());
    for f in files.iter().filter(|f| !ignore.covers(&f.path)) {
        let mut sha256 = [0u8; 32];
        hex::decode_to_slice(&f.sha256, &mut sha256)
            .map_err(|_| Error::Internal(format!("{} has a malformed digest", f.path)))?;
        resources.push(statement::Resource {
            name: f.path.clone(),
            sha256,
        });
    }
    if resources.is_empty() {
        return Err(Error::Usage(
            "--oms-key: the model holds no file an OMS signature would sign (the git files are left out, as the reference does)".into(),
        ));
    }
    let payload = statement::build(model_name, resources, ignore.paths());
    crate::scheme::Signer::sign(
        &scheme::OmsSigner(signer),
        crate::scheme::Message::Enclosed(&payload),
        "",
    )
    .map_err(|e| Error::Internal(format!("OMS signing: {e}")))
}

/// The manifest's entry for a signature's bytes.
pub fn manifest_entry(name: &str, bytes: &[u8]) -> OmsSignature {
    OmsSignature {
        name: name.to_string(),
        size: bytes.len() as u64,
        sha256: hex::encode(Sha256::digest(bytes)),
    }
}

/// The signature a bundle carries, read to its signed size and checked against it.
#[derive(Clone, Debug)]
pub struct Carried {
    /// Its name beside the manifest and in the install.
    pub name: String,
    /// Its bytes.
    pub bytes: Vec<u8>,
}

/// Checks bytes read from anywhere against the manifest's `oms.signature`; `path` names them.
pub fn check_carried(m: &Manifest, path: &Path, bytes: Vec<u8>) -> Result<Carried> {
    let s = m
        .oms
        .as_ref()
        .and_then(|o| o.signature.as_ref())
        .expect("the caller saw oms.signature");
    if bytes.len() as u64 != s.size || hex::encode(Sha256::digest(&bytes)) != s.sha256 {
        return Err(Error::OmsSignature {
            path: path.to_path_buf(),
            reason: format!(
                "does not match the manifest (it lists {} bytes with sha256 {}): the OMS signature was changed or replaced after packing",
                s.size, s.sha256
            ),
        });
    }
    check_consistent(m, path, &s.name, &bytes)?;
    Ok(Carried {
        name: s.name.clone(),
        bytes,
    })
}

/// The carried signature must sign exactly the manifest's files (less what airlock's signature
/// leaves out) with the manifest's digests: a signature over other files or digests, made by
/// a packer that was wrong or hostile, is refused before it reaches an install.
fn check_consistent(m: &Manifest, path: &Path, name: &str, bytes: &[u8]) -> Result<()> {
    let bad = |reason: String| Error::OmsSignature {
        path: path.to_path_buf(),
        reason,
    };
    let st = bundle::read_statement(bytes).map_err(|e| bad(e.to_string()))?;
    let ignore = site_ignore(name);
    let actual: BTreeMap<String, [u8; 32]> = m
        .files
        .iter()
        .filter(|f| !ignore.covers(&f.path))
        .map(|f| {
            let mut d = [0u8; 32];
            hex::decode_to_slice(&f.sha256, &mut d).expect("validated digests");
            (f.path.clone(), d)
        })
        .collect();
    let v = Verified {
        statement: st,
        method: "key",
        signer: String::new(),
        subject: None,
        notes: Vec::new(),
    };
    let mismatches = compare(&v, &actual, &ignore, false);
    if let Some(first) = mismatches.first() {
        return Err(bad(format!(
            "does not sign what the manifest lists ({} difference{}, first: {}): the bundle's OMS signature and its manifest disagree",
            mismatches.len(),
            if mismatches.len() == 1 { "" } else { "s" },
            match first.kind {
                "extra" => format!("{} is in the manifest but not signed", first.path),
                "missing" => format!("{} is signed but not in the manifest", first.path),
                _ => format!("{} is signed with another digest", first.path),
            }
        )));
    }
    Ok(())
}

/// Reads the OMS signature a bundle directory carries, if its manifest lists one: at most its
/// signed size plus one byte, a regular file only, checked against the signed size and digest.
pub fn read_carried(dir: &Path, m: &Manifest) -> Result<Option<Carried>> {
    let Some(s) = m.oms.as_ref().and_then(|o| o.signature.as_ref()) else {
        return Ok(None);
    };
    let path = dir.join(&s.name);
    let bytes = fsio::read_capped(&path, s.size, fsio::Follow::Never).map_err(|e| match e.into_cause() {
        Cause::NotFound => Error::OmsSignature {
            path: path.clone(),
            reason: "is missing: the manifest lists this OMS signature, copy it from the staging host with the rest of the bundle".into(),
        },
        Cause::Io(e) => Error::io(&path, e),
        Cause::TooLarge(_) => Error::OmsSignature {
            path: path.clone(),
            reason: format!(
                "is larger than the {} bytes the manifest lists: the OMS signature was changed or replaced after packing",
                s.size
            ),
        },
        e => Error::OmsSignature {
            path: path.clone(),
            reason: format!("{e}; the manifest lists a {}-byte OMS signature", s.size),
        },
    })?;
    check_carried(m, &path, bytes).map(Some)
}

/// Whether `name` in a bundle directory is the OMS signature its manifest lists.
pub fn is_listed(m: &Manifest, name: &str) -> bool {
    m.oms
        .as_ref()
        .and_then(|o| o.signature.as_ref())
        .is_some_and(|s| s.name == name)
}

fn key_error(path: &Path, reason: impl Into<String>) -> Error {
    Error::OmsKey {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

/// Reads a small text file the operator named (a key, a certificate chain): bounded, a regular
/// file (a final link followed), UTF-8.
pub fn read_text(path: &Path) -> Result<String> {
    let bytes = fsio::read_capped(path, MAX_KEY_FILE_BYTES, fsio::Follow::Final).map_err(|e| {
        match e.into_cause() {
            Cause::Io(e) => Error::io(path, e),
            Cause::NotFound => Error::io(path, std::io::ErrorKind::NotFound.into()),
            e => key_error(path, e.to_string()),
        }
    })?;
    String::from_utf8(bytes).map_err(|_| key_error(path, "is not PEM text (not UTF-8)"))
}

/// Loads a public key the operator trusts (`--oms-trust`).
pub fn load_public_key(path: &Path) -> Result<VerifyingKey> {
    VerifyingKey::from_pem(&read_text(path)?).map_err(|why| key_error(path, why.to_string()))
}

/// Loads the certificates the operator trusts (`--oms-cert-chain`, each file one or more PEM
/// certificates).
pub fn load_certificates(paths: &[PathBuf]) -> Result<Vec<x509::Cert>> {
    let mut out = Vec::new();
    for p in paths {
        out.extend(x509::parse_pem(&read_text(p)?).map_err(|why| key_error(p, why.to_string()))?);
    }
    if out.len() > x509::MAX_CERTIFICATES {
        return Err(Error::Usage(format!(
            "--oms-cert-chain: {} certificates, more than {}",
            out.len(),
            x509::MAX_CERTIFICATES
        )));
    }
    Ok(out)
}

/// What the operator trusts, loaded.
pub enum TrustMaterial {
    /// A public key.
    Key(VerifyingKey),
    /// Certificates.
    Certificates(Vec<x509::Cert>),
}

impl TrustMaterial {
    /// The publisher's trust the flags name: the public key `key` (`--oms-trust`), else the
    /// certificates of `cert_chain` (`--oms-cert-chain`), else none. The one rule of `pack`
    /// and `check`.
    pub fn load(key: Option<&Path>, cert_chain: &[PathBuf]) -> Result<Option<TrustMaterial>> {
        Ok(match (key, cert_chain.is_empty()) {
            (Some(k), _) => Some(TrustMaterial::Key(load_public_key(k)?)),
            (None, false) => Some(TrustMaterial::Certificates(load_certificates(cert_chain)?)),
            (None, true) => None,
        })
    }

    /// As [`Trust`].
    pub fn as_trust(&self) -> Trust<'_> {
        match self {
            TrustMaterial::Key(k) => Trust::Key(k),
            TrustMaterial::Certificates(c) => Trust::Certificates(c),
        }
    }
}

/// Reads and verifies the signature file `path` against `trust`; errors name the file.
pub(crate) fn read_and_verify(path: &Path, trust: &TrustMaterial) -> Result<Verified> {
    let bytes = fsio::read_capped(path, MAX_OMS_SIGNATURE_BYTES, fsio::Follow::Final).map_err(
        |e| match e.into_cause() {
            Cause::Io(e) => Error::io(path, e),
            Cause::NotFound => Error::OmsSignature {
                path: path.to_path_buf(),
                reason: "is missing: no OMS signature to verify (name it with --oms-signature)"
                    .into(),
            },
            e => Error::OmsSignature {
                path: path.to_path_buf(),
                reason: e.to_string(),
            },
        },
    )?;
    verify_bytes(path, &bytes, trust)
}

/// Verifies signature bytes read from `path` against `trust`.
pub fn verify_bytes(path: &Path, bytes: &[u8], trust: &TrustMaterial) -> Result<Verified> {
    use crate::scheme::Scheme;
    scheme::Oms
        .verify(crate::scheme::Message::Enclosed(&[]), bytes, trust)
        .map_err(|r| r.reason())
        .and_then(|v| bundle::verified(v).map_err(|e| e.to_string()))
        .map_err(|reason| Error::OmsSignature {
            path: path.to_path_buf(),
            reason,
        })
}

/// One way the model differs from its signature.
#[derive(Clone, Debug, serde::Serialize, PartialEq, Eq)]
pub struct Mismatch {
    /// The file, relative to the model.
    pub path: String,
    /// `extra`, `missing` or `modified`.
    pub kind: &'static str,
}

impl Mismatch {
    /// A line for the operator.
    pub fn describe(&self) -> String {
        match self.kind {
            "extra" => format!(
                "{}: is not signed (an unsigned file in the model)",
                self.path
            ),
            "missing" => format!("{}: is signed but missing from the model", self.path),
            _ => format!("{}: does not match its signed digest", self.path),
        }
    }
}

/// The ignore set a verification uses: the reference's defaults, the signature's own
/// `ignore_paths`, and `extra`.
pub fn verify_ignore(v: &Verified, extra: &[String]) -> Ignore {
    let mut ig = Ignore::git();
    for p in &v.statement.ignore_paths {
        ig.add(p);
    }
    for p in extra {
        ig.add(p);
    }
    ig
}

/// Compares the signed resources of `v` with the model's files `actual` (path → SHA-256;
/// ignored paths are left out here). With `ignore_unsigned`, files the signature does not list
/// are not a failure (the reference's `--ignore_unsigned_files`).
pub fn compare(
    v: &Verified,
    actual: &BTreeMap<String, [u8; 32]>,
    ignore: &Ignore,
    ignore_unsigned: bool,
) -> Vec<Mismatch> {
    let mut out = Vec::new();
    let signed: BTreeMap<&str, &[u8; 32]> = v
        .statement
        .resources
        .iter()
        .map(|r| (r.name.as_str(), &r.sha256))
        .collect();
    for (path, sha) in actual {
        if ignore.covers(path) {
            continue;
        }
        match signed.get(path.as_str()) {
            None if ignore_unsigned => {}
            None => out.push(Mismatch {
                path: path.clone(),
                kind: "extra",
            }),
            Some(s) if *s != sha => out.push(Mismatch {
                path: path.clone(),
                kind: "modified",
            }),
            Some(_) => {}
        }
    }
    for name in signed.keys() {
        if !actual.contains_key(*name) {
            out.push(Mismatch {
                path: name.to_string(),
                kind: "missing",
            });
        }
    }
    out.sort_by(|a, b| statement::path_order(&a.path, &b.path));
    out
}

/// The error for a model that does not match its signature.
pub fn mismatch_error(sig: &Path, mismatches: &[Mismatch]) -> Error {
    let shown: Vec<String> = mismatches.iter().take(5).map(Mismatch::describe).collect();
    Error::OmsSignature {
        path: sig.to_path_buf(),
        reason: format!(
            "the model does not match this OMS signature ({} difference{}): {}{}",
            mismatches.len(),
            if mismatches.len() == 1 { "" } else { "s" },
            shown.join("; "),
            if mismatches.len() > 5 { "; ..." } else { "" }
        ),
    }
}

/// Every regular file below `root` (relative paths), not descending into ignored directories.
/// A link, device, FIFO or socket that is not ignored is an error naming it.
fn walk(
    root_path: &Path,
    dir: &OwnedFd,
    prefix: &str,
    ignore: &Ignore,
    out: &mut Vec<String>,
) -> Result<()> {
    let here = root_path.join(prefix);
    for (name, kind) in fsio::dir_entries(dir).map_err(|e| Error::io(&here, e))? {
        let Some(name) = name.to_str() else {
            return Err(Error::OmsSignature {
                path: here.join(&name),
                reason: "has a name that is not UTF-8, which no OMS signature can list".into(),
            });
        };
        let rel = format!("{prefix}{name}");
        if ignore.covers(&rel) {
            continue;
        }
        match kind {
            FileType::Directory => {
                let sub = fsio::open_dir_at(dir, name)
                    .map_err(|e| Error::io(root_path.join(&rel), e.into()))?;
                walk(root_path, &sub, &format!("{rel}/"), ignore, out)?;
            }
            FileType::RegularFile => out.push(rel),
            other => {
                return Err(Error::OmsSignature {
                    path: root_path.join(&rel),
                    reason: format!(
                        "is {}, not a regular file or directory: OMS verification never follows a link (the reference refuses links too unless told --allow_symlinks)",
                        match other {
                            FileType::Symlink => "a symbolic link",
                            FileType::Fifo => "a FIFO",
                            FileType::Socket => "a socket",
                            FileType::CharacterDevice => "a character device",
                            FileType::BlockDevice => "a block device",
                            _ => "of an unknown type",
                        }
                    ),
                });
            }
        }
    }
    Ok(())
}

/// What [`verify_dir`] found.
#[derive(Debug)]
pub struct DirReport {
    /// The signature, verified.
    pub verified: Verified,
    /// Files hashed.
    pub files: usize,
    /// Bytes hashed.
    pub bytes: u64,
    /// The paths ignored.
    pub ignored: Vec<String>,
}

/// Options of a directory verification.
pub struct DirOptions<'a> {
    /// The signature file.
    pub signature: &'a Path,
    /// What is trusted.
    pub trust: &'a TrustMaterial,
    /// More paths to leave out (relative to the model).
    pub ignore: Vec<String>,
    /// Files the signature does not list are not a failure.
    pub ignore_unsigned: bool,
}

/// Verifies the model directory `dir` against an OMS signature: the signature first (nothing is
/// hashed for a signature that does not verify), then every file, read through directory
/// handles (no link followed, no FIFO opened, each file hashed in one bounded streaming pass).
pub fn verify_dir(dir: &Path, opts: &DirOptions<'_>, progress: &dyn Progress) -> Result<DirReport> {
    let verified = read_and_verify(opts.signature, opts.trust)?;
    let mut extra = opts.ignore.clone();
    // The signature file itself, when it lies in the model (as the reference's CLI does).
    if let (Ok(d), Ok(s)) = (
        std::fs::canonicalize(dir),
        std::fs::canonicalize(opts.signature),
    ) && let Ok(rel) = s.strip_prefix(&d)
        && let Some(rel) = rel.to_str()
    {
        extra.push(rel.to_string());
    }
    let ignore = verify_ignore(&verified, &extra);
    let root =
        fsio::open_dir_path(dir, fsio::Follow::Final).map_err(|e| Error::io(dir, e.into()))?;
    let mut files = Vec::new();
    walk(dir, &root, "", &ignore, &mut files)?;
    if opts.ignore_unsigned {
        let signed: std::collections::HashSet<&str> = verified
            .statement
            .resources
            .iter()
            .map(|r| r.name.as_str())
            .collect();
        files.retain(|f| signed.contains(f.as_str()));
    }
    let total: u64 = files
        .iter()
        .filter_map(|f| fsio::open_file_below(&root, f).ok().map(|(_, len)| len))
        .sum();
    progress.start(crate::progress::Phase::Hash, total);
    let hashed: Vec<Result<(String, [u8; 32], u64)>> = files
        .par_iter()
        .map(|f| {
            let path = dir.join(f);
            let (file, _) = fsio::open_file_below(&root, f).map_err(|e| match e.into_cause() {
                Cause::Io(e) => Error::io(&path, e),
                e => Error::OmsSignature {
                    path: path.clone(),
                    reason: e.to_string(),
                },
            })?;
            progress.item(f);
            let (hex_digest, n) = fsio::hash_file(&file, &|n| progress.advance(n))
                .map_err(|e| Error::io(&path, e))?;
            let mut sha = [0u8; 32];
            hex::decode_to_slice(&hex_digest, &mut sha).expect("own hex");
            Ok((f.clone(), sha, n))
        })
        .collect();
    progress.finish();
    let mut actual = BTreeMap::new();
    let mut bytes = 0;
    for h in hashed {
        let (f, sha, n) = h?;
        bytes += n;
        actual.insert(f, sha);
    }
    let mismatches = compare(&verified, &actual, &ignore, opts.ignore_unsigned);
    if !mismatches.is_empty() {
        return Err(mismatch_error(opts.signature, &mismatches));
    }
    Ok(DirReport {
        verified,
        files: actual.len(),
        bytes,
        ignored: ignore.paths().to_vec(),
    })
}

/// Places the OMS signature a bundle carries into a staged install tree (`tree`, shown as
/// `tree_path`), mode 0644, synced: the directory target's step before its rename. The name
/// is free: the manifest's rules keep it apart from every model file.
pub fn place(
    tree: &impl std::os::fd::AsFd,
    tree_path: &Path,
    carried: Option<&Carried>,
) -> Result<()> {
    match carried {
        Some(c) => crate::durable::write_synced_at(tree, tree_path, &c.name, &c.bytes, 0o644),
        None => Ok(()),
    }
}

/// The name of the site signature in a manifest, if it carries one.
pub fn carried_name(m: &Manifest) -> Option<&str> {
    m.oms
        .as_ref()
        .and_then(|o| o.signature.as_ref())
        .map(|s| s.name.as_str())
}

/// The manifest entry as a file, to compare an install with its receipt.
pub fn as_file_entry(s: &OmsSignature) -> FileEntry {
    FileEntry {
        path: s.name.clone(),
        size: s.size,
        sha256: s.sha256.clone(),
        executable: false,
        from: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ignore_covers_paths_and_what_is_below_them_only() {
        let mut ig = Ignore::git();
        ig.add("sub/x");
        ig.add("../out");
        ig.add("/abs");
        assert!(ig.covers(".git/config"));
        assert!(ig.covers(".gitattributes"));
        assert!(!ig.covers(".gitattributes2"));
        assert!(ig.covers("sub/x/y"));
        assert!(!ig.covers("sub/xy"));
        assert_eq!(ig.paths().len(), 5);
    }

    #[test]
    fn the_site_signature_steps_aside_for_the_publishers() {
        assert_eq!(
            site_signature_name(["a", "b/model.sig"]).unwrap(),
            "model.sig"
        );
        assert_eq!(
            site_signature_name(["a", "model.sig"]).unwrap(),
            "model.airlock.sig"
        );
        assert!(site_signature_name(["Model.sig", "model.airlock.sig"]).is_err());
    }
}

#[cfg(test)]
mod vectors_tests;
