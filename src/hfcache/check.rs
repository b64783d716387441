//! Checking a cache at rest (`airlock check --hf-cache`): every blob against its own name,
//! every snapshot link against the layout's rules, every ref against the snapshots, and the
//! model checks ([`crate::inspect`]) on every snapshot, so a snapshot that lost a shard its
//! index lists is reported too. Reads only; nothing is followed that
//! [`super::layout`] does not allow, and nothing is read past the size its file reports.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::etag::hash_and_scan;
use super::layout::{self, Content};
use super::names::{
    EtagKind, NOT_REPOSITORIES, check_repo_id, check_repo_type, parse_repo_folder, repo_folder_name,
};
use super::snapshot::{RefState, list_refs, locate_snapshot, read_ref};
use crate::error::{Error, Result};
use crate::inspect::values::{self, FileScan};
use crate::inspect::{self, Severity};
use crate::progress::Progress;
use crate::work;

/// One problem found in a cache.
#[derive(Clone, Debug, Serialize)]
pub struct CacheProblem {
    /// The cache entry (blob, link, ref file, snapshot file).
    pub path: PathBuf,
    /// `blob-mismatch`, `missing-blob`, `bad-ref`, `ref-without-snapshot`, `unsafe-link` (a
    /// link or special file where the layout allows none), or a model-check code from
    /// [`crate::inspect::codes`] (`shard-missing`, `safetensors-truncated`, ...).
    pub kind: &'static str,
    /// What is wrong, naming the repository files concerned.
    pub problem: String,
}

/// What a check found about one repository.
#[derive(Clone, Debug, Serialize)]
pub struct CachedRepo {
    /// `model`, `dataset`, `space` or `kernel`.
    pub repo_type: String,
    /// `org/name`.
    pub repo_id: String,
    /// Its folder.
    pub folder: PathBuf,
    /// Blobs checked against their names.
    pub blobs_checked: u64,
    /// Bytes hashed.
    pub bytes_checked: u64,
    /// Commits with a snapshot folder.
    pub snapshots: Vec<String>,
    /// Ref name → the ref file's content (as read, lossily; empty when it could not be read).
    pub refs: BTreeMap<String, String>,
    /// Commits airlock installed here (its trace, `REPO/.airlock/<commit>`): damage is repaired
    /// by unpacking the bundle again rather than by downloading.
    pub installed_by_airlock: Vec<String>,
}

/// The result of [`check_cache`].
#[derive(Clone, Debug, Default, Serialize)]
pub struct CacheReport {
    /// Repositories checked.
    pub repos: Vec<CachedRepo>,
    /// Blobs checked against their names, all repositories.
    pub blobs_checked: u64,
    /// Bytes hashed.
    pub bytes_checked: u64,
    /// What is damaged, sorted by path.
    pub problems: Vec<CacheProblem>,
    /// Things that are not damage: interrupted downloads, entries that are not repositories,
    /// blobs not named by an etag, model-check warnings.
    pub notes: Vec<String>,
    /// The model files the value scan read, with what it counted.
    pub scanned: Vec<ScannedBlob>,
}

impl CacheReport {
    /// Whether every problem lies in data airlock installed (so the fix is to unpack the
    /// bundle again): in a snapshot whose commit airlock's trace names, or elsewhere in a
    /// repository with a trace. False when there is no problem.
    pub fn damage_is_airlock_installed(&self) -> bool {
        !self.problems.is_empty()
            && self.problems.iter().all(|p| {
                self.repos
                    .iter()
                    .find(|r| p.path.starts_with(&r.folder))
                    .is_some_and(|r| {
                        let snapshots = r.folder.join("snapshots");
                        let commit = p
                            .path
                            .strip_prefix(&snapshots)
                            .ok()
                            .and_then(|rest| rest.iter().next());
                        match commit {
                            Some(c) => r.installed_by_airlock.iter().any(|t| c == t.as_str()),
                            None => !r.installed_by_airlock.is_empty(),
                        }
                    })
            })
    }
}

