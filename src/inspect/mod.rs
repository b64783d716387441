//! Model-format integrity checks: find a broken model from its headers and sizes alone.
//!
//! Carrying a model across an air gap costs a trip, so the one thing airlock must not do is
//! carry a model that will not load. The usual breakages are mundane: a clone made without
//! Git LFS leaves 130-byte pointer files where the weights should be; an interrupted download
//! leaves a truncated or zero-filled file, or a `*.incomplete` blob; a proxy saves an HTML
//! error page under the weight file's name; a sharded checkpoint misses one shard; a symlink
//! in a Hugging Face cache points at a blob that was never fetched.
//!
//! Hashing cannot catch any of these (a truncated file hashes fine), but every weight format
//! says in its header how long the file must be and where each tensor lives. So each check
//! here reads only headers and file sizes, applies the rules of the reference reader of that
//! format (the safetensors crate, ggml's `gguf.cpp` and llama.cpp's loader, PyTorch's miniz
//! reader, transformers' shard loading), and reports in the reference reader's words, so a
//! person can match our finding to the error they would have hit on the other side. A check of
//! a 100 GB model takes milliseconds.
//!
//! Every input is hostile: no length field is trusted before it is compared with the file
//! size, nothing is allocated from a length without a cap, and no check reads tensor data.
//!
//! The module reports; it never prints and never decides. Each [`Finding`] carries a stable
//! [`codes`] id, a severity, the file (relative to the checked root), one sentence saying what
//! is wrong and one saying what to do. The command layer decides what to show and whether
//! errors stop a pack.

use std::fs::{self, File};
use std::io;
use std::path::{Component, Path, PathBuf};

use serde::Serialize;

pub use format::Format;

pub mod codes;
mod config;
pub mod format;
#[cfg(test)]
mod fuzz;
mod gguf;
mod lfs;
mod read;
pub(crate) mod safetensors;
mod shards;
mod torch_zip;
pub mod values;

/// How bad a finding is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// The model probably loads, but something needs a person's attention.
    Warning,
    /// The model will not load as it is.
    Error,
}

/// One problem with one file.
#[derive(Clone, Debug, Serialize)]
pub struct Finding {
    /// How bad it is.
    pub severity: Severity,
    /// Stable id, one of [`codes`].
    pub code: &'static str,
    /// The file, relative to the checked root, `/`-separated.
    pub path: String,
    /// One sentence whose subject is the path (`<path> is a Git LFS pointer for a 4.9 GB file, …`): what is
    /// wrong, with numbers, naming the error the reference reader would report where it has one.
    pub problem: String,
    /// One sentence: what to do about it.
    pub fix: String,
}

impl Finding {
    pub(crate) fn error(
        code: &'static str,
        path: &str,
        problem: impl Into<String>,
        fix: impl Into<String>,
    ) -> Self {
        Finding {
            severity: Severity::Error,
            code,
            path: path.to_string(),
            problem: problem.into(),
            fix: fix.into(),
        }
    }

    pub(crate) fn warning(
        code: &'static str,
        path: &str,
        problem: impl Into<String>,
        fix: impl Into<String>,
    ) -> Self {
        Finding {
            severity: Severity::Warning,
            ..Finding::error(code, path, problem, fix)
        }
    }
}

/// File extensions of weight files: a zero-length file with one of these is always broken.
pub const WEIGHT_EXTENSIONS: &[&str] = &[
    "safetensors",
    "bin",
    "pt",
    "pth",
    "gguf",
    "onnx",
    "h5",
    "msgpack",
    "ckpt",
];

/// True if any finding is an error.
pub fn has_errors(findings: &[Finding]) -> bool {
    findings.iter().any(|f| f.severity == Severity::Error)
}

