//! `airlock verify FILE`: the minisign signature `FILE.minisig` of one file, checked against the
//! trust set the way `minisign -Vm FILE -p KEY.pub` checks it. This is how an airlock already
//! on the target checks the next airlock release (RUNBOOK.md section 0) without `minisign`
//! there: `scripts/release.sh` signs the binary with `airlock sign`.

use std::path::{Path, PathBuf};

use airlock::error::{Error, Result};
use airlock::keys::{self, PublicKey, Signature};
use airlock::trust::Policy;

use super::Output;

/// Largest `.minisig` read (four short lines; minisign's own limits keep it under 10 KiB).
const MAX_SIGNATURE_BYTES: u64 = 16 << 10;

/// Whether `path` names one regular file (so `verify` checks its signature, not a bundle).
pub(super) fn is_file(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file())
}

/// Verifies `FILE.minisig` over `file` with a key of `trust` (module documentation).
pub(super) fn run(file: &Path, trust: &Policy) -> Result<Output> {
    let mut sig_path = file.as_os_str().to_owned();
    sig_path.push(".minisig");
    let sig_path = PathBuf::from(sig_path);
    let text = match airlock::fsio::read_regular_capped(&sig_path, MAX_SIGNATURE_BYTES, true) {
        Ok(bytes) => String::from_utf8(bytes).map_err(|_| Error::BadSignature {
            path: sig_path.clone(),
            reason: "is not a minisign signature (not UTF-8 text)".into(),
        })?,
        // A file without a signature beside it is the wrong path or an incomplete copy, not a
        // failed verification (exit 1, as for a bundle path that is not a directory).
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(Error::io(
                &sig_path,
                std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    format!(
                        "missing: {} is one file, not a bundle (a directory), and is checked by this signature; copy it beside the file, or name the bundle's directory",
                        file.display()
                    ),
                ),
            ));
        }
        Err(e) => return Err(Error::io(&sig_path, e)),
    };
    let sig = Signature::parse(&text).map_err(|e| Error::BadSignature {
        path: sig_path.clone(),
        reason: e.to_string(),
    })?;
    let key = trust
        .keys
        .iter()
        .find(|k| k.minisign_id == Some(sig.key_id))
        .ok_or_else(|| Error::UntrustedKey {
            path: sig_path.clone(),
            key_id: sig.key_id_hex(),
            trusted: trust
                .keys
                .iter()
                .map(|k| k.label.clone())
                .collect::<Vec<_>>()
                .join(", "),
        })?;
    let public = PublicKey {
        key_id: sig.key_id,
        key: key.public,
    };
    let digest = keys::prehash_file(file).map_err(|e| Error::Key {
        path: file.to_path_buf(),
        source: e,
    })?;
    keys::verify_prehashed(&public, &sig, &digest).map_err(|e| Error::BadSignature {
        path: sig_path.clone(),
        reason: format!(
            "does not verify {} with key {}: {e}",
            file.display(),
            key.label
        ),
    })?;
    let mut out = Output::default();
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    // minisign's trusted comment names the file it signed: a renamed or swapped file shows.
    if let Some(signed) = sig
        .trusted_comment
        .split('\t')
        .find_map(|f| f.strip_prefix("file:"))
        && signed != name
    {
        out.warnings.push(format!(
            "the signature's trusted comment names the file {signed:?}, not {name:?}: check that this is the file that was signed"
        ));
    }
    out.set("file", file);
    out.set("signature", &sig_path);
    out.set("signer", key.label.clone());
    out.set("trusted_comment", &sig.trusted_comment);
    out.line(format!(
        "OK   {}: signature by {} verified ({}); trusted comment: {}",
        file.display(),
        key.label,
        sig_path.display(),
        sig.trusted_comment
    ));
    Ok(out)
}
