//! `airlock verify FILE`: the minisign signature `FILE.minisig` of one file, checked against the
//! trust set the way `minisign -Vm FILE -p KEY.pub` checks it. This is how an airlock already
//! on the target checks the next airlock release (RUNBOOK.md section 0) without `minisign`
//! there: `scripts/release.sh` signs the binary with `airlock sign`.
//!
//! With a TUF root (`--trust root.json`) a file is held to the same rule as a bundle's
//! manifest (FORMAT.md section 18.2): the root must be current, and the threshold of distinct
//! keys of its `targets` role must sign, counting `FILE.minisig` and the co-signatures
//! `FILE.KEYID.minisig` beside it (`airlock cosign FILE`), read and counted by the code that
//! reads and counts a bundle's `manifest.json.KEYID.minisig`. Only the hashing differs: the
//! file is streamed once into its prehash, which the signatures are checked against. The
//! verdict is the library's ([`signed_file::verify`]); this file renders it.

use std::path::Path;

use airlock::bundle::open::TrustInfo;
use airlock::error::Result;
use airlock::signed_file;
use airlock::trust::Policy;

use super::Output;

/// Whether `path` names one file rather than a directory (a bundle): a regular file, or
/// anything else that exists and is not a directory (a FIFO, a device), which [`run`] then
/// refuses by name. A final link is followed, as the shell would (SECURITY.md section 11).
pub(super) fn is_file(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| !m.is_dir())
}

/// `airlock verify FILE` ([`signed_file::verify`]), rendered.
pub(super) fn run(file: &Path, trust: &Policy) -> Result<Output> {
    let signed_file::Verified { counted, warnings } = signed_file::verify(file, trust)?;
    let mut out = Output::default();
    out.warnings.extend(warnings);
    let (first, first_file) = &counted.signatures[0];
    let signers = &counted.signers;
    out.set("file", file);
    out.set("signature", &first_file.path);
    out.set("signer", signers[0].key.clone());
    let trusted_comment = first.comment.clone().unwrap_or_default();
    out.set("trusted_comment", &trusted_comment);
    out.line(format!(
        "OK   {}: signature{} by {} verified ({}); trusted comment: {}",
        file.display(),
        if signers.len() > 1 { "s" } else { "" },
        signers
            .iter()
            .map(|s| s.key.clone())
            .collect::<Vec<_>>()
            .join(", "),
        signers
            .iter()
            .map(|s| s.file.display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
        trusted_comment
    ));
    let info = TrustInfo {
        signers: counted.signers.clone(),
        policy: Some(trust.clone()),
        ..TrustInfo::default()
    };
    super::report_trust(&mut out, trust, &info);
    Ok(out)
}