/// Checks every file under `root`.
///
/// The walk is sorted and does not descend into symlinked directories (a symlink that stays in
/// the tree points at files the walk reaches anyway). Symlinks to files are followed when
/// they stay in the tree; dangling ones and ones that leave the tree are findings. The
/// `.no_exist/` folders of a Hugging Face cache hold empty markers for files known to be absent
/// upstream and are skipped. Findings are sorted by path, then code.
///
/// # Errors
///
/// An I/O error other than a broken symlink (the root is missing, a file cannot be read); its
/// message names the path.
pub fn check_tree(root: &Path) -> io::Result<Vec<Finding>> {
    let tree = Tree::new(root)?;
    let mut findings = Vec::new();
    let walk = walkdir::WalkDir::new(root)
        .follow_links(false)
        .min_depth(1)
        .sort_by_file_name()
        .into_iter()
        .filter_entry(|e| e.file_name() != ".no_exist");
    for entry in walk {
        let entry = entry.map_err(|e| {
            let path = e.path().map(Path::to_path_buf).unwrap_or_default();
            let err = io::Error::from(e);
            with_path(&path, err)
        })?;
        if entry.file_type().is_dir() {
            continue;
        }
        let rel = relative_name(root, entry.path());
        findings.extend(tree.check_walked(&rel, &entry)?);
    }
    sort_findings(&mut findings);
    Ok(findings)
}

/// [`check_tree`], going on past what path-based reads cannot reach: a file (or a directory)
/// whose path is longer than the system's path limit is returned in the second list (relative,
/// `/`-separated) instead of ending the walk with `InvalidFilename`. For `pack`, which reads
/// the files themselves through directory handles and can carry such paths.
///
/// # Errors
///
/// As [`check_tree`], except for paths too long to open.
pub fn check_tree_reaching(root: &Path) -> io::Result<(Vec<Finding>, Vec<String>)> {
    let tree = Tree::new(root)?;
    let mut findings = Vec::new();
    let mut unchecked = Vec::new();
    tree.walk_reaching(root, 1, &mut findings, &mut unchecked)
        .map_err(|(_, e)| e)?;
    sort_findings(&mut findings);
    Ok((findings, unchecked))
}

/// The kernel's limit on a path it is handed (`PATH_MAX`, the NUL included): a longer one is
/// refused with `ENAMETOOLONG`, so the path-based walk of [`check_tree_reaching`] cannot reach
/// what lies there.
pub(crate) const PATH_MAX: usize = 4096;

/// The model checks of a tree, fed by a pass that opens every file anyway (pack's scan of a
/// model directory, `check`'s comparison with the receipt), so that no file is opened twice
/// (on a tree of 100,000 small files the separate walk that opened each file again by path was
/// a third of pack's time): each regular file is checked on the handle that pass holds, and
/// what needs more (a link, a shard index or a config naming other files of the tree, a file
/// the pass could not open, a subtree it does not visit) is checked by path at the end.
///
/// [`TreeChecks::finish`] returns what [`check_tree_reaching`] returns for the same tree: the
/// same findings in the same order, the same first error (in walk order), and the same paths
/// reported as too long for the path-based checks.
#[derive(Debug, Default)]
pub struct TreeChecks {
    findings: Vec<Finding>,
    /// Checked by path at the end: the path, and whether the pass found a regular file there.
    by_path: Vec<(String, bool)>,
    /// Entries the pass does not visit, each checked with everything below it at the end.
    subtrees: Vec<String>,
    /// Every error, with its path: the first in walk order is the one reported.
    errors: Vec<(String, io::Error)>,
    unchecked: Vec<String>,
}

impl TreeChecks {
    /// Checks the regular file `rel` (relative to the checked root, `/`-separated), found
    /// without following a link and open as `file`, `len` bytes by its `fstat`; `path` is the
    /// root joined with `rel` (for messages).
    pub fn opened(&mut self, rel: &str, path: &Path, file: &File, len: u64) {
        self.opened_read(rel, path, file, len, None);
    }

    /// [`TreeChecks::opened`], given the bytes of the file the caller has already read from
    /// its start (`head`, all of it for a small file): the first bytes every check sniffs are
    /// taken from them instead of read again.
    pub fn opened_read(
        &mut self,
        rel: &str,
        path: &Path,
        file: &File,
        len: u64,
        head: Option<&[u8]>,
    ) {
        self.opened_at(rel, path, file, len, head, true);
    }

    /// [`TreeChecks::opened_read`] for a file reached through the link `rel` (a Hugging Face
    /// snapshot's file, open as its blob at `path`): a check that needs the tree resolves the
    /// link at the end, as [`TreeChecks::by_path`] with `regular` false.
    pub(crate) fn opened_through_link(
        &mut self,
        rel: &str,
        path: &Path,
        file: &File,
        len: u64,
        head: Option<&[u8]>,
    ) {
        self.opened_at(rel, path, file, len, head, false);
    }

