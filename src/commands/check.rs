//! `airlock check`: receipt re-verification and model-format lint; also the model checks that
//! `pack` runs first.

use std::path::Path;

use airlock::display::{count, human};
use airlock::error::{Error, Result};
use airlock::hfcache;
use airlock::inspect::values;
use airlock::inspect::{self, Finding, Severity};
use airlock::paths::RECEIPT_DIR;
use airlock::progress::Progress;
use airlock::receipt;
use airlock::trust::policy::Signer;
use airlock::trust::{Policy, TRUST_ENV, TrustSource};

use super::Output;
use crate::cli::{CheckArgs, RepoTypeArg, TrustArgs};

/// A finding as two lines: what is wrong, then the fix (each line is escaped as it is
/// printed, so a line break in a name cannot make a line of its own).
pub(super) fn finding_lines(f: &Finding) -> [String; 2] {
    let sev = match f.severity {
        Severity::Error => "ERROR",
        Severity::Warning => "WARN ",
    };
    [
        format!("{sev} {}: {} [{}]", f.path, f.problem, f.code),
        format!("      fix: {}", f.fix),
    ]
}

/// A snapshot folder passed as DIR: its links leave the folder, so the directory lint would
/// report each one; the cache check is what was meant.
fn snapshot_folder_error(dir: &Path, snap: &hfcache::SnapshotPath) -> Error {
    let mut flags = format!(
        "--hf-cache {} --hf-repo {}",
        snap.cache.display(),
        snap.repo_id
    );
    if snap.repo_type != "model" {
        flags.push_str(&format!(" --repo-type {}", snap.repo_type));
    }
    Error::Usage(format!(
        "{} is a snapshot folder of the Hugging Face cache {}: its files are links into the repository's blobs/, which a directory check does not follow. Check it in the cache instead (every blob against its hash, every snapshot through the model checks): airlock check {flags}",
        dir.display(),
        snap.cache.display()
    ))
}

/// The one line that counts everything `check DIR` found: the receipt comparison's problems
/// (when there was a receipt to compare with) and the model checks' findings together, so an
/// `ERROR` line above is never followed by "0 error(s)".
fn summary(drift: Option<usize>, errors: usize, warnings: usize) -> String {
    match drift {
        None => format!("{errors} error(s), {warnings} warning(s) from the model checks"),
        Some(d) => format!(
            "{} error(s), {warnings} warning(s) ({d} against the receipt, {errors} error(s) and {warnings} warning(s) from the model checks)",
            d + errors
        ),
    }
}

