//! `airlock check`: receipt re-verification and model-format lint; also the model checks that
//! `pack` runs first.

use std::path::Path;

use airlock::bundle::read;
use airlock::error::{Error, Result};
use airlock::inspect::{self, Finding, Severity};
use airlock::keys::PublicKey;
use airlock::manifest::{self, Warning};
use airlock::paths::RECEIPT_DIR;
use airlock::progress::Progress;
use airlock::receipt;

use super::Output;
use crate::cli::{CheckArgs, TrustArgs};

fn finding_line(f: &Finding) -> String {
    let sev = match f.severity {
        Severity::Error => "ERROR",
        Severity::Warning => "WARN ",
    };
    format!(
        "{sev} {}: {} [{}]\n      fix: {}",
        f.path, f.problem, f.code, f.fix
    )
}

/// Runs the model checks before a pack. Errors stop the pack unless `skip_errors`; every
/// finding is returned as a manifest warning when the pack goes on.
pub fn model_checks_for_pack(
    dir: &Path,
    skip_errors: bool,
    out: &mut Output,
) -> Result<Vec<Warning>> {
    let findings = inspect::check_tree(dir).map_err(|e| Error::io(dir, e))?;
    let errors: Vec<&Finding> = findings
        .iter()
        .filter(|f| f.severity == Severity::Error)
        .collect();
    if !errors.is_empty() && !skip_errors {
        out.set("findings", &findings);
        for f in &findings {
            out.line(finding_line(f));
        }
        return Err(Error::ModelChecks {
            count: errors.len(),
            first: format!(
                "{}: {} Fix: {}",
                errors[0].path, errors[0].problem, errors[0].fix
            ),
        });
    }
    for f in &findings {
        out.warnings
            .push(format!("{}: {} ({})", f.path, f.problem, f.fix));
    }
    Ok(findings
        .into_iter()
        .map(|f| Warning {
            path: f.path,
            code: f.code.to_string(),
            problem: f.problem,
        })
        .collect())
}

pub fn run(mut a: CheckArgs, ui: &dyn Progress) -> Result<Output> {
    if a.trust.is_empty()
        && let Some(env) = std::env::var_os("AIRLOCK_TRUST")
    {
        a.trust.push(env.into());
    }
    let dir = &a.dir;
    let meta = std::fs::metadata(dir).map_err(|e| Error::io(dir, e))?;
    if !meta.is_dir() {
        return Err(Error::Usage(format!(
            "{} is not a directory",
            dir.display()
        )));
    }
    let mut out = Output::default();
    let receipt_dir = dir.join(RECEIPT_DIR);
    let manifest_path = receipt_dir.join(manifest::MANIFEST_NAME);
    let has_receipt = manifest_path.exists();
    out.set("receipt", has_receipt);
    let mut receipt_error = None;
    if has_receipt {
        let m = if a.trust.is_empty() {
            let bytes = std::fs::read(&manifest_path).map_err(|e| Error::io(&manifest_path, e))?;
            manifest::Manifest::parse(&bytes).map_err(|reason| Error::BadManifest {
                path: manifest_path.clone(),
                reason,
            })?
        } else {
            let trust: Vec<PublicKey> = super::load_trust(&TrustArgs {
                trust: a.trust.clone(),
            })?;
            let read::Signed {
                manifest: m,
                signer,
                warnings,
                ..
            } = read::verify_signed(
                &manifest_path,
                &receipt_dir.join(manifest::SIGNATURE_NAME),
                &trust,
            )?;
            out.warnings.extend(warnings);
            out.set("receipt_signer", signer.key_id_hex());
            m
        };
        out.set("name", &m.name);
        out.set("version", m.version);
        let drift = receipt::compare(dir, &m, a.sizes_only, ui)?;
        out.set("sizes_only", a.sizes_only);
        out.set("files_checked", m.files.len());
        out.set("drift", &drift);
        for d in &drift {
            out.line(format!("ERROR {}: {} [{}]", d.path, d.detail, d.kind));
        }
        if let Some(first) = drift.first() {
            receipt_error = Some(Error::ReceiptMismatch {
                path: dir.clone(),
                count: drift.len(),
                first: format!("{}: {}", first.path, first.detail),
            });
        } else {
            out.line(format!(
                "OK   {} version {}: {} files match the receipt{}{}",
                m.name,
                m.version,
                m.files.len(),
                if a.sizes_only { " (sizes only)" } else { "" },
                if a.trust.is_empty() {
                    ""
                } else {
                    ", receipt signature verified"
                }
            ));
        }
    } else if !a.trust.is_empty() {
        return Err(Error::MissingSignature {
            path: manifest_path,
        });
    }
    let findings = inspect::check_tree(dir).map_err(|e| Error::io(dir, e))?;
    let findings: Vec<Finding> = findings
        .into_iter()
        .filter(|f| f.path != RECEIPT_DIR && !f.path.starts_with(".airlock/"))
        .collect();
    for f in &findings {
        out.line(finding_line(f));
    }
    let errors = findings
        .iter()
        .filter(|f| f.severity == Severity::Error)
        .count();
    let warnings = findings.len() - errors;
    out.set("findings", &findings);
    out.line(format!(
        "{} error(s), {} warning(s) from the model checks",
        errors, warnings
    ));
    if let Some(e) = receipt_error {
        out.error = Some(e);
    } else if errors > 0 {
        let first = findings
            .iter()
            .find(|f| f.severity == Severity::Error)
            .expect("counted");
        out.error = Some(Error::ModelChecks {
            count: errors,
            first: format!("{}: {}", first.path, first.problem),
        });
    }
    Ok(out)
}
