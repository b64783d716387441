//! What `pack` reads: a model directory, or a snapshot of a Hugging Face cache, resolved into
//! one list of entries in bundle order, with the etag each cache file must hash to, and the
//! model checks that run on it before anything is written.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::hfcache::{self, EtagCheck, Snapshot};
use crate::inspect::{self, Finding, Severity, codes};
use crate::manifest::{self, HfSource, Warning};
use crate::scan::{self, ScanEntry};

/// Where the model is.
#[derive(Clone, Debug)]
pub enum ModelSpec {
    /// A directory.
    Dir(PathBuf),
    /// A snapshot of a Hugging Face cache.
    HfSnapshot {
        /// The cache (default: where huggingface_hub would look, from the environment).
        cache: Option<PathBuf>,
        /// The repository id (`org/name`).
        repo_id: String,
        /// `model`, `dataset` or `space`.
        repo_type: String,
        /// The revision (a branch, tag or commit).
        revision: String,
    },
    /// Snapshots of several repositories of one Hugging Face cache, packed into one bundle,
    /// each under its cache folder name (FORMAT.md section 14.4).
    HfSnapshots {
        /// The cache (default: where huggingface_hub would look, from the environment).
        cache: Option<PathBuf>,
        /// The repositories, at least two (one with `dir`), each at most once.
        repos: Vec<RepoAsk>,
        /// A model directory packed beside them, under its own name (FORMAT.md section
        /// 14.4, `dir`).
        dir: Option<PathBuf>,
    },
}

/// One repository of a pack of several: what the operator asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RepoAsk {
    /// The repository id (`org/name`).
    pub repo_id: String,
    /// `model`, `dataset`, `space` or `kernel`.
    pub repo_type: String,
    /// The revision (a branch, tag or commit).
    pub revision: String,
}

/// A snapshot found in the cache, with where it came from.
#[derive(Debug)]
pub struct HfOrigin {
    /// The cache directory.
    pub cache: PathBuf,
    /// The repository id.
    pub repo_id: String,
    /// The repository type.
    pub repo_type: String,
    /// The revision asked for.
    pub revision: String,
    /// What the cache holds for it (its `entries` moved to [`Model::entries`]).
    pub snapshot: Snapshot,
}

impl HfOrigin {
    /// The manifest's `source` (its etags are filled in by the pack).
    pub fn source(&self) -> HfSource {
        HfSource {
            repo_id: self.repo_id.clone(),
            repo_type: self.repo_type.clone(),
            revision: self.revision.clone(),
            commit: self.snapshot.commit.clone(),
            etags: Vec::new(),
        }
    }
}

/// A model ready to pack.
#[derive(Debug)]
pub struct Model {
    /// Directories and files in bundle order (a file's `source` is where its bytes are).
    pub entries: Vec<ScanEntry>,
    /// For a cache snapshot, one per file of `entries`, in order: the etag check.
    pub etags: Vec<EtagCheck>,
    /// For a cache snapshot: where it came from.
    pub hf: Option<HfOrigin>,
    /// For several snapshots (FORMAT.md section 14.4): where each came from, in bundle order
    /// of their folder names; `entries` holds each one's files below its folder name.
    pub repos: Vec<HfOrigin>,
    /// The model directory (for a snapshot: its folder; for a directory beside repositories:
    /// the directory's parent, its files' paths starting with its name).
    pub root: PathBuf,
    /// For a directory beside repositories (FORMAT.md section 14.4): its folder name in the
    /// bundle and the directory.
    pub dir: Option<(String, PathBuf)>,
    /// What the operator should know that does not stop the pack.
    pub notes: Vec<String>,
    /// For a directory: the model checks, run by the scan as it opened each file
    /// ([`scan::scan_checking`]), kept for [`Model::check`] (an error as its kind and text).
    checked: Option<Checked>,
    /// For snapshots: the model checks their walks left to the read pass, run before it
    /// ([`Model::check_left`]), their files named by their paths in the bundle.
    left: Option<Checked>,
}