    fn opened_at(
        &mut self,
        rel: &str,
        path: &Path,
        file: &File,
        len: u64,
        head: Option<&[u8]>,
        regular: bool,
    ) {
        if skipped(rel) {
            return;
        }
        if let Some(top) = too_long(rel, path) {
            self.unchecked.push(top);
            return;
        }
        let found = match by_name(rel, len) {
            Some(found) => Ok(Some(found)),
            None => check_opened(None, rel, path, file, len, head),
        };
        match found {
            Ok(Some(found)) => self.findings.extend(found),
            Ok(None) => self.by_path.push((rel.to_string(), regular)),
            Err(e) => self.errors.push((rel.to_string(), e)),
        }
    }

    /// Checks the entry `rel` by its path at the end: a link (`regular` false: resolved, its
    /// target checked when it stays in the tree), something that is not a file (nothing to
    /// check), or a regular file the pass did not open (`regular` true).
    pub fn by_path(&mut self, rel: &str, regular: bool) {
        if !skipped(rel) {
            self.by_path.push((rel.to_string(), regular));
        }
    }

    /// Checks the entry `rel`, and everything below it when it is a directory, at the end:
    /// what the pass does not visit (pack's scan leaves out a receipt directory).
    pub fn subtree(&mut self, rel: &str) {
        if !skipped(rel) {
            self.subtrees.push(rel.to_string());
        }
    }

    /// Adds what another part of the same pass found (a parallel pass feeds one per run).
    pub fn merge(&mut self, other: TreeChecks) {
        self.findings.extend(other.findings);
        self.by_path.extend(other.by_path);
        self.subtrees.extend(other.subtrees);
        self.errors.extend(other.errors);
        self.unchecked.extend(other.unchecked);
    }

    /// Runs the checks left for the end against `root` and returns the findings (sorted by
    /// path, then code) and the paths too long for the path-based checks (in walk order), as
    /// [`check_tree_reaching`].
    ///
    /// # Errors
    ///
    /// As [`check_tree_reaching`]: the first error in walk order.
    pub fn finish(mut self, root: &Path) -> io::Result<(Vec<Finding>, Vec<String>)> {
        let tree = Tree::new(root)?;
        for (rel, regular) in std::mem::take(&mut self.by_path) {
            match tree.check_found(&rel, regular) {
                Ok(found) => self.findings.extend(found),
                Err(e) if e.kind() == io::ErrorKind::InvalidFilename => self.unchecked.push(rel),
                Err(e) => self.errors.push((rel, e)),
            }
        }
        for rel in std::mem::take(&mut self.subtrees) {
            let start = root.join(&rel);
            if fs::symlink_metadata(&start).is_err_and(|e| e.kind() == io::ErrorKind::NotFound) {
                continue;
            }
            if let Err(e) = tree.walk_reaching(&start, 0, &mut self.findings, &mut self.unchecked) {
                self.errors.push(e);
            }
        }
        if let Some((_, e)) = self
            .errors
            .into_iter()
            .min_by(|a, b| crate::paths::bundle_order(&a.0, &b.0))
        {
            return Err(e);
        }
        sort_findings(&mut self.findings);
        self.unchecked
            .sort_by(|a, b| crate::paths::bundle_order(a, b));
        self.unchecked.dedup();
        Ok((self.findings, self.unchecked))
    }
}

/// Whether the checks leave `rel` out: anything in a `.no_exist/` folder of a Hugging Face
/// cache (empty markers for files known to be absent upstream), as [`check_tree`]'s walk does.
fn skipped(rel: &str) -> bool {
    rel.split('/').any(|c| c == ".no_exist")
}

/// The first of `rel`'s leading paths (its topmost directory, the next one down, ..., `rel`
/// itself) whose full path (the root joined with it; `path` is the root joined with `rel`)
/// is too long for the kernel: what the path-based walk of [`check_tree_reaching`] reports as
/// not checked, going no further below it.
fn too_long(rel: &str, path: &Path) -> Option<String> {
    use std::os::unix::ffi::OsStrExt;
    let full = path.as_os_str().as_bytes();
    if full.len() < PATH_MAX || !full.ends_with(rel.as_bytes()) {
        return None;
    }
    let root_len = full.len() - rel.len();
    let mut end = 0;
    for c in rel.split('/') {
        end += c.len();
        if root_len + end >= PATH_MAX {
            return Some(rel[..end].to_string());
        }
        end += 1;
    }
    None
}

