//! `airlock sign FILE --key K`: a minisign signature of any file (`FILE.minisig`), for what has
//! to cross the gap before airlock can check anything itself, such as airlock's own release
//! binary. Stock `minisign -Vm FILE -p K.pub` verifies it: the signature is prehashed (`ED`), as
//! `minisign -S` writes by default, with minisign's trusted comment.
//!
//! `airlock cosign FILE --key K` ([`cosign_file`]) adds a second signer's `FILE.KEYID.minisig`,
//! the co-signature `airlock verify FILE` counts under a TUF root whose targets role needs
//! several signers, as `airlock cosign BUNDLE` adds `manifest.json.KEYID.minisig`.

use std::path::{Path, PathBuf};

use airlock::bundle::open;
use airlock::error::{Error, Result};
use airlock::keys::{self, SecretKey, TRUSTED_COMMENT_MAX_BYTES};
use airlock::scheme::{Message, Minisign, MinisignSigner, Scheme, Signer};

use airlock::signed_file;
use airlock::signing::{self, CosignatureSlot};

use super::files;
use super::ui::Ui;
use super::{Output, secret, trust_clock, trust_source};
use crate::cli::{CosignArgs, SignArgs};

pub fn run(a: SignArgs, ui: &Ui) -> Result<Output> {
    let meta = std::fs::metadata(&a.file).map_err(|e| Error::io(&a.file, e))?;
    if !meta.is_file() {
        return Err(Error::Usage(format!(
            "{} is not a regular file: sign signs one file",
            a.file.display()
        )));
    }
    let sig_path = a.output.clone().unwrap_or_else(|| {
        let mut s = a.file.as_os_str().to_owned();
        s.push(".minisig");
        PathBuf::from(s)
    });
    // Even with --force, the signature never replaces the key or the file it signs.
    files::refuse_overwriting(
        &sig_path,
        &[
            (&a.key, "the secret key"),
            (&a.file, "the file being signed"),
        ],
    )?;
    if !a.force && std::fs::symlink_metadata(&sig_path).is_ok() {
        return Err(Error::Usage(format!(
            "{} already exists; pass --force to overwrite it",
            sig_path.display()
        )));
    }
    let trusted_comment = match &a.trusted_comment {
        Some(c) => c.clone(),
        None => default_trusted_comment(&a.file)?,
    };
    if trusted_comment.len() > TRUSTED_COMMENT_MAX_BYTES
        || trusted_comment.chars().any(|c| c != '\t' && c.is_control())
    {
        return Err(Error::Usage(format!(
            "--trusted-comment must be one line of at most {TRUSTED_COMMENT_MAX_BYTES} bytes without control characters (TAB is allowed)"
        )));
    }
    let key_file = secret::read(&a.key, a.password_file.as_deref())?;
    let digest = keys::prehash_file(&a.file).map_err(|e| Error::Key {
        path: a.file.clone(),
        source: e,
    })?;
    let key = secret::unlock(key_file, ui)?;
    let sig = sign_digest(&key, &a.key, &digest, &trusted_comment)?;
    signing::write_signature(&sig_path, &sig, a.force)?;
    let key_id = key.public_key().key_id_hex();
    let mut out = Output::default();
    out.set("file", &a.file);
    out.set("signature", &sig_path);
    out.set("signer", &key_id);
    out.set("trusted_comment", &trusted_comment);
    out.line(format!(
        "OK   signed {} with key {key_id} into {} (check with `minisign -Vm {} -p KEY.pub`)",
        a.file.display(),
        sig_path.display(),
        a.file.display()
    ));
    Ok(out)
}

/// minisign's trusted comment for `file`: `timestamp:SECONDS<TAB>file:NAME<TAB>hashed`.
fn default_trusted_comment(file: &Path) -> Result<String> {
    Ok(format!(
        "timestamp:{}\tfile:{}\thashed",
        super::pack::created_unix()?,
        file.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    ))
}