/// The model checks' findings and the paths too long for them, or the error that stopped them.
type Checked = std::result::Result<(Vec<Finding>, Vec<String>), (std::io::ErrorKind, String)>;

impl Model {
    /// Reads the model `spec` names: the directory scanned by the packer's rules, or the
    /// snapshot read from the cache without trusting its layout.
    pub fn open(spec: &ModelSpec) -> Result<Model> {
        // The bytes of small files the walks keep for the read pass: one budget for the
        // bundle, however many repositories and directories it holds.
        let budget = scan::PrefetchBudget::for_pack();
        match spec {
            ModelSpec::Dir(dir) => open_dir(dir, &budget),
            ModelSpec::HfSnapshot {
                cache,
                repo_id,
                repo_type,
                revision,
            } => {
                let cache = match cache {
                    Some(dir) => std::path::absolute(dir).map_err(|e| Error::io(dir, e))?,
                    None => hfcache::cache_dir_from_env()?,
                };
                let mut snapshot =
                    hfcache::open_snapshot(&cache, repo_type, repo_id, revision, &budget)?;
                let etags = etag_checks(&mut snapshot).collect();
                // The model's list is the snapshot's (moved, not copied: one entry a file).
                Ok(Model {
                    entries: std::mem::take(&mut snapshot.entries),
                    etags,
                    root: snapshot.dir.clone(),
                    notes: snapshot.notes.clone(),
                    checked: None,
                    left: None,
                    repos: Vec::new(),
                    dir: None,
                    hf: Some(HfOrigin {
                        cache,
                        repo_id: repo_id.clone(),
                        repo_type: repo_type.clone(),
                        revision: revision.clone(),
                        snapshot,
                    }),
                })
            }
            ModelSpec::HfSnapshots { cache, repos, dir } => {
                open_snapshots(cache.as_deref(), repos, dir.as_deref(), &budget)
            }
        }
    }

    /// The repositories (model type) of this pack that other repositories its models need,
    /// as named (id, revision), found by the offline-readiness rules (a PEFT adapter's
    /// `base_model_name_or_path`, another repository's `auto_map` code), that the bundle does
    /// not carry yet.
    pub fn needed_repos(&self) -> Result<Vec<(String, String)>> {
        let needs = hfcache::offline::Needs {
            carried: self.carried(),
            ..Default::default()
        };
        let deps = hfcache::offline::Deps::Pack(&needs);
        match &self.hf {
            Some(hf) => {
                let (root, snapshot) = snapshot_from_cache_root(hf);
                hfcache::offline::check_listed(root, &snapshot, deps, self.gguf_below(""))
                    .map_err(|e| Error::io(root, e))?;
            }
            None if self.repos.is_empty() => {
                hfcache::offline::check_listed(&self.root, "", deps, self.gguf_below(""))
                    .map_err(|e| Error::io(&self.root, e))?;
            }
            None => {
                for hf in &self.repos {
                    let (root, snapshot) = snapshot_from_cache_root(hf);
                    let gguf = self.gguf_below(&format!("{}/", hf.folder()));
                    hfcache::offline::check_listed(root, &snapshot, deps, gguf)
                        .map_err(|e| Error::io(root, e))?;
                }
                if let Some((name, dir)) = &self.dir {
                    let gguf = self.gguf_below(&format!("{name}/"));
                    hfcache::offline::check_listed(dir, "", deps, gguf)
                        .map_err(|e| Error::io(dir, e))?;
                }
            }
        }
        let carried = needs.carried;
        Ok(needs
            .found
            .into_inner()
            .into_iter()
            .filter(|(id, _)| !carried.contains(id))
            .collect())
    }