/// Checks one file, `rel` being its path relative to `root` (`/`-separated).
///
/// Any file under 1024 bytes may be a Git LFS pointer; otherwise the format is the one
/// [`format::identify`] gives from the name and the first bytes (a GGUF or safetensors file is
/// checked as such whatever its name). A shard index (`*.index.json`) is checked together with
/// the shards it names.
///
/// # Errors
///
/// `rel` is absolute or climbs out of `root`, or an I/O error other than a broken symlink.
pub fn check_file(root: &Path, rel: &str) -> io::Result<Vec<Finding>> {
    let tree = Tree::new(root)?;
    let mut findings = tree.check(rel)?;
    sort_findings(&mut findings);
    Ok(findings)
}

fn sort_findings(findings: &mut [Finding]) {
    findings.sort_by(|a, b| (&a.path, a.code).cmp(&(&b.path, b.code)));
}

/// The checked root, resolved once.
pub(crate) struct Tree {
    root: PathBuf,
    canonical_root: PathBuf,
}

/// Where a path inside the tree leads.
pub(crate) enum Resolved {
    /// A regular file inside the tree (possibly reached through symlinks).
    File { target: PathBuf, len: u64 },
    /// A directory, device, socket...: nothing to check.
    NotAFile,
    /// Nothing at this path at all.
    Missing,
    /// A symlink whose target does not resolve.
    Dangling { link: PathBuf, error: io::Error },
    /// Resolves outside the tree.
    Escapes { target: PathBuf },
}

impl Tree {
    pub(crate) fn new(root: &Path) -> io::Result<Self> {
        let canonical_root = fs::canonicalize(root).map_err(|e| with_path(root, e))?;
        Ok(Tree {
            root: root.to_path_buf(),
            canonical_root,
        })
    }