/// Whether `dir` holds nothing named `.airlock` (of any type): airlock never installed it.
/// Anything else (present, a link, unreadable) counts as an install.
fn never_installed(dir: &Path) -> bool {
    matches!(
        std::fs::symlink_metadata(dir.join(RECEIPT_DIR)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound
    )
}

/// `airlock check --hf-cache DIR [--hf-repo ORG/NAME]`.
fn run_hf(cache: &Path, a: &CheckArgs, ui: &dyn Progress) -> Result<Output> {
    let repo_type = a.repo_type.unwrap_or(RepoTypeArg::Model).as_str();
    let only = a.hf_repo.as_deref().map(|id| (repo_type, id));
    if a.offline_ready && a.hf_repo.is_none() {
        return Err(Error::Usage(
            "--offline-ready with --hf-cache needs --hf-repo ORG/NAME: the repository whose loading to check".into(),
        ));
    }
    let report = hfcache::check_cache_scanning(cache, only, !a.no_value_scan, ui)?;
    let mut out = Output::default();
    out.set("hf_cache", cache);
    out.set("repos", &report.repos);
    out.set("blobs_checked", report.blobs_checked);
    out.set("bytes_checked", report.bytes_checked);
    out.set("problems", &report.problems);
    if !a.no_value_scan {
        out.set("values", &report.scanned);
    }
    out.warnings.extend(report.notes.iter().cloned());
    for p in &report.problems {
        out.line(format!(
            "BAD  {}: {} [{}]",
            p.path.display(),
            p.problem,
            p.kind
        ));
    }
    let offline = match (&a.hf_repo, a.offline_ready) {
        (Some(id), true) => {
            let found =
                hfcache::offline::check_cached(cache, repo_type, id, hfcache::DEFAULT_REVISION)
                    .map_err(|e| Error::io(cache, e))?;
            for f in &found {
                out.lines.extend(finding_lines(f));
            }
            say_offline(&found, report.problems.len(), &mut out);
            found
        }
        _ => Vec::new(),
    };
    match report.problems.first() {
        Some(first) => {
            out.error = Some(Error::CacheDamaged {
                path: cache.to_path_buf(),
                count: report.problems.len(),
                first: format!("{}: {}", first.path.display(), first.problem),
                installed_by_airlock: report.damage_is_airlock_installed(),
            });
        }
        None => out.line(format!(
            "OK   {} in {} match their names ({}); {} snapshot(s) passed the model checks",
            count(report.blobs_checked, "blob"),
            count(report.repos.len() as u64, "repository"),
            human(report.bytes_checked),
            report
                .repos
                .iter()
                .map(|r| r.snapshots.len())
                .sum::<usize>()
        )),
    }
    let offline_errors: Vec<&Finding> = offline
        .iter()
        .filter(|f| f.severity == Severity::Error)
        .collect();
    if let (None, Some(first)) = (&out.error, offline_errors.first()) {
        out.error = Some(Error::ModelChecks {
            count: offline_errors.len(),
            first: format!("{}: {}", first.path, first.problem),
            fix: first.fix.clone(),
        });
    }
    if !report.scanned.is_empty() {
        let summaries: Vec<&values::Summary> = report.scanned.iter().map(|s| &s.summary).collect();
        out.line(format!(
            "     value scan: {}",
            super::values::scanned(&summaries)
        ));
    }
    Ok(out)
}

/// `--oms-trust` / `--oms-cert-chain`: DIR against its OMS signature, before anything else.
/// In an airlock install the receipt directory and airlock's own signature beside a
/// publisher's are left out (`check --trust` covers them against the receipt).
fn oms_check(
    dir: &Path,
    a: &CheckArgs,
    has_receipt: bool,
    ui: &dyn Progress,
    out: &mut Output,
) -> Result<()> {
    use airlock::oms::{self, TrustMaterial};
    let trust = match (&a.oms_trust, a.oms_cert_chain.is_empty()) {
        (Some(k), _) => TrustMaterial::Key(oms::load_public_key(k)?),
        (None, false) => TrustMaterial::Certificates(oms::load_certificates(&a.oms_cert_chain)?),
        (None, true) => {
            if a.oms_signature.is_some() || !a.oms_ignore.is_empty() || a.oms_ignore_unsigned {
                return Err(Error::Usage(
                    "--oms-signature, --oms-ignore and --oms-ignore-unsigned go with --oms-trust or --oms-cert-chain".into(),
                ));
            }
            return Ok(());
        }
    };
    let signature = a
        .oms_signature
        .clone()
        .unwrap_or_else(|| dir.join(airlock::manifest::OMS_SIGNATURE_NAME));
    let mut ignore = a.oms_ignore.clone();
    if has_receipt {
        ignore.push(RECEIPT_DIR.to_string());
        ignore.push(airlock::manifest::OMS_SIGNATURE_NAME_BESIDE_PUBLISHER.to_string());
    }
    let report = oms::verify_dir(
        dir,
        &oms::DirOptions {
            signature: &signature,
            trust: &trust,
            ignore,
            ignore_unsigned: a.oms_ignore_unsigned,
        },
        ui,
    )?;
    let v = &report.verified;
    out.warnings.extend(v.notes.iter().cloned());
    out.set(
        "oms",
        serde_json::json!({
            "signature": signature,
            "method": v.method,
            "signer": v.signer,
            "subject": v.subject,
            "model_name": v.statement.model_name,
            "files": report.files,
            "bytes": report.bytes,
            "ignored": report.ignored,
        }),
    );
    out.line(format!(
        "OK   OMS signature {} verified ({} {}{}): {} files match it",
        signature.display(),
        v.method,
        v.signer,
        v.subject
            .as_ref()
            .map(|s| format!(", {s}"))
            .unwrap_or_default(),
        report.files
    ));
    Ok(())
}

pub fn run(a: CheckArgs, ui: &dyn Progress) -> Result<Output> {
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
    if let Some(snap) = hfcache::snapshot_from_path(dir) {
        return Err(snapshot_folder_error(dir, &snap));
    }
    // With a trust set (from --trust or AIRLOCK_TRUST, one rule) the receipt is a verdict:
    // missing, unsigned or untrusted is exit 3. Without one, the files are only linted. So is
    // a directory airlock never installed (nothing named .airlock in it) when the trust comes
    // from AIRLOCK_TRUST, set system-wide: linting any model directory must keep working there.
    // `--trust` on the command line asks for the verdict, and a directory holding .airlock
    // (even an incomplete one) is an install whose receipt must verify.
    let source = super::trust_source(&TrustArgs {
        trust: a.trust.clone(),
        assume_now: None,
    })?;
    let lint_only = matches!(source, TrustSource::Env(_)) && never_installed(dir);
    let trust = if lint_only {
        None
    } else {
        source.load_at(super::trust_clock(a.assume_now.as_deref())?)?
    };
    let clock_warning = trust.as_ref().and_then(|p| p.clock.warning());
    let meta = std::fs::metadata(dir).map_err(|e| Error::io(dir, e))?;
    if !meta.is_dir() {
        return Err(Error::Usage(format!(
            "{} is not a directory",
            dir.display()
        )));
    }
    let mut out = Output::default();
    out.warnings.extend(clock_warning);
    if let Some(p) = &trust {
        out.warnings.extend(p.expiry_warning());
        if let Some(tr) = &p.root {
            out.warnings.extend(tr.notes.iter().cloned());
        }
    }
    let has_receipt = receipt::exists(dir);
    oms_check(dir, &a, has_receipt, ui, &mut out)?;
    // The value scan rides on the receipt comparison's hashing; the model files no receipt
    // lists are read for it on their own. --sizes-only reads no content, so no scan either.
    let scan_values = !a.no_value_scan && !a.sizes_only;
    out.set("receipt", has_receipt);
    out.set("receipt_verified", trust.is_some());
    out.set("lint_only", lint_only);
    if lint_only {
        out.line(format!(
            "lint only: airlock did not install {} (it holds no {RECEIPT_DIR}), so {TRUST_ENV} does not apply; pass --trust to insist on a signed receipt",
            dir.display()
        ));
    }
    let compared = if has_receipt || trust.is_some() {
        compare_receipt(dir, &a, trust.as_ref(), scan_values, ui, &mut out)?
    } else {
        Compared {
            unlisted_files: true,
            ..Compared::default()
        }
    };
    let findings = model_findings(
        dir,
        scan_values,
        has_receipt,
        compared.checks,
        compared.scans,
        &compared.hashed,
        compared.unlisted_files,
        ui,
        &mut out,
    )?;
    let findings = if a.offline_ready {
        with_offline(dir, findings, &mut out)?
    } else {
        findings
    };
    conclude(
        &mut out,
        &findings,
        &compared.recorded,
        compared.drift_count,
        compared.error,
    );
    Ok(out)
}

/// `--offline-ready` on a directory: the offline-readiness findings joined to the model
/// checks' (any repository the model needs is a warning: the target's cache is not known here),
/// and the verdict in a line and in the JSON (`offline_ready`).
fn with_offline(dir: &Path, mut findings: Vec<Finding>, out: &mut Output) -> Result<Vec<Finding>> {
    let offline = hfcache::offline::check(dir, "", hfcache::offline::Deps::Elsewhere)
        .map_err(|e| Error::io(dir, e))?;
    let other = findings
        .iter()
        .filter(|f| f.severity == Severity::Error)
        .count();
    say_offline(&offline, other, out);
    findings.extend(offline);
    findings.sort_by(|a, b| (&a.path, a.code).cmp(&(&b.path, b.code)));
    Ok(findings)
}

/// The offline-readiness verdict: `offline_ready` (no error among `offline`, and none of the
/// `other` errors the model checks found: a broken file does not load either) and the findings
/// in the JSON, one line for a person.
fn say_offline(offline: &[Finding], other: usize, out: &mut Output) {
    let own = offline
        .iter()
        .filter(|f| f.severity == Severity::Error)
        .count();
    let warnings = offline.len() - own;
    let errors = own + other;
    out.set("offline_ready", errors == 0);
    out.set("offline_findings", offline);
    out.line(if errors == 0 {
        format!(
            "offline-ready: yes, the loaders find everything they look for{}",
            if warnings > 0 {
                format!(" ({warnings} warning(s): what depends on the caller)")
            } else {
                String::new()
            }
        )
    } else {
        format!(
            "offline-ready: no, {errors} error(s): what the loaders look for is not there or does not load{}",
            if warnings > 0 {
                format!(", and {warnings} warning(s)")
            } else {
                String::new()
            }
        )
    });
}

/// What the receipt comparison of `check DIR` found.
#[derive(Default)]
struct Compared {
    /// How many differences (`None`: no receipt was compared).
    drift_count: Option<usize>,
    /// The verdict when anything differs.
    error: Option<Error>,
    /// The files the receipt lists (hashed, and value-scanned in the same read).
    hashed: std::collections::HashSet<String>,
    /// Their value scans.
    scans: receipt::FileScans,
    /// The model checks of the tree, made in the comparison's pass (`None`: no receipt was
    /// compared; the checks walk the tree themselves).
    checks: Option<inspect::TreeChecks>,
    /// Whether the receipt leaves any file unlisted, which the value scan reads when its name
    /// or first bytes make it a model file (without a comparison: unknown, so true).
    unlisted_files: bool,
    /// The findings the packer recorded in the receipt's manifest.
    recorded: Vec<airlock::manifest::Warning>,
}

/// Opens the receipt (verified against `trust` when one is set) and compares `dir` with it:
/// hashes (or sizes), modes, planted files and the recorded value counts.
fn compare_receipt(
    dir: &Path,
    a: &CheckArgs,
    trust: Option<&Policy>,
    scan_values: bool,
    ui: &dyn Progress,
    out: &mut Output,
) -> Result<Compared> {
    let opened = receipt::open(dir, trust)?;
    out.warnings.extend(opened.warnings);
    if let Some(signer) = &opened.signer {
        out.set("receipt_signer", signer);
        out.set("receipt_signers", &opened.signers);
    }
    if let Some(p) = trust {
        say_signers(p, opened.vouched_by, &opened.signers, out);
    }
    let m = opened.manifest;
    out.set("name", &m.name);
    out.set("version", m.version);
    let mut drift = receipt::planted(dir)?;
    // The model checks ride on the comparison: each file opened and read once.
    let receipt::Comparison {
        drift: compared,
        scans,
        checks,
    } = receipt::compare_checking(dir, &m, a.sizes_only, scan_values, ui)?;
    // Every file of the tree the receipt does not list is an `extra` difference: the value
    // scan of unlisted files has nothing to read unless there is one (its name or its first
    // bytes say whether it is a model file).
    let unlisted_files = compared.iter().any(|d| d.kind == "extra");
    drift.extend(compared);
    if let Some(recorded) = &m.values {
        out.set("values_recorded", recorded);
        if scan_values {
            // A file already drifting (missing, resized, modified) says enough.
            let more: Vec<_> = super::values::changed(recorded, &scans)
                .into_iter()
                .filter(|v| !drift.iter().any(|d| d.path == v.path))
                .collect();
            drift.extend(more);
            drift.sort_by(|a, b| airlock::paths::bundle_order(&a.path, &b.path));
        }
    }
    out.set("sizes_only", a.sizes_only);
    out.set("files_checked", m.files.len());
    out.set("drift", &drift);
    for d in &drift {
        out.line(format!("ERROR {}: {} [{}]", d.path, d.detail, d.kind));
    }
    let error = match drift.first() {
        Some(first) => Some(Error::ReceiptMismatch {
            path: dir.to_path_buf(),
            count: drift.len(),
            first: format!("{}: {}", first.path, first.detail),
        }),
        None => {
            out.line(format!(
                "OK   {} version {}: {} files match the receipt{}{}",
                m.name,
                m.version,
                m.files.len(),
                if a.sizes_only { " (sizes only)" } else { "" },
                if opened.signer.is_some() {
                    ", receipt signature verified"
                } else {
                    ""
                }
            ));
            None
        }
    };
    Ok(Compared {
        drift_count: Some(drift.len()),
        error,
        hashed: m.files.iter().map(|f| f.path.clone()).collect(),
        scans,
        checks: Some(checks),
        unlisted_files,
        recorded: m.warnings.clone(),
    })
}

/// Says who signed the receipt and under which trust root version, when there is more to say
/// than one key.
fn say_signers(p: &Policy, vouched_by: Option<u64>, signers: &[Signer], out: &mut Output) {
    let current = p.root_version();
    out.set("vouched_by_root_version", vouched_by.or(current));
    if signers.len() > 1 || current.is_some() {
        out.line(format!(
            "receipt signed by {}{}",
            signers
                .iter()
                .map(|s| s.key.clone())
                .collect::<Vec<_>>()
                .join(", "),
            match (vouched_by, current) {
                (Some(v), Some(c)) => format!(
                    "; vouched for by trust root version {v} (its keys signed this install; the root in force is version {c})"
                ),
                (None, Some(c)) => format!(" (trust root version {c})"),
                _ => String::new(),
            }
        ));
    }
    if let (Some(v), Some(c)) = (vouched_by, current) {
        out.warnings.push(format!(
            "the receipt was signed under trust root version {v}, not by the keys of version {c} in force; it still checks because version {v} leads to {c} in the root's history"
        ));
    }
}

/// The model checks of `dir` and the value findings: of the receipt's files from `checks` and
/// `scans` (made while they were hashed), of the other files by path and from a scan of
/// their own.
#[allow(clippy::too_many_arguments)]
fn model_findings(
    dir: &Path,
    scan_values: bool,
    has_receipt: bool,
    checks: Option<inspect::TreeChecks>,
    mut value_scans: receipt::FileScans,
    hashed: &std::collections::HashSet<String>,
    unlisted_files: bool,
    ui: &dyn Progress,
    out: &mut Output,
) -> Result<Vec<Finding>> {
    let mut findings = match checks {
        Some(checks) => {
            let (findings, unchecked) = checks.finish(dir).map_err(|e| Error::io(dir, e))?;
            for p in &unchecked {
                out.warnings.push(format!(
                    "model check: {p}: not checked, its path is too long for the format checks"
                ));
            }
            findings
        }
        None => match inspect::check_tree(dir) {
            Ok(f) => f,
            // A path beyond what path-based reads reach.
            Err(e) if e.kind() == std::io::ErrorKind::InvalidFilename => {
                out.warnings.push(format!(
                    "the model checks stopped at a path too long to open: {e}"
                ));
                Vec::new()
            }
            Err(e) => return Err(Error::io(dir, e)),
        },
    };
    if scan_values {
        // Each listed file was scanned as it was hashed: the walk for the others is needed
        // only when there are others.
        if unlisted_files {
            match values::scan_tree(dir, hashed, ui) {
                Ok(more) => value_scans.extend(more),
                Err(e) if e.kind() == std::io::ErrorKind::InvalidFilename => out.warnings.push(
                    format!("the value scan stopped at a path too long to open: {e}"),
                ),
                Err(e) => return Err(Error::io(dir, e)),
            }
        }
        value_scans.sort_by(|a, b| airlock::paths::bundle_order(&a.0, &b.0));
        let summaries: Vec<&values::Summary> =
            value_scans.iter().map(|(_, s)| &s.summary).collect();
        out.set(
            "values",
            value_scans
                .iter()
                .map(|(p, s)| serde_json::json!({"path": p, "summary": s.summary}))
                .collect::<Vec<_>>(),
        );
        if !summaries.is_empty() {
            out.line(format!(
                "value scan: {}",
                super::values::scanned(&summaries)
            ));
        }
    }
    for (p, s) in &value_scans {
        findings.extend(s.findings(p));
    }
    findings.sort_by(|a, b| (&a.path, a.code).cmp(&(&b.path, b.code)));
    Ok(findings
        .into_iter()
        .filter(|f| f.path != RECEIPT_DIR && !f.path.starts_with(".airlock/"))
        .map(|mut f| {
            // Installed by airlock: the fix is on this side of the gap (unpack again).
            if has_receipt {
                f.fix = airlock::error::fix_for_installed(&f.fix);
            }
            f
        })
        .collect())
}

/// Prints the findings and the one summary that counts everything, and sets the verdict: the
/// receipt's first, else the model checks' errors. A warning the packer `recorded` (same file,
/// code and words) is counted, not printed again (issue 33 item 6); one that changed is.
fn conclude(
    out: &mut Output,
    findings: &[Finding],
    recorded: &[airlock::manifest::Warning],
    drift_count: Option<usize>,
    receipt_error: Option<Error>,
) {
    let unchanged = |f: &Finding| {
        f.severity == Severity::Warning
            && recorded
                .iter()
                .any(|w| w.path == f.path && w.code == f.code && w.problem == f.problem)
    };
    let mut not_repeated = 0;
    for f in findings {
        if unchanged(f) {
            not_repeated += 1;
        } else {
            out.lines.extend(finding_lines(f));
        }
    }
    if !recorded.is_empty() {
        out.set("recorded_findings", recorded);
    }
    let errors = findings
        .iter()
        .filter(|f| f.severity == Severity::Error)
        .count();
    let warnings = findings.len() - errors;
    out.set("findings", findings);
    out.set(
        "counts",
        serde_json::json!({
            "errors": errors + drift_count.unwrap_or(0),
            "warnings": warnings,
            "receipt_problems": drift_count,
            "model_check_errors": errors,
            "model_check_warnings": warnings,
            "recorded_unchanged": not_repeated,
        }),
    );
    let mut line = summary(drift_count, errors, warnings);
    if not_repeated > 0 {
        line.push_str(&format!(
            "; {not_repeated} of the warnings recorded at pack time, unchanged, not repeated here (--json lists them)"
        ));
    }
    out.line(line);
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
}