    /// The files of the model named `*.gguf` below `prefix` (`""`, or a folder's name and a
    /// `/`), relative to it: what the offline checks' split-shard rule looks at, known here
    /// without a walk.
    fn gguf_below(&self, prefix: &str) -> Vec<String> {
        self.entries
            .iter()
            .filter_map(|e| match e {
                ScanEntry::File { path, .. } => path.strip_prefix(prefix),
                ScanEntry::Dir { .. } => None,
            })
            .filter(|rel| rel.ends_with(".gguf"))
            .map(str::to_string)
            .collect()
    }

    /// The repository ids of type model this pack carries.
    fn carried(&self) -> Vec<String> {
        self.hf
            .iter()
            .chain(&self.repos)
            .filter(|hf| hf.repo_type == "model")
            .map(|hf| hf.repo_id.clone())
            .collect()
    }

    /// The bundle name when none is given: the repository id, or the directory's name.
    pub fn default_name(&self) -> String {
        if !self.repos.is_empty() {
            let ids: Vec<&str> = self
                .dir
                .iter()
                .map(|(name, _)| name.as_str())
                .chain(self.repos.iter().map(|r| r.repo_id.as_str()))
                .collect();
            let name = ids.join("+");
            return if name.len() <= 200 {
                name
            } else {
                "repositories".into()
            };
        }
        match &self.hf {
            Some(hf) => hf.repo_id.clone(),
            None => std::fs::canonicalize(&self.root)
                .ok()
                .and_then(|d| d.file_name().and_then(|n| n.to_str()).map(str::to_string))
                .unwrap_or_else(|| "model".into()),
        }
    }

    /// The etag check of the `i`-th file of `entries`, for a cache snapshot.
    pub fn etag(&self, i: usize) -> Option<&EtagCheck> {
        self.etags.get(i)
    }

    /// Whether the scan left the model checks of some files to the pack's read pass
    /// ([`ScanEntry::File::checks_left`]: small files past its kept bytes, not opened by it):
    /// [`Model::check`] does not cover them, and `pack` decides on them at the end of its read
    /// pass, before anything is sealed.
    pub fn checks_left(&self) -> bool {
        self.entries.iter().any(|e| {
            matches!(
                e,
                ScanEntry::File {
                    checks_left: true,
                    ..
                }
            )
        })
    }

    /// Whether the model checks run so far found an error, or stopped on one.
    pub fn check_errors(&self) -> bool {
        if self.hf.is_none() && self.repos.is_empty() {
            return match &self.checked {
                Some(Ok((findings, _))) => inspect::has_errors(findings),
                Some(Err(_)) => true,
                None => false,
            };
        }
        // A snapshot's: its walk's checks and the files its listing names that it lacks.
        match self.format_checks() {
            Ok((findings, _)) => inspect::has_errors(&findings),
            Err(_) => true,
        }
    }

    /// Runs now the model checks the scan left to the read pass ([`scan::check_left`]), each
    /// file opened as the scan would have opened it, and adds what they find to the scan's:
    /// for a model the pack refuses, whose refusal then counts and names every error as if
    /// the scan had checked every file.
    pub fn check_left(&mut self) {
        if !self.checks_left() {
            return;
        }
        let mut checks = inspect::TreeChecks::default();
        scan::check_left(&self.root, &mut self.entries, &mut checks);
        let left = checks
            .finish(&self.root)
            .map_err(|e| (e.kind(), e.to_string()));
        if self.hf.is_none() && self.repos.is_empty() {
            self.checked = self.checked.take().map(|scanned| joined(scanned, left));
        } else {
            // A snapshot's files, named by their paths in the bundle.
            self.left = Some(match self.left.take() {
                Some(before) => joined(before, left),
                None => left,
            });
        }
    }

