//! The cache's naming rules, and nothing else: repository ids and types, revisions and
//! commits, etags, and the folder name a repository gets. Pure functions over strings, the
//! ground floor of the cache code: the manifest validates its `source` with them and may import
//! nothing else from `hfcache`.

use crate::paths;

/// The repository types huggingface_hub accepts (`constants.REPO_TYPES_WITH_KERNEL`).
pub const REPO_TYPES: &[&str] = &["model", "dataset", "space", "kernel"];

/// The revision used when none is given (`constants.DEFAULT_REVISION`).
pub const DEFAULT_REVISION: &str = "main";

/// Files from this size up get a SHA-256 etag when airlock has to name a blob itself, smaller
/// ones a git blob id: the hub refuses files over 10 MiB that are not stored in LFS, and an LFS
/// file's etag is its SHA-256. See [`EtagKind::for_size`].
pub const LFS_THRESHOLD: u64 = 10 * 1024 * 1024;

/// Names in the cache directory that are not repositories (`scan_cache_dir` skips them).
pub(crate) const NOT_REPOSITORIES: &[&str] = &[
    ".locks",
    "CACHEDIR.TAG",
    "blobs",
    ".DS_Store",
    "Thumbs.db",
    "desktop.ini",
];

/// Whether `s` is `len` lowercase hex digits (the one rule, [`crate::hexdigest`]).
use crate::hexdigest::is_lower_hex as is_hex;

/// Whether `s` is a full commit id (40 lowercase hex), as `REGEX_COMMIT_HASH` matches it.
pub fn is_commit(s: &str) -> bool {
    is_hex(s, 40)
}

/// Why a name is not one the Hugging Face cache can hold ([`check_repo_id`],
/// [`check_repo_type`], [`check_revision`]); its `Display` quotes the name.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CacheNameError {
    /// `id` is not a repository id, for the reason `rule`.
    #[error("{id:?} is not a Hugging Face repository id: {rule}")]
    RepoId {
        /// The id, as given.
        id: String,
        /// The rule it breaks.
        rule: RepoIdRule,
    },
    /// Not one of [`REPO_TYPES`].
    #[error("{0:?} is not a Hugging Face repository type (one of {types})", types = REPO_TYPES.join(", "))]
    RepoType(String),
    /// The revision is not a safe relative path, so it cannot name a file under `refs/`.
    #[error("the revision {revision:?} cannot name a ref file: it {why}")]
    Revision {
        /// The revision, as given.
        revision: String,
        /// Why it is not a safe path.
        why: paths::PathError,
    },
}

/// The rule of huggingface_hub's `validate_repo_id` a repository id breaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RepoIdRule {
    /// More than two `/`-separated parts.
    #[error("use ORG/NAME or NAME")]
    Parts,
    /// A part of the wrong length or characters.
    #[error(
        "each part is 1 to 96 letters, digits, '-', '_' or '.', and cannot start or end with '-' or '.'"
    )]
    Part,
    /// `--` or `..` inside.
    #[error("it cannot contain '--' or '..'")]
    DoubleDashOrDots,
    /// Ends in `.git`.
    #[error("it cannot end in '.git'")]
    DotGit,
}

/// Checks a repository id the way huggingface_hub's `validate_repo_id` does: `name` or
/// `namespace/name`, each 1 to 96 ASCII letters, digits, `-`, `_` or `.`, starting and ending
/// with a letter, digit or `_`; no `--` or `..`; not ending in `.git`.
pub fn check_repo_id(id: &str) -> Result<(), CacheNameError> {
    let bad = |rule| {
        Err(CacheNameError::RepoId {
            id: id.to_string(),
            rule,
        })
    };
    let parts: Vec<&str> = id.split('/').collect();
    if parts.len() > 2 {
        return bad(RepoIdRule::Parts);
    }
    for part in &parts {
        let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
        let ok = (1..=96).contains(&part.len())
            && part.bytes().all(|b| word(b) || b == b'-' || b == b'.')
            && word(part.as_bytes()[0])
            && word(part.as_bytes()[part.len() - 1]);
        if !ok {
            return bad(RepoIdRule::Part);
        }
    }
    if id.contains("--") || id.contains("..") {
        return bad(RepoIdRule::DoubleDashOrDots);
    }
    if id.ends_with(".git") {
        return bad(RepoIdRule::DotGit);
    }
    Ok(())
}

/// Checks a repository type: one of [`REPO_TYPES`].
pub fn check_repo_type(repo_type: &str) -> Result<(), CacheNameError> {
    if REPO_TYPES.contains(&repo_type) {
        Ok(())
    } else {
        Err(CacheNameError::RepoType(repo_type.to_string()))
    }
}

/// Checks a revision name, which becomes a path under `refs/`: a safe relative path
/// (`refs/pr/1` is fine, `../x` is not).
pub fn check_revision(revision: &str) -> Result<(), CacheNameError> {
    paths::check_relative(revision).map_err(|why| CacheNameError::Revision {
        revision: revision.to_string(),
        why,
    })
}

/// The repository's folder name in the cache (`repo_folder_name`): `models--org--name`,
/// `datasets--org--name`, `spaces--...`, `kernels--...`.
pub fn repo_folder_name(repo_type: &str, repo_id: &str) -> String {
    let mut parts = vec![format!("{repo_type}s")];
    parts.extend(repo_id.split('/').map(str::to_string));
    parts.join("--")
}

