//! Keys, signatures and roots written for the operator, the library half of `keygen`, `sign`,
//! `cosign` and `trust init|rotate|sign`: a key pair, a file's signature, a co-signature beside
//! a bundle's manifest or beside a signed file, a TUF root made or signed again. Each is a small
//! file written whole under a temporary name and renamed into place ([`durable::Staged`]); a
//! co-signature is created through its directory's handle, never replacing anything. The
//! commands unlock the keys (a terminal prompt is theirs) and render what these return.

use std::path::{Path, PathBuf};

use crate::bundle::open;
use crate::durable::{self, Place, Staged};
use crate::error::{Error, Result};
use crate::fsio;
use crate::keys::{SecretKey, Signature};
use crate::manifest::{self, Manifest};
use crate::trust::Policy;
use crate::trust::root::Root;

/// How a key or signature file is placed: over an existing one (`--force`) or only where
/// nothing is.
fn place(force: bool) -> Place {
    if force { Place::Replace } else { Place::New }
}

/// Writes a new key pair: both files complete under temporary names before either is renamed
/// into place, so a failure leaves the old pair (with `force`) or nothing; never a new secret
/// key without its `.pub`. The secret key is mode 0600, the public key 0644.
pub fn write_key_pair(secret: (&Path, &[u8]), public: (&Path, &[u8]), force: bool) -> Result<()> {
    let key_file = Staged::write_path(secret.0, secret.1, 0o600)?;
    let pub_file = Staged::write_path(public.0, public.1, 0o644)?;
    key_file.publish(place(force))?;
    pub_file.publish(place(force))
}

/// Writes a file's signature `text` to `path` (mode 0644): over an existing file only with
/// `force`.
pub fn write_signature(path: &Path, text: &[u8], force: bool) -> Result<()> {
    Staged::write_path(path, text, 0o644)?.publish(place(force))
}

/// The place of a new co-signature, checked free before anything is signed: `name` in a
/// directory held by its handle (the directory itself not followed if it is a link).
pub struct CosignatureSlot {
    dir: PathBuf,
    dir_fd: std::os::fd::OwnedFd,
    name: String,
}

impl CosignatureSlot {
    /// The slot `name` in `dir` (`path`, as the operator sees it): refused when the name is
    /// taken, by anything, saying key `key_id` has co-signed this `what`.
    fn claim(dir: &Path, name: &str, path: &Path, key_id: &str, what: &str) -> Result<Self> {
        let dir_fd = durable::open_dir(dir)?;
        if fsio::stat_at(&dir_fd, name).is_ok() {
            return Err(Error::Usage(format!(
                "{}: already exists: key {key_id} has co-signed this {what}",
                path.display()
            )));
        }
        Ok(CosignatureSlot {
            dir: dir.to_path_buf(),
            dir_fd,
            name: name.to_string(),
        })
    }

    /// The slot for the co-signature `name` of the signed file `file`, beside it (`path`, as
    /// the operator sees it), by key `key_id`.
    pub fn beside_file(file: &Path, name: &str, path: &Path, key_id: &str) -> Result<Self> {
        Self::claim(&fsio::parent_dir(file), name, path, key_id, "file")
    }

    /// Writes the co-signature (mode 0644): created under a temporary name through the
    /// directory's handle, synced, renamed into place without replacing anything, the
    /// directory synced.
    pub fn write(self, text: &[u8]) -> Result<()> {
        durable::write_new_at(&self.dir_fd, &self.dir, &self.name, text, 0o644)
    }
}

/// A bundle about to be co-signed: its manifest (read, not verified: the co-signer vouches for
/// these bytes) and the key of its signature.
pub struct BundleToCosign {
    dir: PathBuf,
    /// The manifest as parsed.
    pub manifest: Manifest,
    bytes: Vec<u8>,
    primary: Signature,
}

/// A co-signature written beside a bundle's manifest.
#[derive(Debug)]
pub struct Cosigned {
    /// `manifest.json.KEYID.minisig` in the bundle directory.
    pub signature: PathBuf,
    /// The co-signer's key id (hex).
    pub signer: String,
    /// SHA-256 of the manifest's bytes (hex), which the trusted comment names.
    pub manifest_sha256: String,
}

/// Whether a bundle or file meets a trust policy's threshold after a co-signature.
#[derive(Debug)]
pub enum Standing {
    /// It does: the key ids of the signers counted.
    Meets(Vec<String>),
    /// Not yet: what is missing.
    Short(String),
}