    /// The model checks (docs/CLI.md, model checks): for a directory, every file of the tree;
    /// for a snapshot, every file through its link, and one error per file the hub's cached
    /// listing names that the snapshot lacks. Also returns the files too deep for the
    /// path-based checks (packed all the same: the packer reads through directory handles).
    pub fn check(&self) -> Result<(Vec<Finding>, Vec<String>)> {
        let (mut findings, unchecked) = self.format_checks()?;
        // Offline readiness (`check --offline-ready`): what the loaders will look for that is not
        // there, found here where fixing it is cheap. Warnings only: which loader the target runs
        // is not known here (a single-file diffusion checkpoint or a GGUF for llama.cpp lacks
        // transformers' files on purpose), nor is its cache; `check --offline-ready` on the
        // target gives the verdict.
        let needs = hfcache::offline::Needs {
            carried: self.carried(),
            ..Default::default()
        };
        let deps = hfcache::offline::Deps::Pack(&needs);
        let offline = match &self.hf {
            None if self.repos.is_empty() => {
                hfcache::offline::check_listed(&self.root, "", deps, self.gguf_below(""))
                    .map_err(|e| Error::io(&self.root, e))?
            }
            None => {
                let mut all = Vec::new();
                for hf in &self.repos {
                    let (root, snapshot) = snapshot_from_cache_root(hf);
                    let folder = hf.folder();
                    let gguf = self.gguf_below(&format!("{folder}/"));
                    all.extend(
                        hfcache::offline::check_listed(root, &snapshot, deps, gguf)
                            .map_err(|e| Error::io(root, e))?
                            .into_iter()
                            .map(|mut f| {
                                f.path = format!("{folder}/{}", f.path);
                                f
                            }),
                    );
                }
                if let Some((name, dir)) = &self.dir {
                    let gguf = self.gguf_below(&format!("{name}/"));
                    all.extend(
                        hfcache::offline::check_listed(dir, "", deps, gguf)
                            .map_err(|e| Error::io(dir, e))?
                            .into_iter()
                            .map(|mut f| {
                                f.path = format!("{name}/{}", f.path);
                                f
                            }),
                    );
                }
                all
            }
            Some(hf) => {
                let (root, snapshot) = snapshot_from_cache_root(hf);
                hfcache::offline::check_listed(root, &snapshot, deps, self.gguf_below(""))
                    .map_err(|e| Error::io(root, e))?
            }
        };
        findings.extend(offline.into_iter().map(|mut f| {
            f.severity = Severity::Warning;
            f
        }));
        findings.sort_by(|a, b| (&a.path, a.code).cmp(&(&b.path, b.code)));
        Ok((findings, unchecked))
    }

    /// The format checks of [`Model::check`].
    fn format_checks(&self) -> Result<(Vec<Finding>, Vec<String>)> {
        if !self.repos.is_empty() {
            let mut findings = Vec::new();
            let mut unchecked = Vec::new();
            if let Some((name, dir)) = &self.dir {
                let (found, too_long) = match &self.checked {
                    Some(Ok(checked)) => checked.clone(),
                    Some(Err((kind, text))) => {
                        return Err(Error::io(dir, std::io::Error::new(*kind, text.clone())));
                    }
                    None => inspect::check_tree_reaching(dir).map_err(|e| Error::io(dir, e))?,
                };
                findings.extend(found.into_iter().map(|mut f| {
                    f.path = format!("{name}/{}", f.path);
                    f
                }));
                unchecked.extend(too_long.into_iter().map(|p| format!("{name}/{p}")));
            }
            for hf in &self.repos {
                let folder = hf.folder();
                let (found, too_long) = snapshot_checks(hf)?;
                findings.extend(found.into_iter().map(|mut f| {
                    f.path = format!("{folder}/{}", f.path);
                    f
                }));
                unchecked.extend(too_long.into_iter().map(|p| format!("{folder}/{p}")));
            }
            self.add_left(&mut findings, &mut unchecked)?;
            findings.sort_by(|a, b| (&a.path, a.code).cmp(&(&b.path, b.code)));
            return Ok((findings, unchecked));
        }
        let Some(hf) = &self.hf else {
            return match &self.checked {
                Some(Ok(checked)) => Ok(checked.clone()),
                Some(Err((kind, text))) => Err(Error::io(
                    &self.root,
                    std::io::Error::new(*kind, text.clone()),
                )),
                None => {
                    inspect::check_tree_reaching(&self.root).map_err(|e| Error::io(&self.root, e))
                }
            };
        };
        let (mut findings, mut unchecked) = snapshot_checks(hf)?;
        self.add_left(&mut findings, &mut unchecked)?;
        findings.sort_by(|a, b| (&a.path, a.code).cmp(&(&b.path, b.code)));
        Ok((findings, unchecked))
    }

