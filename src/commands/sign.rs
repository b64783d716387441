//! `airlock sign FILE --key K`: a minisign signature of any file (`FILE.minisig`), for what has
//! to cross the gap before airlock can check anything itself, such as airlock's own release
//! binary. Stock `minisign -Vm FILE -p K.pub` verifies it: the signature is prehashed (`ED`), as
//! `minisign -S` writes by default, with minisign's trusted comment.

use std::path::PathBuf;

use airlock::error::{Error, Result};
use airlock::keys::{self, TRUSTED_COMMENT_MAX_BYTES};

use super::files::{self, Staged};
use super::ui::Ui;
use super::{Output, secret};
use crate::cli::SignArgs;

/// The untrusted comment, like minisign's "signature from minisign secret key".
const UNTRUSTED_COMMENT: &str = "signature from airlock secret key";

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
        None => format!(
            "timestamp:{}\tfile:{}\thashed",
            super::pack::created_unix()?,
            a.file
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        ),
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
    let sig =
        keys::sign_prehashed(&key, &digest, UNTRUSTED_COMMENT, &trusted_comment).map_err(|e| {
            Error::Key {
                path: a.key.clone(),
                source: e,
            }
        })?;
    Staged::write(&sig_path, sig.to_file_text().as_bytes(), 0o644)?.publish(a.force)?;
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
