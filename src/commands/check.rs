//! `airlock check`: receipt re-verification and model-format lint; also the model checks that
//! `pack` runs first. The verdict is the library's ([`airlock::check`]); this file turns the
//! flags into its options and renders its report.

use std::path::Path;

use airlock::check;
use airlock::display::{count, human};
use airlock::error::{Error, Result};
use airlock::hfcache;
use airlock::inspect::values;
use airlock::inspect::{Finding, Severity};
use airlock::oms::TrustMaterial;
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

/// `airlock check --hf-cache DIR [--hf-repo ORG/NAME]`.
fn run_hf(cache: &Path, a: &CheckArgs, ui: &dyn Progress) -> Result<Output> {
    let repo_type = a.repo_type.unwrap_or(RepoTypeArg::Model).as_str();
    let checked = check::check_cache(
        cache,
        &check::CacheOptions {
            only: a.hf_repo.as_deref().map(|id| (repo_type, id)),
            revision: a.revision.as_deref(),
            scan_values: !a.no_value_scan,
            offline_ready: a.offline_ready,
        },
        ui,
    )?;
    let report = &checked.cache;
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
    if let Some(offline) = &checked.offline {
        for f in &offline.findings {
            out.lines.extend(finding_lines(f));
        }
        say_offline(offline, &mut out);
    }
    if report.problems.is_empty() {
        out.line(format!(
            "OK   {} in {} match their names ({}); {} snapshot(s) passed the model checks",
            count(report.blobs_checked, "blob"),
            count(report.repos.len() as u64, "repository"),
            human(report.bytes_checked),
            report
                .repos
                .iter()
                .map(|r| r.snapshots.len())
                .sum::<usize>()
        ));
    }
    out.error = checked.verdict(cache);
    if !report.scanned.is_empty() {
        let summaries: Vec<&values::Summary> = report.scanned.iter().map(|s| &s.summary).collect();
        out.line(format!("     value scan: {}", check::scanned(&summaries)));
    }
    Ok(out)
}

/// `--oms-trust` / `--oms-cert-chain`: DIR against its OMS signature ([`check::check_oms`]),
/// before anything else.
fn oms_check(
    dir: &Path,
    a: &CheckArgs,
    has_receipt: bool,
    ui: &dyn Progress,
    out: &mut Output,
) -> Result<()> {
    let Some(trust) = TrustMaterial::load(a.oms_trust.as_deref(), &a.oms_cert_chain)? else {
        if a.oms_signature.is_some() || !a.oms_ignore.is_empty() || a.oms_ignore_unsigned {
            return Err(Error::Usage(
                "--oms-signature, --oms-ignore and --oms-ignore-unsigned go with --oms-trust or --oms-cert-chain".into(),
            ));
        }
        return Ok(());
    };
    let check::OmsChecked { signature, report } = check::check_oms(
        dir,
        check::OmsOptions {
            trust: &trust,
            signature: a.oms_signature.clone(),
            ignore: a.oms_ignore.clone(),
            ignore_unsigned: a.oms_ignore_unsigned,
            has_receipt,
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
            ("--revision", a.revision.is_some()),
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
    let lint_only = matches!(source, TrustSource::Env(_)) && check::never_installed(dir);
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
    let report = check::check_dir(
        dir,
        &check::DirOptions {
            trust: trust.as_ref(),
            has_receipt,
            sizes_only: a.sizes_only,
            scan_values,
            offline_ready: a.offline_ready,
        },
        ui,
    )?;
    if let Some(r) = &report.receipt {
        say_receipt(r, a.sizes_only, trust.as_ref(), &mut out);
    }
    out.warnings.extend(report.warnings.iter().cloned());
    if let Some(scans) = &report.values {
        out.set(
            "values",
            scans
                .iter()
                .map(|(p, s)| serde_json::json!({"path": p, "summary": s.summary}))
                .collect::<Vec<_>>(),
        );
        if !scans.is_empty() {
            let summaries: Vec<&values::Summary> = scans.iter().map(|(_, s)| &s.summary).collect();
            out.line(format!("value scan: {}", check::scanned(&summaries)));
        }
    }
    if let Some(offline) = &report.offline {
        say_offline(offline, &mut out);
    }
    conclude(&mut out, &report);
    out.error = report.verdict(dir);
    Ok(out)
}

/// The offline-readiness verdict: `offline_ready` (no error among its findings, and none of the
/// errors the model checks found: a broken file does not load either) and the findings in the
/// JSON, one line for a person.
fn say_offline(offline: &check::Offline, out: &mut Output) {
    let (errors, warnings) = (offline.errors, offline.warnings);
    out.set("offline_ready", offline.ready());
    out.set("offline_findings", &offline.findings);
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

/// The receipt comparison of `check DIR`: who signed, the differences, or that the files match.
fn say_receipt(
    r: &check::ReceiptCheck,
    sizes_only: bool,
    trust: Option<&Policy>,
    out: &mut Output,
) {
    out.warnings.extend(r.warnings.iter().cloned());
    if let Some(signer) = &r.signer {
        out.set("receipt_signer", signer);
        out.set("receipt_signers", &r.signers);
    }
    if let Some(p) = trust {
        say_signers(p, r.vouched_by, &r.signers, out);
    }
    let m = &r.manifest;
    out.set("name", &m.name);
    out.set("version", m.version);
    if let Some(recorded) = &m.values {
        out.set("values_recorded", recorded);
    }
    out.set("sizes_only", sizes_only);
    out.set("files_checked", m.files.len());
    out.set("drift", &r.drift);
    for d in &r.drift {
        out.line(format!("ERROR {}: {} [{}]", d.path, d.detail, d.kind));
    }
    if r.drift.is_empty() {
        out.line(format!(
            "OK   {} version {}: {} files match the receipt{}{}",
            m.name,
            m.version,
            m.files.len(),
            if sizes_only { " (sizes only)" } else { "" },
            if r.signer.is_some() {
                ", receipt signature verified"
            } else {
                ""
            }
        ));
    }
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

/// Prints the findings and the one summary that counts everything. A warning the packer
/// recorded (same file, code and words) is counted, not printed again (issue 33 item 6); one
/// that changed is.
fn conclude(out: &mut Output, report: &check::DirReport) {
    for f in &report.findings {
        if !report.recorded_unchanged(f) {
            out.lines.extend(finding_lines(f));
        }
    }
    let recorded = report.recorded();
    if !recorded.is_empty() {
        out.set("recorded_findings", recorded);
    }
    let c = report.counts;
    out.set("findings", &report.findings);
    out.set("counts", c);
    let mut line = summary(
        c.receipt_problems,
        c.model_check_errors,
        c.model_check_warnings,
    );
    if c.recorded_unchanged > 0 {
        line.push_str(&format!(
            "; {} of the warnings recorded at pack time, unchanged, not repeated here (--json lists them)",
            c.recorded_unchanged
        ));
    }
    out.line(line);
}