    /// Adds the snapshots' checks run before the read pass ([`Model::check_left`]).
    fn add_left(&self, findings: &mut Vec<Finding>, unchecked: &mut Vec<String>) -> Result<()> {
        match &self.left {
            Some(Ok((found, too_long))) => {
                findings.extend(found.iter().cloned());
                unchecked.extend(too_long.iter().cloned());
            }
            Some(Err((kind, text))) => {
                return Err(Error::io(
                    &self.root,
                    std::io::Error::new(*kind, text.clone()),
                ));
            }
            None => {}
        }
        Ok(())
    }
}

impl HfOrigin {
    /// The repository's cache folder name, `models--ORG--NAME`: its directory in a bundle of
    /// several.
    pub fn folder(&self) -> String {
        hfcache::repo_folder_name(&self.repo_type, &self.repo_id)
    }
}

/// The format checks of the snapshot `hf` (run as it was read, [`hfcache::open_snapshot`]),
/// one error per file the hub's cached listing names that the snapshot lacks, and the files
/// too deep for the path-based checks.
fn snapshot_checks(hf: &HfOrigin) -> Result<(Vec<Finding>, Vec<String>)> {
    let snap = &hf.snapshot;
    let (mut findings, unchecked) = match &snap.checked {
        Ok(checked) => checked.clone(),
        Err((kind, text)) => {
            // Checked from the cache root: a blob may be a link into the cache-wide shared
            // store (`CACHE/blobs/<xx>/<xet hash>`), outside the repository folder.
            let (root, _) = snapshot_from_cache_root(hf);
            return Err(Error::io(root, std::io::Error::new(*kind, text.clone())));
        }
    };
    for path in &snap.missing {
        findings.push(Finding {
            severity: Severity::Error,
            code: codes::HF_FILE_MISSING,
            path: path.clone(),
            problem: format!(
                "is listed in the hub's listing of commit {} (trees/{}.json) but is not in the snapshot: the download was interrupted or limited to some files",
                snap.commit, snap.commit
            ),
            fix: "finish the download with huggingface_hub (`hf download ORG/NAME --revision REV`); if it was limited on purpose, pack with --no-model-checks".into(),
        });
    }
    Ok((findings, unchecked))
}

/// The etag check of each file of `snapshot`, its etags moved out (not copied: a dataset of
/// a million files holds a million of them).
fn etag_checks(snapshot: &mut Snapshot) -> impl Iterator<Item = EtagCheck> + use<> {
    std::mem::take(&mut snapshot.etags)
        .into_iter()
        .map(|e| match e {
            Some(e) => EtagCheck::Expect(e),
            None => EtagCheck::Compute,
        })
}

