//! The Hugging Face hub cache: finding it, reading one snapshot out of it, and checking every
//! blob in it against its own name.
//!
//! huggingface_hub (`file_download.py`, `_snapshot_download.py`, `utils/_cache_manager.py`)
//! keeps each repository in `CACHE/<type>s--<org>--<name>/`:
//!
//! ```text
//! blobs/<etag>                      file contents, named by the hub's etag
//! snapshots/<commit>/<path>         relative symlinks ../../blobs/<etag> (one more ../ per
//!                                   directory level), or real files where symlinks are off
//! refs/<revision>                   the 40-hex commit, no trailing newline
//! trees/<commit>.json               the hub's listing of every file of the commit (optional)
//! blobs/<etag>[.<8 hex>].incomplete an interrupted download
//! ```
//!
//! The etag of a Git LFS file is the SHA-256 of its content; that of a small file stored in
//! git is its git blob id, `sha1("blob <len>\0" + content)`. So every blob can be checked
//! against its own name, which is exactly the "compare with the hash the hub published" step:
//! a flipped bit, a truncated blob or a file swapped for another all fail it. The packer does
//! that check while it hashes each file anyway (see `bundle::write`), and [`check_cache`] does
//! it for a whole cache at rest.
//!
//! Offline, huggingface_hub trusts the layout completely: `hf_hub_download` reads
//! `refs/<revision>` unstripped and returns `snapshots/<commit>/<path>` if it exists, and
//! `snapshot_download` returns the snapshot folder (checking it against `trees/<commit>.json`
//! when that listing is cached). Nothing re-checks a blob. That is why a damaged cache must be
//! refused here, with the file in the repository named, instead of being carried across.
//!
//! One file per concept, lower floors first:
//!
//! - [`names`]: the naming rules (repository ids and types, revisions, commits, etags, folder
//!   names). Pure; the manifest imports this and nothing else from here.
//! - [`locate`]: where the cache is, from the environment as huggingface_hub decides it.
//! - [`layout`]: the layout on disk read without trusting it: which links are followed (only a
//!   snapshot file's link to `blobs/<etag>` of the same repository, and a blob's link into the
//!   cache's shared store), bounded reads, and airlock's trace of what it installed.
//! - [`etag`]: hashing content the way a blob's name says.
//! - [`snapshot`]: resolving a revision and reading one snapshot for packing.
//! - [`check`]: checking a whole cache at rest.
//! - [`offline`]: offline readiness (`--offline-ready`): what the loaders will look for that is
//!   not there, in a directory or a snapshot, other repositories resolved offline in the cache.
//!
//! Writing into a cache is [`crate::unpack::hf`]'s, which uses these rules.

pub mod check;
pub mod etag;
pub mod layout;
pub mod locate;
pub mod names;
pub mod offline;
pub mod snapshot;

pub use check::{
    CacheProblem, CacheReport, CachedRepo, ScannedBlob, check_cache, check_cache_scanning,
};
pub use etag::{EtagCheck, GitBlobSha1, hash_file};
pub use layout::{
    LOCKS_DIR, RECEIPTS_DIR, RepoDirs, TRACE_DIR, create_locks, leave_receipt, leave_trace,
    open_locks, open_repo_dirs_nofollow, open_snapshot_file, receipts,
};
pub use locate::{cache_dir_from_env, resolve_cache_dir};
pub use names::{
    DEFAULT_REVISION, EtagKind, LFS_THRESHOLD, LOCAL_DIR_METADATA, REPO_TYPES, check_repo_id,
    check_repo_type, check_revision, is_commit, is_local_dir_metadata, parse_repo_folder,
    repo_folder_name,
};
pub use snapshot::{
    ListedFile, RefState, Snapshot, SnapshotPath, list_refs, open_snapshot, read_listing, read_ref,
    resolve_revision, snapshot_from_path,
};