/// `airlock cosign FILE --key K`: one more signature of a file already signed (`FILE.minisig`
/// beside it, by another key), written as `FILE.KEYID.minisig` exactly as `sign` writes
/// `FILE.minisig` (prehashed, minisign's trusted comment), created exclusively through the
/// directory's handle and never replacing anything, as a bundle's co-signature is. With
/// `--trust`, says whether the file now has the signatures its trust policy needs.
pub fn cosign_file(a: CosignArgs, ui: &Ui) -> Result<Output> {
    let file = &a.bundle;
    let meta = std::fs::metadata(file).map_err(|e| Error::io(file, e))?;
    if !meta.is_file() {
        return Err(Error::Usage(format!(
            "{} is not a regular file: cosign co-signs a bundle (a directory) or one file",
            file.display()
        )));
    }
    let name = signed_file::file_name(file)?
        .to_str()
        .ok_or_else(|| {
            Error::Usage(format!(
                "{}: the file name is not UTF-8; rename the file, then sign and co-sign it",
                file.display()
            ))
        })?
        .to_owned();
    let sig_path = signed_file::signature_path(file);
    if std::fs::symlink_metadata(&sig_path).is_err() {
        return Err(Error::Usage(format!(
            "{}: missing: a file is signed first (`airlock sign {} --key K` writes it), then co-signed by other keys",
            sig_path.display(),
            file.display()
        )));
    }
    let primary = Minisign
        .signer_of(signed_file::read_signature(&sig_path, file)?.as_bytes())
        .map_err(|e| Error::BadSignature {
            path: sig_path.clone(),
            reason: e.reason(),
        })?;
    let key_file = secret::read(&a.key, a.password_file.as_deref())?;
    let digest = keys::prehash_file(file).map_err(|e| Error::Key {
        path: file.clone(),
        source: e,
    })?;
    let key = secret::unlock(key_file, ui)?;
    let id = key.public_key().key_id_hex();
    if primary == id {
        return Err(Error::Usage(format!(
            "{}: already signed by key {id} ({}); a co-signature must come from another key",
            file.display(),
            sig_path.display()
        )));
    }
    let cosig_name = open::cosignature_name_of(
        std::ffi::OsStr::new(&name),
        &id,
        airlock::scheme::minisign::EXTENSION,
    )
    .into_string()
    .expect("UTF-8 name and hex id");
    let cosig_path = signed_file::beside(file, std::ffi::OsStr::new(&cosig_name));
    let slot = CosignatureSlot::beside_file(file, &cosig_name, &cosig_path, &id)?;
    let trusted_comment = default_trusted_comment(file)?;
    let sig = sign_digest(&key, &a.key, &digest, &trusted_comment)?;
    slot.write(&sig)?;
    let mut out = Output::default();
    out.set("file", file);
    out.set("signature", &cosig_path);
    out.set("signer", &id);
    out.set("trusted_comment", &trusted_comment);
    out.line(format!(
        "OK   co-signed {} with key {id} into {} (check with `minisign -Vm {} -x {} -p KEY.pub`)",
        file.display(),
        cosig_path.display(),
        file.display(),
        cosig_path.display()
    ));
    let source = trust_source(&a.trust)?;
    if let Some(policy) = source.load_at(trust_clock(a.trust.assume_now.as_deref())?)? {
        match signed_file::verify(file, &policy) {
            Ok(_) => out.line(format!("the file now meets {}", policy.describe())),
            Err(Error::SignatureThreshold { detail, .. }) => {
                out.line(format!("not yet enough signatures: {detail}"))
            }
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

/// Signs a file's prehashed `digest` as `sign` and `cosign FILE` do (minisign's prehashed
/// signature, airlock's untrusted comment); a failure names the key file `key_path`. Returns the
/// signature file's bytes.
fn sign_digest(
    key: &SecretKey,
    key_path: &Path,
    digest: &[u8; 64],
    trusted_comment: &str,
) -> Result<Vec<u8>> {
    MinisignSigner(key)
        .sign(Message::Prehashed(digest), trusted_comment)
        .map_err(|e| Error::Key {
            path: key_path.to_path_buf(),
            source: e,
        })
}
