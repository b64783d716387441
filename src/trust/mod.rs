//! The trust set: which public keys may sign bundles (and receipts), and where it comes from.
//!
//! One rule for every command, decided here rather than in each command: the `--trust` flags
//! when any are given, otherwise the `AIRLOCK_TRUST` environment variable, otherwise no trust
//! set. A set variable that is empty is an error, not "no trust set" (a scheduled `check` whose
//! unit lost its value must not quietly downgrade to a lint). Errors caused by the variable
//! name it, so an operator looks in the unit file rather than at the command line.
//!
//! A trust path is a `.pub` file or a directory whose `*.pub` files (not recursive, in name
//! order) are all trusted. Two different keys claiming one key id are refused whichever order
//! they come in; the same key twice is kept once. Key files are read bounded: opened with
//! `O_NONBLOCK`, checked to be regular files on the open handle, and read to at most
//! [`MAX_PUBLIC_KEY_BYTES`] + 1 bytes, so a FIFO, `/dev/zero` or a 3 GB file in a trust
//! directory is an error naming it, never a hang or an allocation.
//!
//! A trust path may also be a TUF root (`root.json`, any file whose name ends in `.json`):
//! then it must be the only trust path, and the [`Policy`] it gives is its `targets` role's
//! keys and threshold ([`root`], [`policy`]), with its expiry, and the verified chain of the
//! earlier versions kept beside it (`NAME.history/N.root.json`, [`update`]).

pub mod json;
pub mod policy;
pub mod root;
pub mod time;
pub mod update;

pub use policy::{Policy, TrustRoot};
pub use time::Clock;

use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::fsio;
use crate::keys::{KeyError, PublicKey};

/// The environment variable that names a trust path when no `--trust` is given.
pub const TRUST_ENV: &str = "AIRLOCK_TRUST";
/// Largest public key file read (a minisign `.pub` is two lines, well under 1.2 KiB).
pub(crate) const MAX_PUBLIC_KEY_BYTES: u64 = 4096;

/// Where the trust set comes from, resolved once from the flags and the environment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TrustSource {
    /// No `--trust` and no `AIRLOCK_TRUST`.
    None,
    /// The `--trust` paths.
    Flags(Vec<PathBuf>),
    /// The path in `AIRLOCK_TRUST`.
    Env(PathBuf),
}

impl TrustSource {
    /// Applies the one rule: flags first, then the variable's value (`env`, as read from
    /// [`TRUST_ENV`]).
    pub fn resolve(flags: &[PathBuf], env: Option<OsString>) -> Result<TrustSource> {
        if !flags.is_empty() {
            return Ok(TrustSource::Flags(flags.to_vec()));
        }
        match env {
            None => Ok(TrustSource::None),
            Some(v) if v.is_empty() => Err(Error::TrustEnv {
                source: Box::new(Error::Usage(
                    "the variable is set but empty: set it to a .pub file or a trust directory, or unset it".into(),
                )),
            }),
            Some(v) => Ok(TrustSource::Env(PathBuf::from(v))),
        }
    }

    /// Loads the trust policy; `None` when there is no source. Root expiry is checked later,
    /// against `clock`, by whatever verifies with the policy (a bundle may carry the newer
    /// root that replaces an expired one).
    pub fn load_at(&self, clock: Clock) -> Result<Option<Policy>> {
        match self {
            TrustSource::None => Ok(None),
            TrustSource::Flags(paths) => load_policy(paths, clock).map(Some),
            TrustSource::Env(path) => load_policy(std::slice::from_ref(path), clock)
                .map(Some)
                .map_err(|e| Error::TrustEnv {
                    source: Box::new(e),
                }),
        }
    }

    /// [`TrustSource::load_at`] with this machine's clock.
    pub fn load(&self) -> Result<Option<Policy>> {
        self.load_at(Clock::system())
    }

