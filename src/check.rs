//! `airlock check`, the library half: a model directory against its receipt (verified against
//! a trust policy when one is given), the model checks and the value scan of its files, its
//! offline readiness; a Hugging Face cache at rest. Each returns a typed report with its
//! verdict ([`DirReport::verdict`], [`CacheReport::verdict`]); the command only renders it.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::hfcache::{self, offline};
use crate::inspect::values::{self, FileScan, RULES, Summary};
use crate::inspect::{self, Finding, Severity};
use crate::manifest::{FileValues, Manifest, Values, Warning};
use crate::oms::{self, TrustMaterial};
use crate::pack::file_values;
use crate::paths::{RECEIPT_DIR, bundle_order};
use crate::progress::Progress;
use crate::receipt::{self, Drift};
use crate::trust::Policy;
use crate::trust::policy::Signer;

/// Whether `dir` holds nothing named `.airlock` (of any type): airlock never installed it.
/// Anything else (present, a link, unreadable) counts as an install.
pub fn never_installed(dir: &Path) -> bool {
    matches!(
        std::fs::symlink_metadata(dir.join(RECEIPT_DIR)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound
    )
}

/// What `check --oms-trust`/`--oms-cert-chain` checks a directory against.
pub struct OmsOptions<'a> {
    /// The publisher's trust ([`TrustMaterial::load`]).
    pub trust: &'a TrustMaterial,
    /// `--oms-signature` (default: the signature file's place in the model).
    pub signature: Option<PathBuf>,
    /// `--oms-ignore`.
    pub ignore: Vec<String>,
    /// `--oms-ignore-unsigned`.
    pub ignore_unsigned: bool,
    /// Whether the directory is an airlock install ([`receipt::exists`]).
    pub has_receipt: bool,
}

/// [`check_oms`]'s report: the signature file checked and what it found.
pub struct OmsChecked {
    /// The signature file.
    pub signature: PathBuf,
    /// The signature, verified, and the files that match it.
    pub report: oms::DirReport,
}

/// `dir` against its OMS signature, before anything else. In an airlock install the receipt
/// directory and airlock's own signature beside a publisher's are left out (`check --trust`
/// covers them against the receipt).
pub fn check_oms(dir: &Path, o: OmsOptions<'_>, progress: &dyn Progress) -> Result<OmsChecked> {
    let signature = o
        .signature
        .unwrap_or_else(|| dir.join(crate::manifest::OMS_SIGNATURE_NAME));
    let mut ignore = o.ignore;
    if o.has_receipt {
        ignore.push(RECEIPT_DIR.to_string());
        ignore.push(crate::manifest::OMS_SIGNATURE_NAME_BESIDE_PUBLISHER.to_string());
    }
    let report = oms::verify_dir(
        dir,
        &oms::DirOptions {
            signature: &signature,
            trust: o.trust,
            ignore,
            ignore_unsigned: o.ignore_unsigned,
        },
        progress,
    )?;
    Ok(OmsChecked { signature, report })
}

/// What [`check_dir`] does.
pub struct DirOptions<'a> {
    /// The trust policy the receipt must verify against (`None`: the receipt, if any, is read
    /// unverified).
    pub trust: Option<&'a Policy>,
    /// Whether `DIR/.airlock` holds a receipt ([`receipt::exists`]).
    pub has_receipt: bool,
    /// Compare sizes only, not hashes (no content read, so no value scan either).
    pub sizes_only: bool,
    /// Scan the weights' values.
    pub scan_values: bool,
    /// Also say whether the loaders find everything they look for, offline.
    pub offline_ready: bool,
}

/// The receipt comparison of [`check_dir`].
pub struct ReceiptCheck {
    /// Disagreements between the receipt signature's trusted comment and the manifest.
    pub warnings: Vec<String>,
    /// The signer's key id, when the receipt was verified.
    pub signer: Option<String>,
    /// Every signature that counted, when verified.
    pub signers: Vec<Signer>,
    /// The earlier trust root version that vouched for the receipt, if not the one in force.
    pub vouched_by: Option<u64>,
    /// The manifest the tree was installed from.
    pub manifest: Manifest,
    /// Every difference: planted, compared, and the value counts that changed, in bundle
    /// order.
    pub drift: Vec<Drift>,
}