    pub(crate) fn resolve(&self, rel: &str) -> io::Result<Resolved> {
        let path = self.root.join(rel);
        let link_meta = match fs::symlink_metadata(&path) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Resolved::Missing),
            Err(e) => return Err(with_path(&path, e)),
        };
        let target = match fs::canonicalize(&path) {
            Ok(t) => t,
            Err(error) if link_meta.file_type().is_symlink() => {
                let link = fs::read_link(&path).unwrap_or_default();
                return Ok(Resolved::Dangling { link, error });
            }
            // A parent directory is a dangling symlink.
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Resolved::Missing),
            Err(e) => return Err(with_path(&path, e)),
        };
        if !target.starts_with(&self.canonical_root) {
            return Ok(Resolved::Escapes { target });
        }
        let meta = fs::metadata(&target).map_err(|e| with_path(&target, e))?;
        if meta.is_file() {
            Ok(Resolved::File {
                target,
                len: meta.len(),
            })
        } else {
            Ok(Resolved::NotAFile)
        }
    }

    /// [`Tree::check`] for an entry of a walk from the root that follows no link: a regular
    /// file it reached is inside the tree and needs no resolving (a `realpath` per file was
    /// most of the model checks' cost on a tree of many small files).
    fn check_walked(&self, rel: &str, entry: &walkdir::DirEntry) -> io::Result<Vec<Finding>> {
        if entry.file_type().is_file() && is_plain_relative(rel) {
            let len = entry
                .metadata()
                .map_err(|e| with_path(entry.path(), e.into()))?
                .len();
            return self.check_content(rel, entry.path(), len);
        }
        self.check(rel)
    }

    /// [`Tree::check_walked`] for an entry another pass found, by its path: `regular` when
    /// that pass found a regular file there (not a link).
    fn check_found(&self, rel: &str, regular: bool) -> io::Result<Vec<Finding>> {
        if regular && is_plain_relative(rel) {
            let path = self.root.join(rel);
            let len = fs::symlink_metadata(&path)
                .map_err(|e| with_path(&path, e))?
                .len();
            return self.check_content(rel, &path, len);
        }
        self.check(rel)
    }

    /// Walks from `start` (the root, or an entry below it with `min_depth` 0) without
    /// following a link and checks every entry that is not a directory, as
    /// [`check_tree_reaching`]; stops at the first error, returned with its path.
    fn walk_reaching(
        &self,
        start: &Path,
        min_depth: usize,
        findings: &mut Vec<Finding>,
        unchecked: &mut Vec<String>,
    ) -> Result<(), (String, io::Error)> {
        let root = &self.root;
        // A subtree's start is an entry of the tree like any other: a link is not followed.
        let walk = walkdir::WalkDir::new(start)
            .follow_links(false)
            .follow_root_links(min_depth > 0)
            .min_depth(min_depth)
            .sort_by_file_name()
            .into_iter()
            .filter_entry(|e| e.file_name() != ".no_exist");
        for entry in walk {
            let entry = match entry {
                Ok(entry) => entry,
                Err(e) => {
                    let path = e.path().map(Path::to_path_buf).unwrap_or_default();
                    let err = io::Error::from(e);
                    if err.kind() == io::ErrorKind::InvalidFilename {
                        unchecked.push(relative_name(root, &path));
                        continue;
                    }
                    return Err((relative_name(root, &path), with_path(&path, err)));
                }
            };
            if entry.file_type().is_dir() {
                continue;
            }
            let rel = relative_name(root, entry.path());
            match self.check_walked(&rel, &entry) {
                Ok(found) => findings.extend(found),
                Err(e) if e.kind() == io::ErrorKind::InvalidFilename => unchecked.push(rel),
                Err(e) => return Err((rel, e)),
            }
        }
        Ok(())
    }

    fn check(&self, rel: &str) -> io::Result<Vec<Finding>> {
        if !is_plain_relative(rel) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{rel}: not a relative path inside the checked tree"),
            ));
        }
        match self.resolve(rel)? {
            Resolved::File { target, len } => self.check_content(rel, &target, len),
            Resolved::NotAFile => Ok(Vec::new()),
            Resolved::Missing => Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{}: no such file", self.root.join(rel).display()),
            )),
            Resolved::Dangling { link, error } => Ok(vec![Finding::error(
                codes::DANGLING_SYMLINK,
                rel,
                format!(
                    "is a symlink to `{}`, which does not resolve ({error})",
                    link.display()
                ),
                "fetch the file the link points at (in a Hugging Face cache: download the \
                 blob again with huggingface_hub), or remove the link, then pack again",
            )]),
            Resolved::Escapes { target } => Ok(vec![Finding::error(
                codes::SYMLINK_ESCAPES_TREE,
                rel,
                format!(
                    "resolves to `{}`, outside the checked tree, so it would not travel with \
                     the model",
                    target.display()
                ),
                "replace the link with the file itself, or check the directory that contains \
                 the link's target",
            )]),
        }
    }

    fn check_content(&self, rel: &str, target: &Path, len: u64) -> io::Result<Vec<Finding>> {
        if let Some(found) = by_name(rel, len) {
            return Ok(found);
        }
        let (file, _) = crate::fsio::open_regular(target, crate::fsio::Follow::Never)
            .map_err(|e| with_path(target, e.into()))?;
        Ok(check_opened(Some(self), rel, target, &file, len, None)?
            .expect("with the tree at hand every check runs"))
    }
}

/// What the checks decide from a file's name and size alone (an interrupted download, an
/// empty file), before opening it; `None` when its content decides.
fn by_name(rel: &str, len: u64) -> Option<Vec<Finding>> {
    let name = rel.rsplit('/').next().unwrap_or(rel);
    let lower = name.to_ascii_lowercase();
    let ext = lower.rsplit_once('.').map_or("", |(_, e)| e);
    if lower.ends_with(".incomplete") {
        return Some(vec![Finding::error(
            codes::INCOMPLETE_DOWNLOAD,
            rel,
            format!(
                "is an interrupted download ({} so far)",
                read::human_size(len)
            ),
            "finish the download (run the same huggingface_hub download again; it resumes), \
             then pack again",
        )]);
    }
    if len == 0 {
        if WEIGHT_EXTENSIONS.contains(&ext) {
            return Some(vec![Finding::error(
                codes::EMPTY_WEIGHT_FILE,
                rel,
                format!("is a .{ext} weight file with zero bytes"),
                "download or copy the file again; an empty weight file never loads",
            )]);
        }
        return Some(Vec::new());
    }
    None
}