/// Opens several snapshots of one cache as one model: each under its cache folder name, in
/// bundle order of those names, its entries and etags in order below it.
fn open_snapshots(
    cache: Option<&Path>,
    asks: &[RepoAsk],
    dir: Option<&Path>,
    budget: &scan::PrefetchBudget,
) -> Result<Model> {
    let cache = match cache {
        Some(dir) => std::path::absolute(dir).map_err(|e| Error::io(dir, e))?,
        None => hfcache::cache_dir_from_env()?,
    };
    // The directory beside them goes under its own name, among the repositories' folders in
    // bundle order; its files are read below its parent by that name (no link followed).
    let mut beside = match dir {
        Some(d) => Some(open_dir_beside(d, budget)?),
        None => None,
    };
    let mut asks: Vec<(String, &RepoAsk)> = asks
        .iter()
        .map(|a| (hfcache::repo_folder_name(&a.repo_type, &a.repo_id), a))
        .collect();
    asks.sort_by(|a, b| crate::paths::bundle_order(&a.0, &b.0));
    for pair in asks.windows(2) {
        if crate::paths::fold(&pair[0].0) == crate::paths::fold(&pair[1].0) {
            return Err(Error::Usage(format!(
                "--hf-repo {}:{} and --hf-repo {}:{} name the same repository ({}): a bundle carries one revision of each repository",
                pair[0].1.repo_type,
                pair[0].1.repo_id,
                pair[1].1.repo_type,
                pair[1].1.repo_id,
                pair[0].0
            )));
        }
    }
    let mut model = Model {
        entries: Vec::new(),
        etags: Vec::new(),
        hf: None,
        repos: Vec::new(),
        root: cache.clone(),
        dir: None,
        notes: Vec::new(),
        checked: None,
        left: None,
    };
    for (folder, ask) in asks {
        if let Some((name, _, _)) = &beside
            && crate::paths::bundle_order(name, &folder).is_lt()
        {
            let (name, parent, dm) = beside.take().expect("beside");
            model.add_dir(name, parent, dm);
        }
        let mut snapshot =
            hfcache::open_snapshot(&cache, &ask.repo_type, &ask.repo_id, &ask.revision, budget)?;
        model.entries.push(ScanEntry::Dir {
            path: folder.clone(),
        });
        for mut e in std::mem::take(&mut snapshot.entries) {
            match &mut e {
                ScanEntry::Dir { path } | ScanEntry::File { path, .. } => {
                    *path = format!("{folder}/{path}");
                }
            }
            model.entries.push(e);
        }
        model.etags.extend(etag_checks(&mut snapshot));
        model.notes.extend(snapshot.notes.iter().cloned());
        model.repos.push(HfOrigin {
            cache: cache.clone(),
            repo_id: ask.repo_id.clone(),
            repo_type: ask.repo_type.clone(),
            revision: ask.revision.clone(),
            snapshot,
        });
    }
    if let Some((name, parent, dm)) = beside.take() {
        model.add_dir(name, parent, dm);
    }
    Ok(model)
}

impl Model {
    /// Adds the directory model `dm` (its entries below `parent`/`name`) under the folder
    /// `name`, after what this model holds: its files read below `parent`, so `root` becomes
    /// `parent` (every file of a snapshot has its blob as its source, never the root).
    fn add_dir(&mut self, name: String, parent: PathBuf, dm: Model) {
        self.entries.push(ScanEntry::Dir { path: name.clone() });
        for mut e in dm.entries {
            if matches!(e, ScanEntry::File { .. }) {
                // The writer computes one, which the manifest does not record for it.
                self.etags.push(EtagCheck::Compute);
            }
            match &mut e {
                ScanEntry::Dir { path } | ScanEntry::File { path, .. } => {
                    *path = format!("{name}/{path}");
                }
            }
            self.entries.push(e);
        }
        self.notes.extend(dm.notes);
        self.checked = dm.checked;
        self.dir = Some((name, dm.root));
        self.root = parent;
    }
}

/// The directory `dir` packed beside repositories: its folder name in the bundle (its own
/// name), its parent, and its model.
fn open_dir_beside(dir: &Path, budget: &scan::PrefetchBudget) -> Result<(String, PathBuf, Model)> {
    let canon = std::fs::canonicalize(dir).map_err(|e| Error::io(dir, e))?;
    let name = canon.file_name().and_then(|n| n.to_str()).unwrap_or("");
    if name.is_empty()
        || ["models--", "datasets--", "spaces--", "kernels--"]
            .iter()
            .any(|f| name.starts_with(f))
        || crate::paths::check_relative(name).is_err()
    {
        return Err(Error::Usage(format!(
            "{}: its name {:?} cannot be its folder in a bundle beside repositories (a UTF-8 name, not of a cache folder's form such as models--ORG--NAME): rename it, or pack it on its own",
            dir.display(),
            crate::display::escape(name)
        )));
    }
    let name = name.to_string();
    let parent = canon.parent().unwrap_or(Path::new("/")).to_path_buf();
    let mut model = open_dir(&canon, budget)?;
    // Its files are read below the parent, among the repositories' blobs: every check runs
    // here, as for a model checked before the pack.
    model.check_left();
    Ok((name, parent, model))
}