/// The offline-readiness verdict of [`check_dir`] or [`check_cache`].
pub struct Offline {
    /// What the loaders look for that is not there (errors) or depends on the caller
    /// (warnings).
    pub findings: Vec<Finding>,
    /// Errors: the findings' and those of the model checks (a broken file does not load).
    pub errors: usize,
    /// Warnings among the findings.
    pub warnings: usize,
}

impl Offline {
    fn new(findings: Vec<Finding>, other_errors: usize) -> Offline {
        let own = findings
            .iter()
            .filter(|f| f.severity == Severity::Error)
            .count();
        Offline {
            warnings: findings.len() - own,
            errors: own + other_errors,
            findings,
        }
    }

    /// No error: the model loads offline.
    pub fn ready(&self) -> bool {
        self.errors == 0
    }
}

/// What [`check_dir`] counted, for the summary line and the JSON `counts`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Counts {
    /// Receipt problems and model-check errors together.
    pub errors: usize,
    /// Model-check warnings.
    pub warnings: usize,
    /// Differences from the receipt (`None`: no receipt was compared).
    pub receipt_problems: Option<usize>,
    /// Errors of the model checks (the value scan's and offline readiness' included).
    pub model_check_errors: usize,
    /// Their warnings.
    pub model_check_warnings: usize,
    /// Warnings the packer recorded, unchanged (counted, not said again).
    pub recorded_unchanged: usize,
}

/// What [`check_dir`] found.
pub struct DirReport {
    /// The receipt comparison (`None`: no receipt, and no trust asking for one).
    pub receipt: Option<ReceiptCheck>,
    /// Things not checked, or checks that stopped early (a path too long to open), in order.
    pub warnings: Vec<String>,
    /// The value scans, in bundle order (`None`: no value scan).
    pub values: Option<receipt::FileScans>,
    /// Offline readiness (`None`: not asked).
    pub offline: Option<Offline>,
    /// Every finding: model checks, value scan, offline readiness; sorted by path and code,
    /// the receipt directory's own left out.
    pub findings: Vec<Finding>,
    /// The counts.
    pub counts: Counts,
}

impl DirReport {
    /// The findings the packer recorded in the receipt's manifest.
    pub fn recorded(&self) -> &[Warning] {
        self.receipt
            .as_ref()
            .map_or(&[], |r| r.manifest.warnings.as_slice())
    }

    /// Whether `f` is a warning the packer recorded with the same file, code and words: said
    /// once, at pack time, and only counted here (issue 33 item 6). One that changed is said.
    pub fn recorded_unchanged(&self, f: &Finding) -> bool {
        recorded_unchanged(self.recorded(), f)
    }

    /// The verdict: the receipt's differences first, else the model checks' errors.
    pub fn verdict(&self, dir: &Path) -> Option<Error> {
        if let Some(first) = self.receipt.as_ref().and_then(|r| r.drift.first()) {
            return Some(Error::ReceiptMismatch {
                path: dir.to_path_buf(),
                count: self.counts.receipt_problems.unwrap_or_default(),
                first: format!("{}: {}", first.path, first.detail),
            });
        }
        first_error(&self.findings)
    }
}

fn recorded_unchanged(recorded: &[Warning], f: &Finding) -> bool {
    f.severity == Severity::Warning
        && recorded
            .iter()
            .any(|w| w.path == f.path && w.code == f.code && w.problem == f.problem)
}

/// The model-check verdict of `findings`: their errors, the first named.
fn first_error(findings: &[Finding]) -> Option<Error> {
    let errors: Vec<&Finding> = findings
        .iter()
        .filter(|f| f.severity == Severity::Error)
        .collect();
    let first = errors.first()?;
    Some(Error::ModelChecks {
        count: errors.len(),
        first: format!("{}: {}", first.path, first.problem),
        fix: first.fix.clone(),
    })
}