/// The checks of the non-empty file `rel` open as `file` (`len` bytes; `target` names it in
/// errors): a Git LFS pointer by its content, then the format [`format::identify`] gives. `None` when the check needs other files of the
/// tree (a shard index, a config naming code files) and `tree` is not given.
fn check_opened(
    tree: Option<&Tree>,
    rel: &str,
    target: &Path,
    file: &File,
    len: u64,
    head: Option<&[u8]>,
) -> io::Result<Option<Vec<Finding>>> {
    let name = rel.rsplit('/').next().unwrap_or(rel);
    let lower = name.to_ascii_lowercase();
    let ext = lower.rsplit_once('.').map_or("", |(_, e)| e);
    let prefix =
        read::read_prefix_given(file, len, 1024, head).map_err(|e| with_path(target, e))?;
    if len < lfs::MAX_POINTER_SIZE
        && let Some(pointer) = lfs::parse(&prefix)
    {
        return Ok(Some(vec![lfs::finding(rel, &pointer)]));
    }

    let result = match format::identify(rel, &prefix, len) {
        Some(Format::ShardIndex) => {
            let Some(tree) = tree else { return Ok(None) };
            shards::check_index(tree, rel, file, len)
        }
        Some(Format::Safetensors) => safetensors::check(rel, file, len),
        Some(Format::Gguf) => gguf::check(rel, file, len, &prefix),
        Some(Format::Torch) => torch_zip::check(rel, ext, file, len, &prefix),
        Some(Format::Config) => {
            let Some(tree) = tree else { return Ok(None) };
            config::check(tree, rel, file, len)
        }
        None => Ok(Vec::new()),
    };
    result.map(Some).map_err(|e| with_path(target, e))
}

/// `rel` names something inside the tree: relative, no `..`, no root or prefix.
pub(crate) fn is_plain_relative(rel: &str) -> bool {
    !rel.is_empty()
        && Path::new(rel)
            .components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
}

pub(crate) fn relative_name(root: &Path, path: &Path) -> String {
    let rel = path.strip_prefix(root).unwrap_or(path);
    let parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    parts.join("/")
}

/// Adds the path to an I/O error's message, keeping its kind.
pub(crate) fn with_path(path: &Path, err: io::Error) -> io::Error {
    io::Error::new(err.kind(), format!("{}: {err}", path.display()))
}

#[cfg(test)]
pub(crate) mod testutil {
    //! Helpers shared by the unit tests of the format modules.

    use super::*;
    use std::io::Write;

    /// The checked-in fixtures, made by `scripts/make-fixtures.py`.
    pub(crate) fn fixtures() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/fixtures")
    }

    /// A temporary tree with the given files.
    pub(crate) fn tree(files: &[(&str, &[u8])]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (rel, bytes) in files {
            let path = dir.path().join(rel);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::File::create(&path).unwrap().write_all(bytes).unwrap();
        }
        dir
    }

    /// Checks one in-memory file stored under `name`.
    pub(crate) fn check_bytes(name: &str, bytes: &[u8]) -> Vec<Finding> {
        let dir = tree(&[(name, bytes)]);
        check_file(dir.path(), name).unwrap()
    }

    /// The codes of the findings, in order.
    pub(crate) fn codes_of(findings: &[Finding]) -> Vec<&'static str> {
        findings.iter().map(|f| f.code).collect()
    }

    /// Asserts exactly one finding, with this code and path, and returns it.
    #[track_caller]
    pub(crate) fn only<'a>(findings: &'a [Finding], code: &str, path: &str) -> &'a Finding {
        assert_eq!(findings.len(), 1, "expected one finding, got {findings:#?}");
        let f = &findings[0];
        assert_eq!(f.code, code, "{f:#?}");
        assert_eq!(f.path, path, "{f:#?}");
        f
    }
}

#[cfg(test)]
mod tests {
    use super::testutil::*;
    use super::*;

    const POINTER: &[u8] = b"version https://git-lfs.github.com/spec/v1\n\
        oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\n\
        size 4943852032\n";