/// A blob's repository index, bytes hashed, problem, and value scan (as which snapshot file).
type BlobResult = (
    usize,
    u64,
    Option<CacheProblem>,
    Option<((String, String), FileScan)>,
);

/// A model file of a snapshot whose blob the value scan read.
#[derive(Clone, Debug, Serialize)]
pub struct ScannedBlob {
    /// The snapshot file (the first naming the blob as a model file).
    pub path: PathBuf,
    /// What the scan counted.
    pub summary: values::Summary,
}

struct BlobJob {
    repo: usize,
    /// The blob, as messages name it.
    path: PathBuf,
    /// The regular file holding its content (the blob, or its shared-store entry).
    source: PathBuf,
    etag: String,
    kind: EtagKind,
    size: u64,
}

/// Re-checks every blob of every repository in `cache` (or only `only = (repo_type, repo_id)`)
/// against its name, every snapshot link against its blob, every ref against the snapshots,
/// and runs the model checks on every snapshot. Blobs are hashed in parallel. Reads only.
pub fn check_cache(
    cache: &Path,
    only: Option<(&str, &str)>,
    progress: &dyn Progress,
) -> Result<CacheReport> {
    check_cache_scanning(cache, only, None, false, progress)
}

/// [`check_cache`], and with `scan_values` the value scan ([`crate::inspect::values`]) of
/// every blob a snapshot names as a model file, in the read that hashes it. With `revision`
/// (a 40-hex commit, or a ref name resolved through `refs/`; only with `only`), only that one
/// snapshot of the repository, its ref and the blobs its files link to: a revision the cache
/// does not hold is [`Error::NotCached`] naming the ref file or snapshot folder looked for.
pub fn check_cache_scanning(
    cache: &Path,
    only: Option<(&str, &str)>,
    revision: Option<&str>,
    scan_values: bool,
    progress: &dyn Progress,
) -> Result<CacheReport> {
    let meta = fs::metadata(cache).map_err(|e| Error::io(cache, e))?;
    if !meta.is_dir() {
        return Err(Error::Usage(format!(
            "{} is not a directory",
            cache.display()
        )));
    }
    let mut report = CacheReport::default();
    let folders = repository_folders(cache, only, &mut report)?;
    let one = match (only, revision) {
        (Some((repo_type, repo_id)), Some(rev)) => {
            let (_, commit, _) = locate_snapshot(cache, repo_type, repo_id, rev)?;
            Some(OneRevision {
                commit,
                ref_name: (!super::names::is_commit(rev)).then(|| rev.to_string()),
            })
        }
        (None, Some(_)) => {
            return Err(Error::Usage(
                "--revision with --hf-cache needs --hf-repo ORG/NAME: the repository whose revision to check".into(),
            ));
        }
        (_, None) => None,
    };

    let mut jobs = Vec::new();
    for (index, (repo_type, repo_id, folder)) in folders.into_iter().enumerate() {
        let (repo, mut repo_jobs) = survey_repo(
            index,
            (repo_type, repo_id, folder),
            one.as_ref(),
            &mut report,
        )?;
        report.repos.push(repo);
        jobs.append(&mut repo_jobs);
    }

    let total: u64 = jobs.iter().map(|j| j.size).sum();
    let users = snapshot_users(&report.repos);
    // The snapshot file a blob is scanned as (the first whose name is a model file's, else
    // the first: its content decides), so the value scan rides on the hash of the blob.
    let scan_as = |job: &BlobJob| -> Option<(String, String)> {
        if !scan_values {
            return None;
        }
        let named = users.get(&job.path)?;
        named
            .iter()
            .find(|u| values::named_for_scan(&u.1))
            .or(named.first())
            .cloned()
    };
    progress.start(crate::progress::Phase::CheckBlobs, total);
    // Each large blob a task of its own, small ones in runs (`work::units`).
    let units = work::units(
        jobs.iter().map(|j| j.size),
        work::UNIT_FILES,
        work::UNIT_BYTES,
    );
    let results: Vec<Vec<BlobResult>> = work::map_units(&jobs, &units, |run| {
        run.iter()
            .map(|job| {
                progress.item(&job.etag);
                check_blob(job, scan_as(job), progress)
            })
            .collect()
    });
    progress.finish();
    for result in results.into_iter().flatten() {
        record_blob(&mut report, &users, result);
    }
    // A blob refused while following a snapshot link is refused again in the blob listing.
    report
        .problems
        .sort_by(|a, b| (&a.path, a.kind, &a.problem).cmp(&(&b.path, b.kind, &b.problem)));
    report
        .problems
        .dedup_by(|a, b| (&a.path, a.kind, &a.problem) == (&b.path, b.kind, &b.problem));
    Ok(report)
}

