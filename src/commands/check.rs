//! `airlock check`: receipt re-verification and model-format lint; also the model checks that
//! `pack` runs first.

use std::path::Path;

use airlock::bundle::read;
use airlock::error::{Error, Result};
use airlock::hfcache;
use airlock::inspect::{self, Finding, Severity};
use airlock::keys::PublicKey;
use airlock::manifest::{self, Warning};
use airlock::paths::RECEIPT_DIR;
use airlock::progress::Progress;
use airlock::receipt;

use super::Output;
use crate::cli::{CheckArgs, RepoTypeArg, TrustArgs};

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
    gate_findings(findings, skip_errors, out)
}

/// Stops a pack on error findings unless `skip_errors`; otherwise reports every finding as a
/// warning and returns them for the manifest.
pub fn gate_findings(
    findings: Vec<Finding>,
    skip_errors: bool,
    out: &mut Output,
) -> Result<Vec<Warning>> {
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
            first: format!("{}: {}", errors[0].path, errors[0].problem),
            fix: errors[0].fix.clone(),
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

/// `airlock check --hf-cache DIR [--hf-repo ORG/NAME]`.
fn run_hf(cache: &Path, a: &CheckArgs, ui: &dyn Progress) -> Result<Output> {
    let repo_type = a.repo_type.unwrap_or(RepoTypeArg::Model).as_str();
    let only = a.hf_repo.as_deref().map(|id| (repo_type, id));
    let report = hfcache::check_cache(cache, only, ui)?;
    let mut out = Output::default();
    out.set("hf_cache", cache);
    out.set("repos", &report.repos);
    out.set("blobs_checked", report.blobs_checked);
    out.set("bytes_checked", report.bytes_checked);
    out.set("problems", &report.problems);
    out.warnings.extend(report.notes.iter().cloned());
    for p in &report.problems {
        out.line(format!(
            "BAD  {}: {} [{}]",
            p.path.display(),
            p.problem,
            p.kind
        ));
    }
    match report.problems.first() {
        Some(first) => {
            out.error = Some(Error::HfCache {
                path: cache.to_path_buf(),
                reason: format!(
                    "{} problem(s) in the cache; the first: {}: {}",
                    report.problems.len(),
                    first.path.display(),
                    first.problem
                ),
            });
        }
        None => out.line(format!(
            "OK   {} blob(s) in {} repositories match their names ({})",
            report.blobs_checked,
            report.repos.len(),
            airlock::error::human(report.bytes_checked)
        )),
    }
    Ok(out)
}

pub fn run(mut a: CheckArgs, ui: &dyn Progress) -> Result<Output> {
    super::only_with(
        "--hf-cache",
        a.hf_cache.is_some(),
        &[
            ("--hf-repo", a.hf_repo.is_some()),
            ("--repo-type", a.repo_type.is_some()),
        ],
    )?;
    if let Some(cache) = &a.hf_cache {
        let cache = std::path::absolute(cache).map_err(|e| Error::io(cache, e))?;
        return run_hf(&cache, &a, ui);
    }
    let dir = &a.dir.clone().expect("clap requires DIR without --hf-cache");
    // AIRLOCK_TRUST verifies receipts; a plain directory without one is still just linted.
    if a.trust.is_empty()
        && dir.join(RECEIPT_DIR).join(manifest::MANIFEST_NAME).exists()
        && let Some(env) = std::env::var_os("AIRLOCK_TRUST")
    {
        a.trust.push(env.into());
    }
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
        .map(|mut f| {
            // Installed by airlock: the fix is on this side of the gap (unpack again).
            if has_receipt {
                f.fix = airlock::error::fix_for_installed(&f.fix);
            }
            f
        })
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
            fix: first.fix.clone(),
        });
    }
    Ok(out)
}