    #[test]
    fn an_lfs_pointer_is_found_whatever_its_name() {
        for name in [
            "model.safetensors",
            "pytorch_model.bin",
            "tokenizer.json",
            "blob",
        ] {
            let findings = check_bytes(name, POINTER);
            let f = only(&findings, codes::LFS_POINTER, name);
            assert_eq!(f.severity, Severity::Error);
            assert!(f.problem.contains("4.9 GB"), "{}", f.problem);
            assert!(f.problem.contains("sha256:4d7a2146"), "{}", f.problem);
            assert!(f.fix.contains("git lfs pull"), "{}", f.fix);
        }
    }

    /// One dispatch for the checks and the value scan (issue 36 item 6): a safetensors or GGUF
    /// file is checked as such by its first bytes whatever its name (llama.cpp and Ollama load
    /// a GGUF by its magic; a safetensors file named `model.bin` used to get the PyTorch
    /// check, which says nothing of a `.bin` it does not recognise).
    #[test]
    fn a_safetensors_or_gguf_file_is_checked_as_such_whatever_its_name() {
        let corrupt = |name: &str| fs::read(fixtures().join("corrupt").join(name)).unwrap();
        for name in ["model.bin", "weights", "consolidated.pt"] {
            let findings = check_bytes(name, &corrupt("invalid-offset.safetensors"));
            only(&findings, codes::SAFETENSORS_INVALID_OFFSET, name);
            let findings = check_bytes(name, &corrupt("truncated-in-data.gguf"));
            only(&findings, codes::GGUF_TENSOR_OUT_OF_BOUNDS, name);
        }
        let valid = fixtures().join("valid");
        for (fixture, name) in [
            ("small.safetensors", "model.bin"),
            ("model.gguf", "weights"),
        ] {
            let findings = check_bytes(name, &fs::read(valid.join(fixture)).unwrap());
            assert!(findings.is_empty(), "{fixture} as {name}: {findings:#?}");
        }
        // A name a loader goes by keeps its check: a GGUF named `.safetensors` is refused.
        let gguf = fs::read(valid.join("model.gguf")).unwrap();
        let findings = check_bytes("model.safetensors", &gguf);
        assert!(has_errors(&findings), "{findings:#?}");
    }

    #[test]
    fn empty_weight_files_are_errors_and_other_empty_files_are_not() {
        for ext in WEIGHT_EXTENSIONS {
            let name = format!("weights.{ext}");
            let findings = check_bytes(&name, b"");
            only(&findings, codes::EMPTY_WEIGHT_FILE, &name);
        }
        assert!(check_bytes("README.md", b"").is_empty());
        assert!(check_bytes("added_tokens.json", b"").is_empty());
    }

    #[test]
    fn incomplete_downloads_are_errors() {
        let name =
            "blobs/4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393.incomplete";
        let findings = check_bytes(name, &[1; 100]);
        let f = only(&findings, codes::INCOMPLETE_DOWNLOAD, name);
        assert!(f.problem.contains("100 bytes"), "{}", f.problem);
    }

    #[cfg(unix)]
    #[test]
    fn symlinks_dangling_escaping_and_in_tree() {
        use std::os::unix::fs::symlink;
        let outside = tree(&[("secret.bin", b"\x80\x02}q\x00.")]);
        let dir = tree(&[("blobs/abc", POINTER)]);
        let root = dir.path();
        fs::create_dir_all(root.join("snapshots/c1")).unwrap();
        symlink(
            "../../blobs/abc",
            root.join("snapshots/c1/model.safetensors"),
        )
        .unwrap();
        symlink(
            "../../blobs/missing",
            root.join("snapshots/c1/dangling.safetensors"),
        )
        .unwrap();
        symlink(
            outside.path().join("secret.bin"),
            root.join("snapshots/c1/out.bin"),
        )
        .unwrap();
        symlink("self-loop", root.join("snapshots/c1/self-loop")).unwrap();
        symlink("../../blobs", root.join("snapshots/c1/blobdir")).unwrap();

        let findings = check_tree(root).unwrap();
        let got: Vec<(&str, &str)> = findings.iter().map(|f| (f.path.as_str(), f.code)).collect();
        assert_eq!(
            got,
            vec![
                ("blobs/abc", codes::LFS_POINTER),
                ("snapshots/c1/dangling.safetensors", codes::DANGLING_SYMLINK),
                ("snapshots/c1/model.safetensors", codes::LFS_POINTER),
                ("snapshots/c1/out.bin", codes::SYMLINK_ESCAPES_TREE),
                ("snapshots/c1/self-loop", codes::DANGLING_SYMLINK),
            ]
        );
        assert!(findings[1].problem.contains("../../blobs/missing"));
    }