/// The repository folders to check: `only`'s (which must exist), or every repository folder
/// of `cache` in name order. A link where a repository folder should be is a problem of
/// `report`, anything else not a repository folder a note.
fn repository_folders(
    cache: &Path,
    only: Option<(&str, &str)>,
    report: &mut CacheReport,
) -> Result<Vec<(String, String, PathBuf)>> {
    let mut folders: Vec<(String, String, PathBuf)> = Vec::new();
    match only {
        Some((repo_type, repo_id)) => {
            check_repo_type(repo_type).map_err(|e| Error::Usage(e.to_string()))?;
            check_repo_id(repo_id).map_err(|e| Error::Usage(e.to_string()))?;
            let folder = cache.join(repo_folder_name(repo_type, repo_id));
            if !layout::real_dir(&folder)? {
                return Err(Error::NotCached {
                    path: folder,
                    reason: format!("does not exist: {repo_type} {repo_id} is not in this cache"),
                });
            }
            folders.push((repo_type.to_string(), repo_id.to_string(), folder));
        }
        None => {
            let rd = crate::fsio::list_dir(cache, crate::fsio::Follow::Final)
                .map_err(|e| Error::io(cache, e.into()))?;
            let mut names: Vec<(String, PathBuf, Option<rustix::fs::FileType>)> = rd
                .into_iter()
                .map(|(n, ft)| (n.to_string_lossy().into_owned(), cache.join(&n), Some(ft)))
                .collect();
            names.sort_by(|a, b| a.0.cmp(&b.0));
            for (name, path, ft) in names {
                if NOT_REPOSITORIES.contains(&name.as_str()) {
                    continue;
                }
                match (parse_repo_folder(&name), ft) {
                    (Some((t, id)), Some(rustix::fs::FileType::Directory)) => {
                        folders.push((t, id, path))
                    }
                    (Some(_), Some(rustix::fs::FileType::Symlink)) => report.problems.push(CacheProblem {
                        kind: "unsafe-link",
                        problem: format!(
                            "is a symlink to {}; a repository folder must be a real directory, and airlock does not follow it",
                            fs::read_link(&path).unwrap_or_default().display()
                        ),
                        path,
                    }),
                    _ => report.notes.push(format!(
                        "{}: not a repository folder (huggingface_hub's scan_cache_dir warns about it too)",
                        path.display()
                    )),
                }
            }
        }
    }
    Ok(folders)
}

/// Hashes the blob of `job` against its name, with the value scan as the snapshot file
/// `named` when one is given.
fn check_blob(
    job: &BlobJob,
    named: Option<(String, String)>,
    progress: &dyn Progress,
) -> BlobResult {
    match hash_and_scan(
        &job.source,
        job.kind,
        named.as_ref().map(|n| n.1.as_str()),
        progress,
    ) {
        Ok((actual, scan)) if actual == job.etag => (job.repo, job.size, None, named.zip(scan)),
        Ok((actual, _)) => (
            job.repo,
            job.size,
            Some(CacheProblem {
                path: job.path.clone(),
                kind: "blob-mismatch",
                problem: format!(
                    "does not hash to its name: its {} is {actual}",
                    job.kind.name()
                ),
            }),
            None,
        ),
        Err(e) if e.kind() == io::ErrorKind::NotFound => (
            job.repo,
            0,
            Some(CacheProblem {
                path: job.path.clone(),
                kind: "missing-blob",
                problem: "is a link whose target (in the shared blob store) is missing".into(),
            }),
            None,
        ),
        Err(e) => (
            job.repo,
            0,
            Some(CacheProblem {
                path: job.path.clone(),
                kind: "blob-mismatch",
                problem: format!("cannot be read: {e}"),
            }),
            None,
        ),
    }
}