    /// Loads the trust policy, which this command cannot do without.
    pub fn require_at(&self, clock: Clock) -> Result<Policy> {
        self.load_at(clock)?.ok_or_else(|| {
            Error::Usage(format!(
                "no trusted keys: pass --trust KEY.pub (or a directory of .pub files, or a TUF root.json), or set {TRUST_ENV}"
            ))
        })
    }

    /// [`TrustSource::require_at`] with this machine's clock.
    pub fn require(&self) -> Result<Policy> {
        self.require_at(Clock::system())
    }
}

/// Whether a trust path names a TUF root: a file (not a directory) whose name ends in `.json`.
pub(crate) fn is_root_path(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "json") && !path.is_dir()
}

/// Loads the policy of the trust paths: one TUF root, or any number of keys and directories.
pub(crate) fn load_policy(paths: &[PathBuf], clock: Clock) -> Result<Policy> {
    match paths.iter().find(|p| is_root_path(p)) {
        None => Ok(Policy::any_of(&load_paths(paths)?)),
        Some(root) if paths.len() == 1 => Ok(Policy::from_root(update::load_root(root)?, clock)),
        Some(root) => Err(Error::Usage(format!(
            "{} is a TUF root: a root is the whole trust policy, give it as the only --trust",
            root.display()
        ))),
    }
}

/// Loads and merges the keys of several trust paths, refusing two different keys with one id.
pub fn load_paths(paths: &[PathBuf]) -> Result<Vec<PublicKey>> {
    Ok(load_paths_named(paths)?
        .into_iter()
        .map(|(k, _)| k)
        .collect())
}

/// [`load_paths`], each key with the `.pub` file it was read from (so messages can name it as
/// the operator does: `alice.pub` rather than its key id alone).
pub fn load_paths_named(paths: &[PathBuf]) -> Result<Vec<(PublicKey, PathBuf)>> {
    // Each key with its file and the trust path that named it.
    let mut out: Vec<(PublicKey, PathBuf, PathBuf)> = Vec::new();
    for p in paths {
        let keys = load_path_named(p).map_err(|e| Error::Key {
            path: p.clone(),
            source: e,
        })?;
        for (k, file) in keys {
            match out.iter().find(|(o, _, _)| o.key_id == k.key_id) {
                None => out.push((k, file, p.clone())),
                Some((o, _, _)) if o.key == k.key => {}
                Some((_, _, first)) => {
                    return Err(Error::Key {
                        path: p.clone(),
                        source: KeyError::ConflictingKeyId {
                            key_id: k.key_id_hex(),
                            first: first.clone(),
                            second: p.clone(),
                        },
                    });
                }
            }
        }
    }
    Ok(out.into_iter().map(|(k, file, _)| (k, file)).collect())
}

/// Loads trusted public keys from a `.pub` file, or from a directory: every `*.pub` file
/// directly in it, in file name order (subdirectories, even named `*.pub`, are skipped). A
/// directory without any is an error naming it, as are two different keys sharing a key id;
/// the same key in two files is kept once.
pub fn load_path(path: &Path) -> std::result::Result<Vec<PublicKey>, KeyError> {
    Ok(load_path_named(path)?.into_iter().map(|(k, _)| k).collect())
}

/// [`load_path`], each key with its file.
fn load_path_named(path: &Path) -> std::result::Result<Vec<(PublicKey, PathBuf)>, KeyError> {
    let meta = fs::metadata(path).map_err(|e| io_err(path, e))?;
    if !meta.is_dir() {
        return Ok(vec![(read_public_key(path)?, path.to_path_buf())]);
    }
    let mut files = Vec::new();
    for (name, _) in crate::fsio::list_dir(path, crate::fsio::Follow::Final)
        .map_err(|e| io_err(path, e.into()))?
    {
        let p = path.join(name);
        if p.extension().is_some_and(|ext| ext == "pub") {
            let is_dir = fs::metadata(&p).map_err(|e| io_err(&p, e))?.is_dir();
            if !is_dir {
                files.push(p);
            }
        }
    }
    files.sort();
    if files.is_empty() {
        return Err(KeyError::NoPublicKeys {
            dir: path.to_path_buf(),
        });
    }
    let mut keys: Vec<(PublicKey, PathBuf)> = Vec::with_capacity(files.len());
    for file in files {
        let pk = read_public_key(&file)?;
        if let Some((seen, first)) = keys.iter().find(|(k, _)| k.key_id == pk.key_id) {
            if seen.key != pk.key {
                return Err(KeyError::ConflictingKeyId {
                    key_id: pk.key_id_hex(),
                    first: first.clone(),
                    second: file,
                });
            }
            continue;
        }
        keys.push((pk, file));
    }
    Ok(keys)
}