impl BundleToCosign {
    /// Reads the bundle in `dir` for `cosign`: its manifest and the key that signed it (a
    /// bundle without `manifest.json.minisig` is refused: a co-signature joins a signature).
    pub fn read(dir: &Path) -> Result<BundleToCosign> {
        let (manifest, bytes, primary) = open::read_unverified(dir)?;
        let Some(primary) = primary else {
            return Err(Error::MissingSignature {
                path: dir.join(manifest::SIGNATURE_NAME),
            });
        };
        Ok(BundleToCosign {
            dir: dir.to_path_buf(),
            manifest,
            bytes,
            primary,
        })
    }

    /// Signs the manifest with `key` (read from `key_path`, named in errors) and writes the
    /// co-signature `manifest.json.KEYID.minisig` beside it. Refused when `key` made the
    /// bundle's signature or has co-signed it already. The volumes are not touched.
    pub fn cosign(&self, key: &SecretKey, key_path: &Path) -> Result<Cosigned> {
        let dir = &self.dir;
        let pk = key.public_key();
        let id = pk.key_id_hex();
        if self.primary.key_id == pk.key_id {
            return Err(Error::Usage(format!(
                "{}: already signed by key {id} ({}); a co-signature must come from another key",
                dir.display(),
                manifest::SIGNATURE_NAME
            )));
        }
        let name = open::cosignature_name(&id, crate::scheme::minisign::EXTENSION);
        let path = dir.join(&name);
        let slot = CosignatureSlot::claim(dir, &name, &path, &id, "bundle")?;
        let manifest::Signed {
            signature,
            manifest_sha256,
        } = manifest::sign(key, &self.manifest, &self.bytes).map_err(|e| Error::Key {
            path: key_path.to_path_buf(),
            source: e,
        })?;
        slot.write(&signature)?;
        Ok(Cosigned {
            signature: path,
            signer: id,
            manifest_sha256,
        })
    }

    /// Whether the bundle now has the signatures `policy` needs (its signatures verified as
    /// `verify` does); any other failure is the error.
    pub fn standing(&self, policy: &Policy) -> Result<Standing> {
        match open::open_with(&self.dir, policy) {
            Ok(o) => Ok(Standing::Meets(
                o.trust.signers.iter().map(|s| s.key.clone()).collect(),
            )),
            Err(Error::SignatureThreshold { detail, .. }) => Ok(Standing::Short(detail)),
            Err(e) => Err(e),
        }
    }
}

/// Writes the new TUF root `root` to `path` (mode 0644), which must not exist.
pub fn write_new_root(path: &Path, root: &Root) -> Result<()> {
    if std::fs::symlink_metadata(path).is_ok() {
        return Err(Error::Usage(format!(
            "{} already exists; choose a new file",
            path.display()
        )));
    }
    Staged::write_path(path, &root.to_bytes(), 0o644)?.publish(Place::New)
}

/// A TUF root about to be signed by one more root key (`trust sign`): read, with the version
/// before it when the signature is for a rotation (`--previous`).
pub struct RootToSign {
    path: PathBuf,
    mode: u32,
    /// The root.
    pub root: Root,
    /// The version before it (`--previous`).
    pub previous: Option<Root>,
}

/// A root signed and written back by [`RootToSign::sign`].
pub struct SignedRoot {
    /// The root as written.
    pub root: Root,
    /// The version before it, when given.
    pub previous: Option<Root>,
    /// The signer's minisign key id (hex).
    pub signer: String,
    /// What the key is to the root: `a root key of version 3`, `a root key of the previous
    /// version 2`.
    pub role: String,
    /// Whether the key's earlier signature was replaced.
    pub replaced: bool,
}

impl RootToSign {
    /// Reads the root file `path` (a regular file, not a link: sign rewrites the file
    /// itself) and the `previous` version's.
    pub fn read(path: &Path, previous: Option<&Path>) -> Result<RootToSign> {
        use std::os::unix::fs::PermissionsExt;
        let meta = std::fs::symlink_metadata(path).map_err(|e| Error::io(path, e))?;
        if !meta.is_file() {
            return Err(Error::Usage(format!(
                "{} is not a regular file (a link?): sign rewrites the file itself",
                path.display()
            )));
        }
        let (root, _) = crate::trust::update::read_root(path)?;
        let previous = match previous {
            Some(p) => Some(crate::trust::update::read_root(p)?.0),
            None => None,
        };
        Ok(RootToSign {
            path: path.to_path_buf(),
            mode: meta.permissions().mode() & 0o777,
            root,
            previous,
        })
    }