/// Counts a checked blob into `report`, with its problem (naming the snapshot files that use
/// it) and its value scan's findings.
fn record_blob(
    report: &mut CacheReport,
    users: &HashMap<PathBuf, Vec<(String, String)>>,
    (repo, bytes, problem, scanned): BlobResult,
) {
    report.repos[repo].blobs_checked += 1;
    report.repos[repo].bytes_checked += bytes;
    report.blobs_checked += 1;
    report.bytes_checked += bytes;
    if let Some(mut p) = problem {
        if let Some(files) = users.get(&p.path) {
            let files: Vec<String> = files
                .iter()
                .map(|(commit, rel)| format!("{:?}", format!("{commit}/{rel}")))
                .collect();
            p.problem
                .push_str(&format!("; used by {}", files.join(", ")));
        }
        report.problems.push(p);
    }
    if let Some(((commit, rel), scan)) = scanned {
        let repo = &report.repos[repo];
        let file = repo.folder.join("snapshots").join(&commit).join(&rel);
        report.scanned.push(ScannedBlob {
            path: file.clone(),
            summary: scan.summary.clone(),
        });
        for f in scan.findings(&rel) {
            match f.severity {
                Severity::Error => report.problems.push(CacheProblem {
                    path: file.clone(),
                    kind: f.code,
                    problem: format!(
                        "{rel:?} in snapshot {commit}: {} (fix: {})",
                        f.problem, f.fix
                    ),
                }),
                Severity::Warning => {
                    report
                        .notes
                        .push(format!("{}: {} ({})", file.display(), f.problem, f.fix))
                }
            }
        }
    }
}

/// Blob path → the snapshot files (commit, path) that link to it.
fn snapshot_users(repos: &[CachedRepo]) -> HashMap<PathBuf, Vec<(String, String)>> {
    let mut out: HashMap<PathBuf, Vec<(String, String)>> = HashMap::new();
    for repo in repos {
        let snapshots = repo.folder.join("snapshots");
        for commit in &repo.snapshots {
            let dir = snapshots.join(commit);
            for e in walkdir::WalkDir::new(&dir)
                .min_depth(1)
                .sort_by_file_name()
                .into_iter()
                .filter_map(|e| e.ok())
                .filter(|e| e.path_is_symlink())
            {
                let Ok(target) = fs::read_link(e.path()) else {
                    continue;
                };
                let Some(name) = target.file_name() else {
                    continue;
                };
                let rel = e.path().strip_prefix(&dir).unwrap_or(e.path());
                out.entry(repo.folder.join("blobs").join(name))
                    .or_default()
                    .push((commit.clone(), rel.to_string_lossy().into_owned()));
            }
        }
    }
    out
}

/// `Ok(true)` for a real directory, `Ok(false)` when absent; a link or other file becomes an
/// `unsafe-link` problem (and `Ok(false)`: nothing below it is read).
fn dir_or_problem(path: &Path, report: &mut CacheReport) -> bool {
    match layout::real_dir(path) {
        Ok(present) => present,
        Err(Error::HfCache { path, reason }) => {
            report.problems.push(CacheProblem {
                path,
                kind: "unsafe-link",
                problem: reason,
            });
            false
        }
        Err(e) => {
            report.problems.push(CacheProblem {
                path: path.to_path_buf(),
                kind: "unsafe-link",
                problem: format!("cannot be read: {e}"),
            });
            false
        }
    }
}