/// Scans a model directory. `hf download --local-dir` bookkeeping describes this host's
/// download and is left out, with a note.
fn open_dir(dir: &Path, budget: &scan::PrefetchBudget) -> Result<Model> {
    if let Some(snap) = hfcache::snapshot_from_path(dir) {
        return Err(Error::Usage(format!(
            "{} is a snapshot folder of the Hugging Face cache {}: its files are links into the repository's blobs/, which a directory pack does not follow. Pack the snapshot from the cache instead (its files are then checked against the hub's hashes): in place of {}, pass {}",
            dir.display(),
            snap.cache.display(),
            dir.display(),
            snap.flags()
        )));
    }
    // The model checks ride on the scan, which opens each file anyway (one open a file, not
    // a second walk opening each file again by path).
    let mut checks = inspect::TreeChecks::default();
    let mut entries = scan::scan_checking(dir, dir, &mut checks, budget)?;
    let checked = checks.finish(dir).map_err(|e| (e.kind(), e.to_string()));
    let mut notes = Vec::new();
    let before = entries.len();
    entries.retain(|e| !hfcache::is_local_dir_metadata(e.path()));
    if entries.len() != before {
        let only_hf = !entries.iter().any(|e| e.path().starts_with(".cache/"));
        entries.retain(|e| !(only_hf && e.path() == ".cache"));
        notes.push(format!(
            "{}/{}/ left out of the bundle: it is huggingface_hub's bookkeeping of the `hf download --local-dir` on this host (download metadata and locks), not part of the model",
            dir.display(),
            hfcache::LOCAL_DIR_METADATA
        ));
    }
    Ok(Model {
        entries,
        etags: Vec::new(),
        hf: None,
        repos: Vec::new(),
        dir: None,
        root: dir.to_path_buf(),
        notes,
        checked: Some(checked),
        left: None,
    })
}

/// The model checks of the files the scan opened and of those it left (`left`), as one: the
/// findings sorted by path and code and the paths too long for the checks in bundle order, as
/// one [`inspect::TreeChecks::finish`] of them all gives; else the scan's error, else the
/// other.
fn joined(scanned: Checked, left: Checked) -> Checked {
    let ((mut findings, mut too_long), (more, more_too_long)) = (scanned?, left?);
    findings.extend(more);
    findings.sort_by(|a, b| (&a.path, a.code).cmp(&(&b.path, b.code)));
    too_long.extend(more_too_long);
    too_long.sort_by(|a, b| crate::paths::bundle_order(a, b));
    too_long.dedup();
    Ok((findings, too_long))
}

/// Stops a pack on error findings unless `skip_errors`; otherwise returns every finding as a
/// warning to record in the manifest, as [`warning`] records it.
pub fn gate(findings: &[Finding], skip_errors: bool) -> Result<Vec<Warning>> {
    let errors: Vec<&Finding> = findings
        .iter()
        .filter(|f| f.severity == Severity::Error)
        .collect();
    if !errors.is_empty() && !skip_errors {
        return Err(Error::ModelChecks {
            count: errors.len(),
            first: format!("{}: {}", errors[0].path, errors[0].problem),
            fix: errors[0].fix.clone(),
        });
    }
    Ok(findings.iter().map(warning).collect())
}

/// A finding as the manifest records it (`warnings`, FORMAT.md section 7, rule 14): each
/// field escaped ([`crate::display::escape`]) and cut to the 4096 bytes free text may hold. A
/// finding quotes names from inside the model (a tensor name, a GGUF key, a shard index's
/// file names), which may hold control characters; recorded as found, they made the sealed
/// manifest invalid and `pack --no-model-checks` ended with an internal error.
fn warning(f: &Finding) -> Warning {
    use crate::display::escape_bounded;
    Warning {
        path: escape_bounded(&f.path, manifest::MAX_FREE_TEXT),
        code: escape_bounded(f.code, manifest::MAX_FREE_TEXT),
        problem: escape_bounded(&f.problem, manifest::MAX_FREE_TEXT),
    }
}