    /// Signs the root with `key`, a root key of this version or (for a rotation) of the
    /// previous one, and replaces the file atomically, keeping its mode.
    pub fn sign(self, key: &SecretKey) -> Result<SignedRoot> {
        use crate::trust::root::ROOT;
        let RootToSign {
            path,
            mode,
            mut root,
            previous,
        } = self;
        let pk = key.public_key();
        let in_root = |x: &Root| x.role_keys(ROOT).iter().any(|k| k.public == pk.key);
        let role = if in_root(&root) {
            format!("a root key of version {}", root.version)
        } else {
            match &previous {
                Some(p) if p.version + 1 == root.version && in_root(p) => {
                    format!("a root key of the previous version {}", p.version)
                }
                Some(p) if p.version + 1 != root.version => {
                    return Err(Error::Usage(format!(
                        "--previous is version {}, not the version before {} (version {})",
                        p.version,
                        path.display(),
                        root.version
                    )));
                }
                _ => {
                    return Err(Error::Usage(format!(
                        "key {} is not a root key of {} version {}{}: only root keys sign a root",
                        pk.key_id_hex(),
                        path.display(),
                        root.version,
                        if previous.is_some() {
                            " nor of --previous"
                        } else {
                            " (signing a rotation with an old root key? add --previous OLD_ROOT)"
                        }
                    )));
                }
            }
        };
        let replaced = root.sign(key);
        Staged::write_path(&path, &root.to_bytes(), mode)?.publish(Place::Replace)?;
        Ok(SignedRoot {
            root,
            previous,
            signer: pk.key_id_hex(),
            role,
            replaced,
        })
    }
}

/// The verdict of `trust show` on the root `r` read from `path` (and, with `previous`, as a
/// rotation from that version, read from its path): `None` when it is signed well enough to
/// be trusted (and to replace the previous version), is not expired at `clock`.
pub fn root_verdict(
    path: &Path,
    r: &Root,
    previous: Option<(&Path, &Root)>,
    clock: crate::trust::Clock,
) -> Option<Error> {
    use crate::trust::root::{self, ROOT};
    let mut error = None;
    if let Some((p, prev)) = previous
        && let Err(why) = root::verify_rotation(prev, r)
    {
        error = Some(Error::TrustUpdate {
            path: path.to_path_buf(),
            reason: format!(
                "as a rotation from {}: version {} {why}",
                p.display(),
                r.version
            ),
        });
    }
    let own = r.verification(ROOT, r);
    if !own.ok() {
        error = Some(Error::TrustRoot {
            path: path.to_path_buf(),
            reason: format!(
                "root version {} is not (yet) signed by the threshold of its own root keys: {}",
                r.version,
                own.describe()
            ),
        });
    } else if error.is_none() && r.is_expired(clock.now) {
        error = Some(crate::trust::policy::expired(path, r, clock));
    }
    error
}

/// The most a password file is read: a password is one line; `/dev/zero` or a multi-gigabyte
/// file given by mistake must not be read to the end.
const PASSWORD_FILE_CAP: u64 = 64 << 10;

/// Reads a password from the first line of a file. A FIFO (`--password-file <(pass show k)`)
/// works; at most [`PASSWORD_FILE_CAP`] bytes are read.
pub fn read_password_file(path: &Path) -> Result<zeroize::Zeroizing<Vec<u8>>> {
    use std::io::Read;
    let file = fsio::open_operator_stream(path).map_err(|e| Error::io(path, e.into()))?;
    let mut text = zeroize::Zeroizing::new(Vec::new());
    file.take(PASSWORD_FILE_CAP + 1)
        .read_to_end(&mut text)
        .map_err(|e| Error::io(path, e))?;
    if text.len() as u64 > PASSWORD_FILE_CAP && !text[..PASSWORD_FILE_CAP as usize].contains(&b'\n')
    {
        return Err(Error::io(
            path,
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!(
                    "not a password file: no line break in its first {} KiB",
                    PASSWORD_FILE_CAP >> 10
                ),
            ),
        ));
    }
    let line = text.split(|&b| b == b'\n').next().unwrap_or(&[]);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    Ok(zeroize::Zeroizing::new(line.to_vec()))
}

/// The most read of a secret key file (minisign's are under 1 KiB).
const SECRET_KEY_FILE_CAP: u64 = 64 << 10;

/// Reads the secret key file `path` as text: a regular file (a final link followed, as the
/// shell would) of at most 64 KiB, UTF-8. Not decoded nor decrypted.
pub fn read_secret_key_file(path: &Path) -> Result<zeroize::Zeroizing<String>> {
    let bytes = zeroize::Zeroizing::new(
        fsio::read_capped(path, SECRET_KEY_FILE_CAP, fsio::Follow::Final)
            .map_err(|e| Error::io(path, e.into()))?,
    );
    Ok(zeroize::Zeroizing::new(
        std::str::from_utf8(&bytes)
            .map_err(|_| {
                Error::io(
                    path,
                    std::io::Error::new(std::io::ErrorKind::InvalidData, "is not UTF-8 text"),
                )
            })?
            .to_owned(),
    ))
}
