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

/// Checks a repository id the way huggingface_hub's `validate_repo_id` does: `name` or
/// `namespace/name`, each 1 to 96 ASCII letters, digits, `-`, `_` or `.`, starting and ending
/// with a letter, digit or `_`; no `--` or `..`; not ending in `.git`.
pub fn validate_repo_id(id: &str) -> std::result::Result<(), String> {
    let bad = |why: &str| Err(format!("{id:?} is not a Hugging Face repository id: {why}"));
    let parts: Vec<&str> = id.split('/').collect();
    if parts.len() > 2 {
        return bad("use ORG/NAME or NAME");
    }
    for part in &parts {
        let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
        let ok = (1..=96).contains(&part.len())
            && part.bytes().all(|b| word(b) || b == b'-' || b == b'.')
            && word(part.as_bytes()[0])
            && word(part.as_bytes()[part.len() - 1]);
        if !ok {
            return bad(
                "each part is 1 to 96 letters, digits, '-', '_' or '.', and cannot start or end with '-' or '.'",
            );
        }
    }
    if id.contains("--") || id.contains("..") {
        return bad("it cannot contain '--' or '..'");
    }
    if id.ends_with(".git") {
        return bad("it cannot end in '.git'");
    }
    Ok(())
}

/// Checks a repository type: one of [`REPO_TYPES`].
pub fn validate_repo_type(repo_type: &str) -> std::result::Result<(), String> {
    if REPO_TYPES.contains(&repo_type) {
        Ok(())
    } else {
        Err(format!(
            "{repo_type:?} is not a Hugging Face repository type (one of {})",
            REPO_TYPES.join(", ")
        ))
    }
}

/// Checks a revision name, which becomes a path under `refs/`: a safe relative path
/// (`refs/pr/1` is fine, `../x` is not).
pub fn validate_revision(revision: &str) -> std::result::Result<(), String> {
    paths::check_relative(revision)
        .map_err(|why| format!("the revision {revision:?} cannot name a ref file: it {why}"))
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
            validate_repo_id(ok).unwrap();
        }
        for bad in [
            "", "a/b/c", "-a", "a-", "a/.b", "a--b", "a..b", "x.git", "café", "a b", "/a", "a/",
        ] {
            assert!(validate_repo_id(bad).is_err(), "{bad}");
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
        assert!(validate_revision("refs/pr/1").is_ok());
        assert!(validate_revision("../main").is_err());
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
}