    #[test]
    fn no_exist_markers_are_skipped() {
        let dir = tree(&[
            (".no_exist/0123/model.safetensors", b""),
            ("snapshots/0123/config.json", b"{}"),
        ]);
        assert!(check_tree(dir.path()).unwrap().is_empty());
    }

    #[test]
    fn check_file_refuses_paths_outside_the_tree() {
        let dir = tree(&[("a.json", b"{}")]);
        for rel in ["../a.json", "/etc/passwd", ""] {
            let err = check_file(dir.path(), rel).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{rel}");
        }
        let err = check_file(dir.path(), "nope.json").unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        assert!(err.to_string().contains("nope.json"));
    }

    /// Errors other than "not found" while looking a path up are errors, not a missing file.
    #[test]
    fn a_path_through_a_file_is_an_error_not_a_missing_file() {
        let dir = tree(&[("a.json", b"{}")]);
        let err = check_file(dir.path(), "a.json/x").unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotADirectory, "{err}");
    }

    /// A file that exists but whose full path cannot be resolved (here: longer than PATH_MAX,
    /// reached through short symlinks) is an error, not a missing file nor a dangling link.
    #[test]
    fn an_unresolvable_existing_file_is_an_error() {
        let dir = tree(&[]);
        let root = dir.path();
        let comp = "d".repeat(200);
        std::fs::create_dir(root.join(&comp)).unwrap();
        std::os::unix::fs::symlink(&comp, root.join("l0")).unwrap();
        for i in 1..25 {
            std::fs::create_dir(root.join(format!("l{}", i - 1)).join(&comp)).unwrap();
            std::os::unix::fs::symlink(format!("l{}/{comp}", i - 1), root.join(format!("l{i}")))
                .unwrap();
        }
        std::fs::write(root.join("l24/f.json"), b"{}").unwrap();
        let err = check_file(root, "l24/f.json").unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidFilename, "{err}");
    }

    #[test]
    fn has_errors_means_at_least_one_error() {
        let warning = Finding::warning("w", "p", "problem", "fix");
        let error = Finding::error("e", "p", "problem", "fix");
        assert!(!has_errors(&[]));
        assert!(!has_errors(std::slice::from_ref(&warning)));
        assert!(has_errors(&[warning, error]));
    }

    #[test]
    fn findings_are_sorted_by_path_then_code() {
        let dir = tree(&[
            ("b/weights.bin", b""),
            ("a/z.safetensors", POINTER),
            ("a/y.gguf", b""),
        ]);
        let findings = check_tree(dir.path()).unwrap();
        let paths: Vec<&str> = findings.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, ["a/y.gguf", "a/z.safetensors", "b/weights.bin"]);
    }

    #[test]
    fn severity_orders_and_serializes_lowercase() {
        assert!(Severity::Warning < Severity::Error);
        let f = Finding::warning(codes::AUTO_MAP_REMOTE_CODE, "config.json", "p", "f");
        let json = serde_json::to_value(&f).unwrap();
        assert_eq!(json["severity"], "warning");
        assert_eq!(json["code"], "auto-map-remote-code");
        assert!(!has_errors(&[f]));
    }

    #[test]
    fn the_valid_fixtures_and_the_tiny_model_pass_every_check() {
        let valid = fixtures().join("valid");
        let findings = check_tree(&valid).unwrap();
        let errors: Vec<&Finding> = findings
            .iter()
            .filter(|f| f.severity == Severity::Error)
            .collect();
        assert!(errors.is_empty(), "{errors:#?}");
        // The one warning is the deliberately big-endian GGUF.
        assert_eq!(codes_of(&findings), vec![codes::GGUF_BIG_ENDIAN]);

        let tiny = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/tiny-model");
        let findings = check_tree(&tiny).unwrap();
        assert!(findings.is_empty(), "{findings:#?}");
        assert!(tiny.join("tokenizer/special_tokens_map.json").is_file());
    }
}