/// The one snapshot `check --hf-cache --hf-repo R --revision REV` checks.
struct OneRevision {
    /// The commit REV resolved to (its snapshot folder exists).
    commit: String,
    /// REV when it is a ref name (`refs/REV`), not a commit.
    ref_name: Option<String>,
}

/// The blobs (by file name) the links of snapshot folder `dir` point to.
fn linked_blobs(dir: &Path) -> HashSet<String> {
    walkdir::WalkDir::new(dir)
        .min_depth(1)
        .into_iter()
        .filter_map(|e| e.ok())
        .filter(|e| e.path_is_symlink())
        .filter_map(|e| fs::read_link(e.path()).ok())
        .filter_map(|t| t.file_name().map(|n| n.to_string_lossy().into_owned()))
        .collect()
}

/// Reads one repository's refs, snapshots and blob list, runs the model checks on each
/// snapshot, and returns the blobs to hash. With `one`, only that snapshot, its ref and the
/// blobs it links to.
fn survey_repo(
    index: usize,
    (repo_type, repo_id, folder): (String, String, PathBuf),
    one: Option<&OneRevision>,
    report: &mut CacheReport,
) -> Result<(CachedRepo, Vec<BlobJob>)> {
    let snapshots_dir = folder.join("snapshots");
    let mut snapshots = Vec::new();
    let snapshots_readable = dir_or_problem(&snapshots_dir, report);
    if let Some(one) = one {
        // locate_snapshot found it a real directory.
        snapshots.push(one.commit.clone());
    } else if snapshots_readable {
        let rd = crate::fsio::list_dir(&snapshots_dir, crate::fsio::Follow::Never)
            .map_err(|e| Error::io(&snapshots_dir, e.into()))?;
        for (name, ft) in rd {
            match ft {
                rustix::fs::FileType::Directory => {
                    snapshots.push(name.to_string_lossy().into_owned())
                }
                _ => {
                    dir_or_problem(&snapshots_dir.join(&name), report);
                }
            }
        }
    }
    snapshots.sort();
    let mut refs = BTreeMap::new();
    if dir_or_problem(&folder.join("refs"), report) {
        for (name, path) in list_refs(&folder) {
            if one.is_some_and(|o| o.ref_name.as_deref() != Some(name.as_str())) {
                continue;
            }
            let bad = |problem: String| CacheProblem {
                path: path.clone(),
                kind: "bad-ref",
                problem,
            };
            match read_ref(&path)? {
                RefState::Commit(c) => {
                    if snapshots_readable && !snapshots.contains(&c) {
                        report.problems.push(CacheProblem {
                            path: path.clone(),
                            kind: "ref-without-snapshot",
                            problem: format!(
                                "names commit {c}, which has no snapshot folder (scan_cache_dir reports this repository as corrupted)"
                            ),
                        });
                    }
                    refs.insert(name, c);
                }
                RefState::Bad(reason) => {
                    report.problems.push(bad(reason));
                    refs.insert(name, String::new());
                }
                RefState::Missing => {}
            }
        }
    }
    for commit in &snapshots {
        check_snapshot(&folder, commit, report)?;
    }
    let mut jobs = Vec::new();
    let blobs = folder.join("blobs");
    let wanted = one.map(|o| linked_blobs(&snapshots_dir.join(&o.commit)));
    if dir_or_problem(&blobs, report) {
        let rd = crate::fsio::list_dir(&blobs, crate::fsio::Follow::Never)
            .map_err(|e| Error::io(&blobs, e.into()))?;
        let mut names: Vec<(String, PathBuf)> = rd
            .into_iter()
            .map(|(n, _)| (n.to_string_lossy().into_owned(), blobs.join(&n)))
            .collect();
        names.sort();
        if let Some(wanted) = &wanted {
            names.retain(|(name, _)| wanted.contains(name));
        }
        for (name, path) in names {
            if let Some(kind) = EtagKind::of(&name) {
                match layout::blob_source(&folder, &path) {
                    Ok(Some((source, size))) => jobs.push(BlobJob {
                        repo: index,
                        path,
                        source,
                        etag: name,
                        kind,
                        size,
                    }),
                    Ok(None) => report.problems.push(CacheProblem {
                        path,
                        kind: "missing-blob",
                        problem: "is a link whose target (in the shared blob store) is missing"
                            .into(),
                    }),
                    Err(Error::HfCache { path, reason }) => report.problems.push(CacheProblem {
                        path,
                        kind: "unsafe-link",
                        problem: reason,
                    }),
                    Err(e) => return Err(e),
                }
            } else if name.ends_with(".incomplete") {
                report.notes.push(format!(
                    "{}: an interrupted download; huggingface_hub ignores it (delete it, or run the download again)",
                    path.display()
                ));
            } else {
                report.notes.push(format!(
                    "{}: not named by an etag, so it cannot be checked",
                    path.display()
                ));
            }
        }
    }
    let installed_by_airlock = layout::traces(&folder);
    Ok((
        CachedRepo {
            repo_type,
            repo_id,
            folder,
            blobs_checked: 0,
            bytes_checked: 0,
            snapshots,
            refs,
            installed_by_airlock,
        },
        jobs,
    ))
}