/// `check DIR`: the receipt comparison (when there is a receipt or `trust` asks for one), the
/// model checks of every file (riding on the comparison's pass: each file opened and read
/// once), the value scan, offline readiness.
pub fn check_dir(dir: &Path, o: &DirOptions<'_>, progress: &dyn Progress) -> Result<DirReport> {
    let mut warnings = Vec::new();
    let (receipt, hashed, scans, checks, unlisted_files) = if o.has_receipt || o.trust.is_some() {
        let c = compare_receipt(dir, o, progress)?;
        (
            Some(c.check),
            c.hashed,
            c.scans,
            Some(c.checks),
            c.unlisted_files,
        )
    } else {
        (None, HashSet::new(), Vec::new(), None, true)
    };
    let (findings, values) = model_findings(
        dir,
        o,
        checks,
        scans,
        &hashed,
        unlisted_files,
        progress,
        &mut warnings,
    )?;
    let (findings, offline) = if o.offline_ready {
        let found =
            offline::check(dir, "", offline::Deps::Elsewhere).map_err(|e| Error::io(dir, e))?;
        let other = findings
            .iter()
            .filter(|f| f.severity == Severity::Error)
            .count();
        let offline = Offline::new(found, other);
        let mut findings = findings;
        findings.extend(offline.findings.iter().cloned());
        findings.sort_by(|a, b| (&a.path, a.code).cmp(&(&b.path, b.code)));
        (findings, Some(offline))
    } else {
        (findings, None)
    };
    let errors = findings
        .iter()
        .filter(|f| f.severity == Severity::Error)
        .count();
    let recorded = receipt.as_ref().map_or(&[][..], |r| &r.manifest.warnings);
    let drift = receipt.as_ref().map(|r| r.drift.len());
    let counts = Counts {
        errors: errors + drift.unwrap_or(0),
        warnings: findings.len() - errors,
        receipt_problems: drift,
        model_check_errors: errors,
        model_check_warnings: findings.len() - errors,
        recorded_unchanged: findings
            .iter()
            .filter(|f| recorded_unchanged(recorded, f))
            .count(),
    };
    Ok(DirReport {
        receipt,
        warnings,
        values,
        offline,
        findings,
        counts,
    })
}

/// What the receipt comparison found, and what the model checks take from its pass.
struct Compared {
    check: ReceiptCheck,
    /// The files the receipt lists (hashed, and value-scanned in the same read).
    hashed: HashSet<String>,
    /// Their value scans.
    scans: receipt::FileScans,
    /// The model checks of the tree, made in the comparison's pass.
    checks: inspect::TreeChecks,
    /// Whether the receipt leaves any file unlisted, which the value scan reads when its name
    /// or first bytes make it a model file.
    unlisted_files: bool,
}

/// Opens the receipt (verified against the trust policy when one is set) and compares `dir`
/// with it: hashes (or sizes), modes, planted files and the recorded value counts.
fn compare_receipt(dir: &Path, o: &DirOptions<'_>, progress: &dyn Progress) -> Result<Compared> {
    let opened = receipt::open(dir, o.trust)?;
    let m = opened.manifest;
    let mut drift = receipt::planted(dir)?;
    // The model checks ride on the comparison: each file opened and read once.
    let receipt::Comparison {
        drift: compared,
        scans,
        checks,
    } = receipt::compare_checking(dir, &m, o.sizes_only, o.scan_values, progress)?;
    // Every file of the tree the receipt does not list is an `extra` difference: the value
    // scan of unlisted files has nothing to read unless there is one (its name or its first
    // bytes say whether it is a model file).
    let unlisted_files = compared.iter().any(|d| d.kind == "extra");
    drift.extend(compared);
    if let Some(recorded) = &m.values
        && o.scan_values
    {
        // A file already drifting (missing, resized, modified) says enough.
        let more: Vec<_> = values_changed(recorded, &scans)
            .into_iter()
            .filter(|v| !drift.iter().any(|d| d.path == v.path))
            .collect();
        drift.extend(more);
        drift.sort_by(|a, b| bundle_order(&a.path, &b.path));
    }
    Ok(Compared {
        hashed: m.files.iter().map(|f| f.path.clone()).collect(),
        check: ReceiptCheck {
            warnings: opened.warnings,
            signer: opened.signer,
            signers: opened.signers,
            vouched_by: opened.vouched_by,
            manifest: m,
            drift,
        },
        scans,
        checks,
        unlisted_files,
    })
}