/// Reads one public key file, bounded.
fn read_public_key(path: &Path) -> std::result::Result<PublicKey, KeyError> {
    let bytes =
        fsio::read_regular_capped(path, MAX_PUBLIC_KEY_BYTES, true).map_err(|e| io_err(path, e))?;
    let text = String::from_utf8(bytes).map_err(|e| {
        let line = e.as_bytes()[..e.utf8_error().valid_up_to()]
            .iter()
            .filter(|&&b| b == b'\n')
            .count()
            + 1;
        KeyError::Malformed {
            what: "public key",
            line,
            reason: "not valid UTF-8".into(),
        }
        .in_file(path)
    })?;
    PublicKey::parse(&text).map_err(|e| e.in_file(path))
}

fn io_err(path: &Path, source: std::io::Error) -> KeyError {
    KeyError::Io {
        path: path.to_path_buf(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_win_over_the_variable_and_an_empty_variable_is_an_error() {
        let flags = vec![PathBuf::from("a.pub")];
        assert_eq!(
            TrustSource::resolve(&flags, Some("b.pub".into())).unwrap(),
            TrustSource::Flags(flags.clone())
        );
        assert_eq!(
            TrustSource::resolve(&[], Some("b.pub".into())).unwrap(),
            TrustSource::Env(PathBuf::from("b.pub"))
        );
        assert_eq!(TrustSource::resolve(&[], None).unwrap(), TrustSource::None);
        let e = TrustSource::resolve(&[], Some("".into())).unwrap_err();
        assert!(e.to_string().contains(TRUST_ENV), "{e}");
    }

    #[test]
    fn errors_from_the_variable_name_it() {
        let t = tempfile::tempdir().unwrap();
        let missing = t.path().join("missing.pub");
        let e = TrustSource::Env(missing.clone()).load().unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains(TRUST_ENV) && text.contains("missing.pub"),
            "{text}"
        );
        let e = TrustSource::Flags(vec![missing]).load().unwrap_err();
        assert!(!e.to_string().contains(TRUST_ENV), "{e}");
    }

    #[test]
    fn trust_directory_reads_are_bounded() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path();
        // A huge sparse file: refused from its size, nothing read.
        let big = fs::File::create(d.join("big.pub")).unwrap();
        big.set_len(3 << 30).unwrap();
        let e = load_path(d).unwrap_err();
        assert!(e.to_string().contains("big.pub"), "{e}");
        assert!(e.to_string().contains("limit"), "{e}");
        fs::remove_file(d.join("big.pub")).unwrap();
        // A FIFO: refused without blocking.
        rustix::fs::mknodat(
            rustix::fs::CWD,
            d.join("fifo.pub"),
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        let e = load_path(d).unwrap_err();
        assert!(e.to_string().contains("fifo.pub"), "{e}");
        assert!(e.to_string().contains("not a regular file"), "{e}");
        fs::remove_file(d.join("fifo.pub")).unwrap();
        // A link to /dev/zero.
        std::os::unix::fs::symlink("/dev/zero", d.join("zero.pub")).unwrap();
        let e = load_path(d).unwrap_err();
        assert!(e.to_string().contains("zero.pub"), "{e}");
    }
}