/// Splits a folder name back into `(repo_type, repo_id)` as `scan_cache_dir` does; `None` if
/// it is not a repository folder.
pub fn parse_repo_folder(name: &str) -> Option<(String, String)> {
    let (prefix, rest) = name.split_once("--")?;
    let repo_type = prefix.strip_suffix('s')?;
    if !REPO_TYPES.contains(&repo_type) {
        return None;
    }
    Some((repo_type.to_string(), rest.replace("--", "/")))
}

/// Which hash names a blob.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EtagKind {
    /// 40 hex: the git blob id, `sha1("blob <len>\0" + content)` (files stored in git).
    GitSha1,
    /// 64 hex: the SHA-256 of the content (Git LFS files).
    Sha256,
}

impl EtagKind {
    /// The kind of a well-formed etag; `None` for anything else (which is not a blob name).
    pub fn of(etag: &str) -> Option<EtagKind> {
        if is_hex(etag, 40) {
            Some(EtagKind::GitSha1)
        } else if is_hex(etag, 64) {
            Some(EtagKind::Sha256)
        } else {
            None
        }
    }

    /// The kind airlock gives a file whose etag it has to choose: SHA-256 from
    /// [`LFS_THRESHOLD`] up, the git blob id below. huggingface_hub never re-checks a blob
    /// name offline, so either is accepted; this rule matches the hub for every file it forces
    /// into LFS and for small files in git.
    pub fn for_size(size: u64) -> EtagKind {
        if size >= LFS_THRESHOLD {
            EtagKind::Sha256
        } else {
            EtagKind::GitSha1
        }
    }

    /// `git-sha1` or `sha256`, for messages and JSON.
    pub fn name(self) -> &'static str {
        match self {
            EtagKind::GitSha1 => "git-sha1",
            EtagKind::Sha256 => "sha256",
        }
    }
}

/// The folder `hf download --local-dir` keeps its bookkeeping in (`_local_folder.py`:
/// per-file `.metadata` with the etag, commit and timestamp of this host's download, lock
/// files, a `.gitignore` of `*`). It describes a download, not the model.
pub const LOCAL_DIR_METADATA: &str = ".cache/huggingface";

/// Whether the bundle path `path` is [`LOCAL_DIR_METADATA`] or inside it.
pub fn is_local_dir_metadata(path: &str) -> bool {
    path.strip_prefix(LOCAL_DIR_METADATA)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repo_ids_and_folders() {
        for ok in ["gpt2", "org/name", "Org-1/na_me.v2", "a/b"] {
            check_repo_id(ok).unwrap();
        }
        for bad in [
            "", "a/b/c", "-a", "a-", "a/.b", "a--b", "a..b", "x.git", "café", "a b", "/a", "a/",
        ] {
            assert!(check_repo_id(bad).is_err(), "{bad}");
        }
        assert_eq!(
            repo_folder_name("model", "julien-c/EsperBERTo-small"),
            "models--julien-c--EsperBERTo-small"
        );
        assert_eq!(repo_folder_name("dataset", "gpt2"), "datasets--gpt2");
        assert_eq!(
            parse_repo_folder("spaces--a--b"),
            Some(("space".into(), "a/b".into()))
        );
        assert_eq!(parse_repo_folder("other--a"), None);
        assert!(check_revision("refs/pr/1").is_ok());
        assert!(check_revision("../main").is_err());
        assert!(is_local_dir_metadata(".cache/huggingface"));
        assert!(is_local_dir_metadata(
            ".cache/huggingface/download/a.metadata"
        ));
        assert!(!is_local_dir_metadata(".cache/huggingface2"));
        assert!(!is_local_dir_metadata(".cache"));
    }

    #[test]
    fn etag_kinds() {
        assert_eq!(EtagKind::of(&"a".repeat(40)), Some(EtagKind::GitSha1));
        assert_eq!(EtagKind::of(&"a".repeat(64)), Some(EtagKind::Sha256));
        assert_eq!(EtagKind::of(&"A".repeat(40)), None);
        assert_eq!(EtagKind::of("../x"), None);
        assert_eq!(EtagKind::for_size(LFS_THRESHOLD - 1), EtagKind::GitSha1);
        assert_eq!(EtagKind::for_size(LFS_THRESHOLD), EtagKind::Sha256);
    }

    /// Each refusal is a variant a caller can match, and its text is the one the user sees.
    #[test]
    fn refusals_are_typed() {
        let rule = |id: &str| match check_repo_id(id) {
            Err(CacheNameError::RepoId { rule, .. }) => Some(rule),
            _ => None,
        };
        assert_eq!(rule("a/b/c"), Some(RepoIdRule::Parts));
        assert_eq!(rule("-a"), Some(RepoIdRule::Part));
        assert_eq!(rule("a--b"), Some(RepoIdRule::DoubleDashOrDots));
        assert_eq!(rule("x.git"), Some(RepoIdRule::DotGit));
        assert_eq!(
            check_repo_id("x.git").unwrap_err().to_string(),
            "\"x.git\" is not a Hugging Face repository id: it cannot end in '.git'"
        );
        assert_eq!(
            check_repo_type("modle").unwrap_err().to_string(),
            "\"modle\" is not a Hugging Face repository type (one of model, dataset, space, kernel)"
        );
        assert_eq!(
            check_revision("../main"),
            Err(CacheNameError::Revision {
                revision: "../main".into(),
                why: paths::PathError::DotDot
            })
        );
        assert_eq!(
            check_revision("../main").unwrap_err().to_string(),
            "the revision \"../main\" cannot name a ref file: it has a '..' component"
        );
    }
}