/// The model checks of `dir` and the value findings: of the receipt's files from `checks` and
/// `value_scans` (made while they were hashed), of the other files by path and from a scan of
/// their own.
#[allow(clippy::too_many_arguments)]
fn model_findings(
    dir: &Path,
    o: &DirOptions<'_>,
    checks: Option<inspect::TreeChecks>,
    mut value_scans: receipt::FileScans,
    hashed: &HashSet<String>,
    unlisted_files: bool,
    progress: &dyn Progress,
    warnings: &mut Vec<String>,
) -> Result<(Vec<Finding>, Option<receipt::FileScans>)> {
    let mut findings = match checks {
        Some(checks) => {
            let (findings, unchecked) = checks.finish(dir).map_err(|e| Error::io(dir, e))?;
            for p in &unchecked {
                warnings.push(format!(
                    "model check: {p}: not checked, its path is too long for the format checks"
                ));
            }
            findings
        }
        None => match inspect::check_tree(dir) {
            Ok(f) => f,
            // A path beyond what path-based reads reach.
            Err(e) if e.kind() == std::io::ErrorKind::InvalidFilename => {
                warnings.push(format!(
                    "the model checks stopped at a path too long to open: {e}"
                ));
                Vec::new()
            }
            Err(e) => return Err(Error::io(dir, e)),
        },
    };
    if o.scan_values {
        // Each listed file was scanned as it was hashed: the walk for the others is needed
        // only when there are others.
        if unlisted_files {
            match values::scan_tree(dir, hashed, progress) {
                Ok(more) => value_scans.extend(more),
                Err(e) if e.kind() == std::io::ErrorKind::InvalidFilename => warnings.push(
                    format!("the value scan stopped at a path too long to open: {e}"),
                ),
                Err(e) => return Err(Error::io(dir, e)),
            }
        }
        value_scans.sort_by(|a, b| bundle_order(&a.0, &b.0));
    }
    for (p, s) in &value_scans {
        findings.extend(s.findings(p));
    }
    let values = o.scan_values.then_some(value_scans);
    findings.sort_by(|a, b| (&a.path, a.code).cmp(&(&b.path, b.code)));
    let findings = findings
        .into_iter()
        .filter(|f| f.path != RECEIPT_DIR && !f.path.starts_with(".airlock/"))
        .map(|mut f| {
            // Installed by airlock: the fix is on this side of the gap (unpack again).
            if o.has_receipt {
                f.fix = crate::error::fix_for_installed(&f.fix);
            }
            f
        })
        .collect();
    Ok((findings, values))
}

/// What the counts of `files` say, as a clause: `no NaN, no Inf, no zero-filled region; 2
/// all-zero and 65 constant tensors`.
pub(crate) fn value_counts(files: &[&FileValues]) -> String {
    use crate::display::grouped;
    let sum = |f: fn(&FileValues) -> u64| files.iter().map(|v| f(v)).sum::<u64>();
    let (nan, inf, regions) = (sum(|v| v.nan), sum(|v| v.inf), sum(|v| v.zero_regions));
    let (zero, constant) = (sum(|v| v.zero_tensors), sum(|v| v.constant_tensors));
    let mut parts = [
        match nan {
            0 => "no NaN".to_string(),
            n => format!("{} NaN", grouped(n)),
        },
        match inf {
            0 => "no Inf".to_string(),
            n => format!("{} Inf", grouped(n)),
        },
        match regions {
            0 => "no zero-filled region".to_string(),
            1 => "1 zero-filled region".to_string(),
            n => format!("{} zero-filled regions", grouped(n)),
        },
    ]
    .join(", ");
    let flagged: Vec<String> = [(zero, "all-zero"), (constant, "constant")]
        .into_iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, what)| {
            format!(
                "{} {what} tensor{}",
                grouped(n),
                if n == 1 { "" } else { "s" }
            )
        })
        .collect();
    if !flagged.is_empty() {
        parts.push_str(&format!("; {}", flagged.join(", ")));
    }
    parts
}