/// The cache root a snapshot is checked from, and the snapshot's path below it
/// (`models--ORG--NAME/snapshots/COMMIT`): a blob may be a link into the cache-wide shared store,
/// outside the repository folder.
fn snapshot_from_cache_root(hf: &HfOrigin) -> (&Path, String) {
    let snap = &hf.snapshot;
    let root = snap.repo_folder.parent().unwrap_or(&snap.repo_folder);
    let folder = snap
        .repo_folder
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("");
    (root, format!("{folder}/snapshots/{}", snap.commit))
}

#[cfg(test)]
mod tests {
    use super::*;

    const POINTER: &[u8] = b"version https://git-lfs.github.com/spec/v1\n\
        oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\n\
        size 4943852032\n";

    /// `pack --no-model-checks` records each finding in the manifest's `warnings` (issue 36
    /// item 5): a finding quoting a tensor name with control characters, or one longer than
    /// free text may be, made the sealed manifest invalid (`internal error`). Recorded escaped
    /// and bounded, the manifest validates.
    #[test]
    fn findings_are_recorded_escaped_and_bounded() {
        let hostile = "\u{1b}[2K\u{1b}[32mOK\u{1b}]52;c;ZXZpbA==\u{7}\u{202e}\u{9b}\t";
        let findings = [
            Finding::error(
                codes::SAFETENSORS_TENSOR_INVALID_INFO,
                "model.safetensors",
                format!("has tensor `{hostile}` of F32 [3] = 12 bytes"),
                "fix",
            ),
            Finding::warning(
                codes::GGUF_BIG_ENDIAN,
                "m.gguf",
                format!("has the key `{}` twice", "k\n".repeat(3000)),
                "fix",
            ),
        ];
        assert!(gate(&findings, false).is_err());
        let recorded = gate(&findings, true).unwrap();
        assert_eq!(
            recorded[0].problem,
            "has tensor `\\x1b[2K\\x1b[32mOK\\x1b]52;c;ZXZpbA==\\x07\\u{202e}\\u{9b}\\t` of F32 [3] = 12 bytes"
        );
        assert!(recorded[1].problem.ends_with('…'));
        // Rule 14 of FORMAT.md section 7, as `Manifest::validate` holds every reader to it.
        for w in &recorded {
            for text in [&w.path, &w.code, &w.problem] {
                assert!(text.len() <= manifest::MAX_FREE_TEXT, "{text}");
                assert!(!text.chars().any(char::is_control), "{text:?}");
            }
        }
    }

    /// The model checks of a directory run in the scan's pass, on the handle it opened each
    /// file with, not in a second walk that opens every file again by path (a third of pack's
    /// time on 100,000 small files): what `check` reports is what the scan read. A pointer
    /// written after the scan is not seen; the second walk saw it.
    #[test]
    fn the_model_checks_of_a_directory_ride_on_the_scan() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("m");
        std::fs::create_dir_all(dir.join("d")).unwrap();
        std::fs::write(dir.join("d/notes.txt"), b"not yet").unwrap();
        std::fs::write(dir.join("tokenizer.json"), POINTER).unwrap();
        let model = Model::open(&ModelSpec::Dir(dir.clone())).unwrap();
        std::fs::write(dir.join("d/notes.txt"), POINTER).unwrap();
        let (findings, unchecked) = model.check().unwrap();
        let got: Vec<(&str, &str)> = findings.iter().map(|f| (f.path.as_str(), f.code)).collect();
        assert_eq!(got, [("tokenizer.json", codes::LFS_POINTER)]);
        assert!(unchecked.is_empty());
    }
}