/// Checks one snapshot's entries against the layout's rules, then runs the model checks on its
/// files (through their links, which are then known to stay in the repository).
fn check_snapshot(folder: &Path, commit: &str, report: &mut CacheReport) -> Result<()> {
    let dir = folder.join("snapshots").join(commit);
    let mut files = Vec::new();
    for e in walkdir::WalkDir::new(&dir)
        .min_depth(1)
        .follow_links(false)
        .sort_by_file_name()
        .into_iter()
        .filter_entry(|e| e.file_name() != ".no_exist")
    {
        let e = e.map_err(|e| {
            let path = e.path().unwrap_or(&dir).to_path_buf();
            Error::io(
                path,
                // walkdir reports a loop only when it follows links, which it is told not to.
                e.into_io_error().unwrap_or_else(|| {
                    crate::fault::fault("a filesystem loop with links not followed")
                }),
            )
        })?;
        let ft = e.file_type();
        if ft.is_dir() {
            continue;
        }
        let rel = e
            .path()
            .strip_prefix(&dir)
            .expect("under the snapshot")
            .to_string_lossy()
            .into_owned();
        match layout::snapshot_content(folder, e.path(), &ft) {
            Ok(Content::File | Content::Blob { .. }) => files.push(rel),
            Ok(Content::MissingBlob { .. }) => {
                let target = fs::read_link(e.path()).unwrap_or_default();
                report.problems.push(CacheProblem {
                    path: e.path().to_path_buf(),
                    kind: "missing-blob",
                    problem: format!(
                        "{rel:?} in snapshot {commit} links to {}, which is missing",
                        target.display()
                    ),
                });
            }
            Err(Error::HfCache { path, reason }) => report.problems.push(CacheProblem {
                path,
                kind: "unsafe-link",
                problem: reason,
            }),
            Err(e) => return Err(e),
        }
    }
    // From the cache root, as pack does: a blob may live in the cache-wide shared store.
    let root = folder.parent().unwrap_or(folder);
    let folder_name = folder.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let prefix = format!("{folder_name}/snapshots/{commit}/");
    for rel in files {
        let full = format!("{prefix}{rel}");
        let findings =
            inspect::check_file(root, &full).map_err(|e| Error::io(dir.join(&rel), e))?;
        for f in findings {
            let shown = f.path.strip_prefix(&prefix).unwrap_or(&f.path).to_string();
            match f.severity {
                Severity::Error => report.problems.push(CacheProblem {
                    path: dir.join(&shown),
                    kind: f.code,
                    problem: format!(
                        "{shown:?} in snapshot {commit}: {} (fix: {})",
                        f.problem, f.fix
                    ),
                }),
                Severity::Warning => report.notes.push(format!(
                    "{}: {} ({})",
                    dir.join(&shown).display(),
                    f.problem,
                    f.fix
                )),
            }
        }
    }
    Ok(())
}