/// The files of an install whose counts differ from what the pack recorded (`values`, made by
/// the same rules), as receipt drift: the signed record says what was true at pack time, so
/// a NaN that is not in it arrived later. A file the scan could not read as a model now (its
/// header changed) is drift too; the receipt comparison reports its content.
pub(crate) fn values_changed(recorded: &Values, scans: &[(String, FileScan)]) -> Vec<Drift> {
    if recorded.rules != RULES {
        return Vec::new();
    }
    let mut out = Vec::new();
    for r in &recorded.files {
        let now = scans
            .iter()
            .find(|(p, _)| *p == r.path)
            .map(|(p, s)| file_values(p, &s.summary));
        let detail = match &now {
            Some(now) if now == r => continue,
            Some(now) => format!(
                "values changed since packing: the signed record says {}; now {}",
                value_counts(&[r]),
                value_counts(&[now])
            ),
            None => format!(
                "values could not be scanned (the header no longer reads as {}); the signed record says {}",
                r.format,
                value_counts(&[r])
            ),
        };
        out.push(Drift {
            path: r.path.clone(),
            kind: "values",
            detail,
        });
    }
    out
}

/// What [`check_cache`] does.
pub struct CacheOptions<'a> {
    /// Only this repository (`(type, ORG/NAME)`), else every one.
    pub only: Option<(&'a str, &'a str)>,
    /// Only this revision of `only` (a commit or a ref name), else every snapshot.
    pub revision: Option<&'a str>,
    /// Scan the weights' values.
    pub scan_values: bool,
    /// Also say whether the repository `only` names loads offline.
    pub offline_ready: bool,
}

/// What [`check_cache`] found.
pub struct CacheReport {
    /// The cache at rest: every blob against its name, every snapshot through the model checks.
    pub cache: hfcache::CacheReport,
    /// Offline readiness of the one repository (`None`: not asked).
    pub offline: Option<Offline>,
}

impl CacheReport {
    /// The verdict: damage first, else what keeps the repository from loading offline.
    pub fn verdict(&self, cache: &Path) -> Option<Error> {
        if let Some(first) = self.cache.problems.first() {
            return Some(Error::CacheDamaged {
                path: cache.to_path_buf(),
                count: self.cache.problems.len(),
                first: format!("{}: {}", first.path.display(), first.problem),
                installed_by_airlock: self.cache.damage_is_airlock_installed(),
            });
        }
        self.offline.as_ref().and_then(|o| first_error(&o.findings))
    }
}

/// `check --hf-cache CACHE`: every blob against its name, every snapshot through the model
/// checks (and the value scan), and with `offline_ready` whether the repository loads offline.
pub fn check_cache(
    cache: &Path,
    o: &CacheOptions<'_>,
    progress: &dyn Progress,
) -> Result<CacheReport> {
    if o.offline_ready && o.only.is_none() {
        return Err(Error::Usage(
            "--offline-ready with --hf-cache needs --hf-repo ORG/NAME: the repository whose loading to check".into(),
        ));
    }
    let report = hfcache::check_cache_scanning(cache, o.only, o.revision, o.scan_values, progress)?;
    let offline = match (o.only, o.offline_ready) {
        (Some((repo_type, id)), true) => {
            let revision = o.revision.unwrap_or(hfcache::DEFAULT_REVISION);
            let found = offline::check_cached(cache, repo_type, id, revision)
                .map_err(|e| Error::io(cache, e))?;
            Some(Offline::new(found, report.problems.len()))
        }
        _ => None,
    };
    Ok(CacheReport {
        cache: report,
        offline,
    })
}

/// What the value scans counted, as one clause: `1 weight file, 12 tensors (12 checked): no
/// NaN, …`.
pub fn scanned(summaries: &[&Summary]) -> String {
    let files: Vec<FileValues> = summaries.iter().map(|s| file_values("", s)).collect();
    let refs: Vec<&FileValues> = files.iter().collect();
    values_clause(&refs)
}

/// A value record's files in one clause: `1 weight file, 12 tensors (12 checked): no NaN, …`.
pub fn values_clause(files: &[&FileValues]) -> String {
    use crate::display::grouped;
    let tensors: u64 = files.iter().map(|f| f.tensors).sum();
    let checked: u64 = files.iter().map(|f| f.checked).sum();
    format!(
        "{} weight file{}, {} tensors ({} checked): {}",
        files.len(),
        if files.len() == 1 { "" } else { "s" },
        grouped(tensors),
        grouped(checked),
        value_counts(files)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::progress::Silent;

    const POINTER: &[u8] = b"version https://git-lfs.github.com/spec/v1\n\
        oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\n\
        size 4943852032\n";

    fn options(offline_ready: bool) -> DirOptions<'static> {
        DirOptions {
            trust: None,
            has_receipt: false,
            sizes_only: false,
            scan_values: true,
            offline_ready,
        }
    }

    #[test]
    fn a_directory_without_a_receipt_is_linted_and_its_errors_are_the_verdict() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("model.safetensors"), POINTER).unwrap();
        let report = check_dir(dir.path(), &options(false), &Silent).unwrap();
        assert!(report.receipt.is_none());
        assert!(report.offline.is_none());
        assert_eq!(report.counts.receipt_problems, None);
        assert!(report.counts.model_check_errors >= 1, "{:?}", report.counts);
        assert_eq!(report.counts.errors, report.counts.model_check_errors);
        assert!(
            report
                .findings
                .iter()
                .any(|f| f.path == "model.safetensors" && f.severity == Severity::Error)
        );
        match report.verdict(dir.path()) {
            Some(Error::ModelChecks { count, first, .. }) => {
                assert_eq!(count, report.counts.model_check_errors);
                assert!(first.starts_with("model.safetensors: "), "{first}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_clean_directory_has_no_verdict_and_offline_readiness_is_counted_in() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("README.md"), b"a model card\n").unwrap();
        let report = check_dir(dir.path(), &options(false), &Silent).unwrap();
        assert!(report.verdict(dir.path()).is_none());
        assert_eq!(report.counts.errors, 0);
        assert_eq!(report.values.as_deref().map(<[_]>::len), Some(0));
        // No config.json: the loaders have nothing to load, which offline readiness says.
        let offline = check_dir(dir.path(), &options(true), &Silent).unwrap();
        let o = offline.offline.as_ref().expect("asked for");
        assert_eq!(o.ready(), o.errors == 0);
        assert_eq!(
            offline.counts.model_check_errors,
            offline
                .findings
                .iter()
                .filter(|f| f.severity == Severity::Error)
                .count()
        );
    }

    #[test]
    fn a_recorded_warning_is_counted_not_said_again_unless_it_changed() {
        let w = Warning {
            path: "w.bin".into(),
            code: crate::inspect::codes::AUTO_MAP_REMOTE_CODE.to_string(),
            problem: "p".into(),
        };
        let same = Finding::warning(
            crate::inspect::codes::AUTO_MAP_REMOTE_CODE,
            "w.bin",
            "p",
            "f",
        );
        let changed = Finding::warning(
            crate::inspect::codes::AUTO_MAP_REMOTE_CODE,
            "w.bin",
            "q",
            "f",
        );
        assert!(recorded_unchanged(std::slice::from_ref(&w), &same));
        assert!(!recorded_unchanged(std::slice::from_ref(&w), &changed));
        assert!(!recorded_unchanged(&[], &same));
    }
}
