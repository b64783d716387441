//! Registry credentials and challenges, as `docker login` leaves them and distribution, Harbor
//! and zot ask for them.
//!
//! Credentials come from the docker client's config file: `$DOCKER_CONFIG/config.json`, else
//! `~/.docker/config.json`. As docker reads it: a credential helper named for the registry in
//! `credHelpers`, else the one in `credsStore`, is asked first (`docker-credential-NAME get`,
//! the protocol every helper speaks: the registry on stdin, `{"ServerURL", "Username",
//! "Secret"}` on stdout); otherwise, or when the helper has nothing for the registry, its
//! `auths` entry (keyed `HOST[:PORT]`, with or without `https://` and a `/v1/` or `/v2/`
//! path), holding `auth` (base64 of `USER:PASSWORD`) or `username` and `password`. An empty
//! `auths` entry is what `docker login` leaves when a helper holds the password.
//!
//! A helper is a program from `PATH` named by the operator's own config; it runs with no
//! arguments but `get`, for at most [`HELPER_TIMEOUT`], and at most [`HELPER_OUTPUT_CAP`]
//! bytes of its output are read. It is found on `PATH` once ([`resolve_helper`]), refused when
//! another local user could have put it there or could replace it (the file, or any directory
//! above it, writable by group or others without the sticky bit, or owned by a user who is
//! neither root nor this one; found through a relative `PATH` entry), and exactly that
//! resolved file is run: whoever can change what runs gets the registry password. When it fails, the error names the helper, the config key
//! that chose it and what to try. Its credentials go where the docker config's own go: to the
//! registry and its token service only ([`super::client`]).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;

use crate::error::{Error, Result};
use crate::fsio::{self, Cause, Follow, read_capped};

/// The longest a credential helper may take to answer (one waiting for a passphrase prompt
/// that nobody sees must not hang a push).
pub(crate) const HELPER_TIMEOUT: Duration = Duration::from_secs(30);

/// The most bytes read from a credential helper's stdout (and from its stderr).
pub const HELPER_OUTPUT_CAP: u64 = 64 << 10;

/// What every credential helper prints when it holds nothing for the server (docker's
/// `credentials.errCredentialsNotFoundMessage`).
const HELPER_NOT_FOUND: &str = "credentials not found in native keychain";

/// Largest docker config file read.
const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// A user name and password for Basic auth (or the token endpoint).
#[derive(Clone)]
pub struct Credentials {
    /// User name.
    pub username: String,
    /// Password or token.
    pub password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Credentials({}, <password>)", self.username)
    }
}

impl Credentials {
    /// The `Authorization: Basic` value.
    pub fn basic(&self) -> String {
        let raw = format!("{}:{}", self.username, self.password);
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(raw)
        )
    }
}

/// The docker config file this process would read.
pub(crate) fn config_path() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("DOCKER_CONFIG").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(dir).join("config.json"));
    }
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(|h| PathBuf::from(h).join(".docker").join("config.json"))
}

/// Where credentials for `registry` are read from, for messages: the helper the docker config
/// names for it, or the config's `auths` entry.
pub fn describe_source(registry: &str) -> String {
    let Some(p) = config_path() else {
        return "the docker config (set DOCKER_CONFIG or HOME)".into();
    };
    match helper_for(registry) {
        Some(h) => format!(
            "the credential helper {} (`{}` in {}; DOCKER_CONFIG names its directory)",
            h.program(),
            h.key,
            p.display()
        ),
        None => format!(
            "{} (the `auths` entry for the registry; DOCKER_CONFIG names its directory)",
            p.display()
        ),
    }
}

/// The credential helper the docker config names for `registry`, if any (the config is read
/// again; an unreadable one names none).
pub fn helper_for(registry: &str) -> Option<Helper> {
    let bytes = read_config()?.ok()?.1;
    let doc: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    helper_in(&doc, registry).ok().flatten()
}

/// A credential helper chosen by the docker config.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Helper {
    /// `NAME` of `docker-credential-NAME`.
    pub name: String,
    /// The config key that chose it: `credHelpers` or `credsStore`.
    pub key: &'static str,
}

impl Helper {
    /// The program run: `docker-credential-NAME`.
    pub fn program(&self) -> String {
        format!("docker-credential-{}", self.name)
    }
}

/// The helper `doc` names for `registry`: `credHelpers` (keyed like `auths`), else
/// `credsStore`. A name that is not a plain program-name suffix is refused.
fn helper_in(
    doc: &serde_json::Value,
    registry: &str,
) -> std::result::Result<Option<Helper>, ConfigError> {
    let per_registry = doc
        .get("credHelpers")
        .and_then(|h| h.as_object())
        .and_then(|h| h.iter().find(|(k, _)| normalize(k) == registry))
        .map(|(_, v)| (v, "credHelpers"));
    let store = doc.get("credsStore").map(|v| (v, "credsStore"));
    let Some((value, key)) = per_registry.or(store) else {
        return Ok(None);
    };
    let name = value.as_str().ok_or(ConfigError::HelperNotAString(key))?;
    if name.is_empty() {
        return Ok(None);
    }
    let plain = name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if !plain || name.starts_with('.') {
        return Err(ConfigError::HelperName {
            key,
            name: name.to_string(),
        });
    }
    Ok(Some(Helper {
        name: name.to_string(),
        key,
    }))
}

/// The key an `auths` entry stands for: host and port, without scheme or path.
fn normalize(key: &str) -> &str {
    let k = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    k.split('/').next().unwrap_or(k)
}

/// The docker config's path and bytes; `None` when there is none.
fn read_config() -> Option<Result<(PathBuf, Vec<u8>)>> {
    let path = config_path()?;
    Some(
        match read_capped(&path, MAX_CONFIG_BYTES, Follow::Final).map_err(fsio::Error::into_cause) {
            Ok(b) => Ok((path, b)),
            Err(Cause::NotFound) => return None,
            Err(e @ (Cause::Io(_) | Cause::Link | Cause::NotRegular(_))) => {
                Err(Error::io(&path, e.into()))
            }
            Err(Cause::TooLarge(_)) => Err(Error::io(
                &path,
                std::io::Error::other(ConfigError::TooLarge),
            )),
        },
    )
}

/// Finds the credentials for `registry` (`HOST[:PORT]`): from the credential helper the
/// docker config names for it, else (or when the helper has none) its `auths` entry.
/// `Ok(None)` when there are none; an unreadable or malformed file, or a helper that fails,
/// is an error naming it.
pub fn credentials_for(registry: &str) -> Result<Option<Credentials>> {
    let Some(read) = read_config() else {
        return Ok(None);
    };
    let (path, bytes) = read?;
    let malformed = |why: ConfigError| {
        Error::io(
            &path,
            std::io::Error::new(std::io::ErrorKind::InvalidData, why),
        )
    };
    let inline = parse_config(&bytes, registry).map_err(malformed)?;
    let doc: serde_json::Value = serde_json::from_slice(&bytes).expect("parsed above");
    let Some(helper) = helper_in(&doc, registry).map_err(malformed)? else {
        return Ok(inline);
    };
    let program = helper.program();
    let path_var = std::env::var_os("PATH");
    let ran = resolve_helper(
        &program,
        path_var.as_deref(),
        rustix::process::geteuid().as_raw(),
    )
    .and_then(|exe| run_helper(&exe, &program, registry, HELPER_TIMEOUT));
    match ran {
        Ok(Some(c)) => Ok(Some(c)),
        Ok(None) => Ok(inline),
        Err(failure) => Err(helper_error(&helper, &path, registry, failure)),
    }
}

/// How running a credential helper failed.
#[derive(Debug)]
pub(crate) enum HelperFailure {
    /// The program is not on `PATH`.
    Missing,
    /// It was found where another local user could have put it or could replace it.
    Unsafe {
        /// The file or directory at fault.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
        /// How to make it safe.
        fix: String,
    },
    /// It could not be started, or its output not read.
    Io(std::io::Error),
    /// It ran longer than its timeout (and was killed).
    Timeout,
    /// It exited with an error other than "not found"; its first line of output.
    Failed(String),
    /// It printed more than [`HELPER_OUTPUT_CAP`] bytes, or not the protocol's JSON.
    BadOutput(String),
    /// It answered with an identity token, which airlock does not exchange.
    IdentityToken,
}

/// The search path when `PATH` is unset (what `execvp` uses).
const DEFAULT_PATH: &str = "/bin:/usr/bin";

/// Finds `program` on `path_var` (`PATH`; [`DEFAULT_PATH`] when unset) as `execvp` would (the
/// first entry holding an executable regular file of that name, a link followed), resolves it
/// to its real path, and checks that no user but root and `euid` could have put it there or
/// could replace it: the file and every directory above its real path are owned by root or
/// `euid` and not writable by group or others (a directory with the sticky bit may be, as
/// `/tmp` is: others cannot rename or remove what they do not own in it). A match through a
/// relative entry (`.`, an empty entry, `bin`) is refused: it depends on the current
/// directory (docker refuses it the same way).
fn resolve_helper(
    program: &str,
    path_var: Option<&std::ffi::OsStr>,
    euid: u32,
) -> std::result::Result<PathBuf, HelperFailure> {
    use std::os::unix::fs::PermissionsExt;
    let path_var = path_var.unwrap_or(DEFAULT_PATH.as_ref());
    let found = std::env::split_paths(path_var).find_map(|dir| {
        let candidate = dir.join(program);
        let meta = std::fs::metadata(&candidate).ok()?;
        (meta.is_file() && meta.permissions().mode() & 0o111 != 0).then_some((dir, candidate))
    });
    let Some((dir, candidate)) = found else {
        return Err(HelperFailure::Missing);
    };
    if !dir.is_absolute() {
        return Err(HelperFailure::Unsafe {
            why: format!(
                "was found through the relative PATH entry {:?}, which names a different directory in every working directory",
                dir.display().to_string()
            ),
            fix: "remove the relative entry from PATH (an empty entry, `.` or a name without a leading /), or put the helper's directory on PATH as an absolute path".into(),
            path: candidate,
        });
    }
    let real = std::fs::canonicalize(&candidate).map_err(HelperFailure::Io)?;
    // From `/` down to the file: the first place another user could write is the one to fix.
    let mut chain: Vec<&Path> = real.ancestors().collect();
    chain.reverse();
    for at in chain {
        let meta = std::fs::symlink_metadata(at).map_err(HelperFailure::Io)?;
        if let Some((why, fix)) = replaceable_by_others(&meta, at, euid) {
            return Err(HelperFailure::Unsafe {
                path: at.to_path_buf(),
                why,
                fix,
            });
        }
    }
    Ok(real)
}

/// Why another local user could change `path` (described by `meta`, not followed), and how to
/// stop it: `None` when only root and `euid` can.
fn replaceable_by_others(
    meta: &std::fs::Metadata,
    path: &Path,
    euid: u32,
) -> Option<(String, String)> {
    use std::os::unix::fs::MetadataExt;
    let why = unsafe_owner_or_mode(meta.uid(), meta.mode(), meta.is_dir(), euid)?;
    let fix = if meta.uid() != 0 && meta.uid() != euid {
        format!(
            "install the helper where every directory above it belongs to root or to you (such as /usr/local/bin), or have {} owned by root",
            path.display()
        )
    } else {
        format!(
            "run `chmod go-w {}` (or install the helper in a directory only root or you can write, such as /usr/local/bin)",
            path.display()
        )
    };
    Some((why, fix))
}

/// The rule of [`resolve_helper`] on one path's owner and mode: what is wrong, if anything.
fn unsafe_owner_or_mode(uid: u32, mode: u32, is_dir: bool, euid: u32) -> Option<String> {
    let what = if is_dir { "directory" } else { "file" };
    if uid != 0 && uid != euid {
        return Some(format!(
            "is a {what} owned by user {uid}, not by root or by you (user {euid})"
        ));
    }
    let sticky = is_dir && mode & 0o1000 != 0;
    if mode & 0o022 != 0 && !sticky {
        let by = match (mode & 0o020 != 0, mode & 0o002 != 0) {
            (true, true) => "its group and all users",
            (true, false) => "its group",
            _ => "all users",
        };
        return Some(format!(
            "is a {what} writable by {by} (mode {:04o}{})",
            mode & 0o7777,
            if is_dir { ", no sticky bit" } else { "" }
        ));
    }
    None
}

/// Runs the helper `exe` (resolved by [`resolve_helper`]; `program` is its name, given as
/// `argv[0]` as a `PATH` lookup would) with `get` the way docker does: the registry on stdin,
/// the credentials as JSON on stdout, killed after `timeout`. `Ok(None)` when the helper holds
/// nothing for the registry.
fn run_helper(
    exe: &Path,
    program: &str,
    registry: &str,
    timeout: Duration,
) -> std::result::Result<Option<Credentials>, HelperFailure> {
    use std::os::unix::process::CommandExt;
    let mut child = match Command::new(exe)
        .arg0(program)
        .arg("get")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(HelperFailure::Missing),
        Err(e) => return Err(HelperFailure::Io(e)),
    };
    let capped = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut out = Vec::new();
            if let Some(r) = r {
                let _ = r.take(HELPER_OUTPUT_CAP + 1).read_to_end(&mut out);
            }
            out
        })
    };
    let stdout = capped(
        child
            .stdout
            .take()
            .map(|r| Box::new(r) as Box<dyn Read + Send>),
    );
    let stderr = capped(
        child
            .stderr
            .take()
            .map(|r| Box::new(r) as Box<dyn Read + Send>),
    );
    if let Some(mut stdin) = child.stdin.take() {
        // A helper that exits without reading is judged by its exit status below.
        let _ = stdin.write_all(registry.as_bytes());
    }
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() < timeout => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(HelperFailure::Timeout);
            }
            Err(e) => return Err(HelperFailure::Io(e)),
        }
    };
    // The helper has exited; a child it left holding the pipes is not waited for.
    let out = join_within(stdout, started, timeout);
    let err = join_within(stderr, started, timeout);
    let (Some(out), Some(err)) = (out, err) else {
        return Err(HelperFailure::Timeout);
    };
    if out.len() as u64 > HELPER_OUTPUT_CAP || err.len() as u64 > HELPER_OUTPUT_CAP {
        return Err(HelperFailure::BadOutput(format!(
            "more than {} KiB of output",
            HELPER_OUTPUT_CAP >> 10
        )));
    }
    let text = String::from_utf8_lossy(&out);
    if !status.success() {
        if text.trim() == HELPER_NOT_FOUND {
            return Ok(None);
        }
        let said = first_line(&text)
            .or_else(|| first_line(&String::from_utf8_lossy(&err)))
            .unwrap_or_else(|| "no output".into());
        return Err(HelperFailure::Failed(format!("{status}: {said}")));
    }
    parse_helper_answer(&out)
}

/// Waits for a reader thread until `timeout` after `started`.
fn join_within(
    handle: std::thread::JoinHandle<Vec<u8>>,
    started: Instant,
    timeout: Duration,
) -> Option<Vec<u8>> {
    while !handle.is_finished() {
        if started.elapsed() >= timeout {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    handle.join().ok()
}

/// The first non-empty line of a helper's output, at most 200 characters, escaped
/// ([`crate::display::escape`]: it is quoted in an error message).
pub(crate) fn first_line(text: &str) -> Option<String> {
    let line = text.lines().map(str::trim).find(|l| !l.is_empty())?;
    let cut = line
        .char_indices()
        .nth(200)
        .map_or(line, |(i, _)| &line[..i]);
    Some(crate::display::escape(cut).into_owned())
}

/// The `{"ServerURL", "Username", "Secret"}` answer of `get`.
pub(crate) fn parse_helper_answer(
    out: &[u8],
) -> std::result::Result<Option<Credentials>, HelperFailure> {
    #[derive(serde::Deserialize)]
    struct Answer {
        #[serde(rename = "Username")]
        username: String,
        #[serde(rename = "Secret")]
        secret: String,
    }
    let a: Answer = serde_json::from_slice(out).map_err(|e| {
        HelperFailure::BadOutput(format!(
            "its answer is not the helper protocol's {{\"ServerURL\", \"Username\", \"Secret\"}} JSON ({})",
            crate::display::json_error(&e)
        ))
    })?;
    if a.username == "<token>" {
        return Err(HelperFailure::IdentityToken);
    }
    if a.username.is_empty() && a.secret.is_empty() {
        return Ok(None);
    }
    Ok(Some(Credentials {
        username: a.username,
        password: a.secret,
    }))
}

/// The error for a helper that failed: which helper, chosen by which key of which file, what
/// happened, and what to try.
fn helper_error(helper: &Helper, config: &Path, registry: &str, failure: HelperFailure) -> Error {
    let program = helper.program();
    let check = format!(
        "run `printf {registry} | {program} get` to see the helper's own answer; unlock its store (the gpg agent for pass, the desktop keyring for secretservice) or log in again with `docker login {registry}`, then run the command again"
    );
    let (reason, todo) = match failure {
        HelperFailure::Missing => (
            "is not on PATH".to_string(),
            format!(
                "install {program} on this host (docker stored the password through it), or remove `{}` from {} and put the credentials in its `auths` entry for {registry} (`docker login {registry}` writes one when no helper is configured)",
                helper.key,
                config.display()
            ),
        ),
        HelperFailure::Unsafe { path, why, fix } => (
            format!(
                "is not run: {} {why}, so another local user could replace what runs and read the registry password",
                path.display()
            ),
            format!("{fix}, then run the command again"),
        ),
        HelperFailure::Io(e) => (format!("could not be run: {e}"), check),
        HelperFailure::Timeout => (
            format!(
                "did not answer within {} s and was stopped (it may be waiting for a passphrase or a keyring prompt nobody sees)",
                HELPER_TIMEOUT.as_secs()
            ),
            check,
        ),
        HelperFailure::Failed(said) => (format!("`get` failed ({said})"), check),
        HelperFailure::BadOutput(what) => (format!("answered with {what}"), check),
        HelperFailure::IdentityToken => (
            "answered with an identity token (Username \"<token>\"), which airlock does not exchange for a registry token".to_string(),
            format!(
                "log in with a user name and password or an access token as password (`docker login {registry} -u USER`), then run the command again"
            ),
        ),
    };
    Error::CredentialHelper {
        registry: registry.to_string(),
        helper: program,
        chosen_by: format!("`{}` in {}", helper.key, config.display()),
        reason,
        todo,
    }
}

/// Why the docker config is refused; `Display` follows the file's path.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConfigError {
    /// Over [`MAX_CONFIG_BYTES`].
    #[error("larger than {MAX_CONFIG_BYTES} bytes")]
    TooLarge,
    /// Not JSON.
    #[error("is not valid JSON: {0}")]
    Json(serde_json::Error),
    /// An `auths` entry (its key) whose `auth` is not base64.
    #[error("auths entry {0:?}: `auth` is not base64")]
    AuthNotBase64(String),
    /// An `auths` entry whose `auth` decodes to bytes that are not UTF-8.
    #[error("auths entry {0:?}: `auth` is not UTF-8")]
    AuthNotUtf8(String),
    /// An `auths` entry whose `auth` has no `:`.
    #[error("auths entry {0:?}: `auth` is not USER:PASSWORD")]
    AuthNotUserPassword(String),
    /// `credHelpers`' or `credsStore`'s (the key) value is not a string.
    #[error("`{0}` is not a string")]
    HelperNotAString(&'static str),
    /// The helper name is not a plain program-name suffix.
    #[error(
        "`{key}` names {name:?}, which is not a credential helper name (docker-credential-NAME: letters, digits, '-', '_', '.')"
    )]
    HelperName {
        /// `credHelpers` or `credsStore`.
        key: &'static str,
        /// The name.
        name: String,
    },
}

/// The credentials for `registry` in a docker config file's bytes.
pub(crate) fn parse_config(
    bytes: &[u8],
    registry: &str,
) -> std::result::Result<Option<Credentials>, ConfigError> {
    let doc: serde_json::Value = serde_json::from_slice(bytes).map_err(ConfigError::Json)?;
    let Some(auths) = doc.get("auths").and_then(|a| a.as_object()) else {
        return Ok(None);
    };
    let Some((key, entry)) = auths.iter().find(|(k, _)| normalize(k) == registry) else {
        return Ok(None);
    };
    if let Some(auth) = entry
        .get("auth")
        .and_then(|a| a.as_str())
        .filter(|a| !a.is_empty())
    {
        let raw = base64::engine::general_purpose::STANDARD
            .decode(auth.trim())
            .map_err(|_| ConfigError::AuthNotBase64(key.clone()))?;
        let text = String::from_utf8(raw).map_err(|_| ConfigError::AuthNotUtf8(key.clone()))?;
        let (user, pass) = text
            .split_once(':')
            .ok_or_else(|| ConfigError::AuthNotUserPassword(key.clone()))?;
        return Ok(Some(Credentials {
            username: user.to_string(),
            password: pass.to_string(),
        }));
    }
    match (
        entry.get("username").and_then(|u| u.as_str()),
        entry.get("password").and_then(|p| p.as_str()),
    ) {
        (Some(u), Some(p)) => Ok(Some(Credentials {
            username: u.to_string(),
            password: p.to_string(),
        })),
        _ => Ok(None),
    }
}

/// A `WWW-Authenticate` challenge.
#[derive(Debug, PartialEq, Eq)]
pub enum Challenge {
    /// `Basic realm=...`: send the credentials on every request.
    Basic,
    /// `Bearer realm=...,service=...,scope=...`: get a token from `realm` first.
    Bearer {
        /// The token endpoint.
        realm: String,
        /// The `service` parameter, if given.
        service: Option<String>,
    },
}

/// Parses a `WWW-Authenticate` header value (one challenge; quoted or bare parameters).
pub fn parse_challenge(header: &str) -> Option<Challenge> {
    let header = header.trim();
    let (scheme, params) = header.split_once(' ').unwrap_or((header, ""));
    if scheme.eq_ignore_ascii_case("basic") {
        return Some(Challenge::Basic);
    }
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let mut realm = None;
    let mut service = None;
    let mut rest = params.trim();
    while !rest.is_empty() {
        let (name, after) = rest.split_once('=')?;
        let after = after.trim_start();
        let (value, next) = if let Some(q) = after.strip_prefix('"') {
            let end = q.find('"')?;
            (&q[..end], &q[end + 1..])
        } else {
            let end = after.find(',').unwrap_or(after.len());
            (&after[..end], &after[end..])
        };
        match name.trim().to_ascii_lowercase().as_str() {
            "realm" => realm = Some(value.to_string()),
            "service" => service = Some(value.to_string()),
            _ => {}
        }
        rest = next.trim_start().trim_start_matches(',').trim_start();
    }
    Some(Challenge::Bearer {
        realm: realm?,
        service,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_auths_entries_in_the_forms_docker_writes() {
        let auth = base64::engine::general_purpose::STANDARD.encode("alice:s3cr:et");
        let doc = format!(
            r#"{{"auths":{{"https://reg.site:5000/v2/":{{"auth":"{auth}"}},"other":{{"username":"u","password":"p"}}}}}}"#
        );
        let c = parse_config(doc.as_bytes(), "reg.site:5000")
            .unwrap()
            .unwrap();
        assert_eq!(
            (c.username.as_str(), c.password.as_str()),
            ("alice", "s3cr:et")
        );
        let c = parse_config(doc.as_bytes(), "other").unwrap().unwrap();
        assert_eq!(c.username, "u");
        assert!(parse_config(doc.as_bytes(), "reg.site").unwrap().is_none());
        assert!(parse_config(b"{}", "x").unwrap().is_none());
        assert!(matches!(parse_config(b"{", "x"), Err(ConfigError::Json(_))));
        assert!(matches!(
            parse_config(br#"{"auths":{"x":{"auth":"!!"}}}"#, "x"),
            Err(ConfigError::AuthNotBase64(k)) if k == "x"
        ));
        let no_colon = base64::engine::general_purpose::STANDARD.encode("user");
        let doc = format!(r#"{{"auths":{{"x":{{"auth":"{no_colon}"}}}}}}"#);
        let why = parse_config(doc.as_bytes(), "x").unwrap_err();
        assert_eq!(
            why.to_string(),
            "auths entry \"x\": `auth` is not USER:PASSWORD"
        );
    }

    #[test]
    fn a_helper_answer_of_another_shape_is_refused_without_quoting_what_it_holds() {
        // Found by `parse_fuzz::helper_child`: a token printed as a JSON string was quoted
        // whole in the error (`invalid type: string "…", expected struct Answer`).
        for (answer, says) in [
            (&br#""tok-3f9a1c""#[..], "a value of another type"),
            (
                br#"{"Username":"u","Secret":31415926}"#,
                "a value of another type",
            ),
            (
                br#"{"Username":["tok-3f9a1c"],"Secret":"x"}"#,
                "a value of another type",
            ),
            (br#"["tok-3f9a1c"]"#, "invalid length 1"),
            (br#"{"Username":"tok-3f9a1c""#, "cut short"),
            (b"tok-3f9a1c", "not JSON"),
            (br#"{"Secret":"tok-3f9a1c"}"#, "missing field `Username`"),
            (
                br#"{"Username":"u","Secret":"tok-3f9a1c","Secret":"y"}"#,
                "duplicate field `Secret`",
            ),
        ] {
            let Err(HelperFailure::BadOutput(m)) = parse_helper_answer(answer) else {
                panic!("accepted {}", String::from_utf8_lossy(answer));
            };
            assert!(!m.contains("tok-3f9a1c") && !m.contains("31415926"), "{m}");
            assert!(m.contains(says) && m.contains(" at line 1 column "), "{m}");
        }
    }

    #[test]
    fn the_helper_for_a_registry_is_cred_helpers_then_creds_store() {
        let doc: serde_json::Value = serde_json::from_str(
            r#"{"auths":{"reg.site:5000":{}},"credsStore":"pass","credHelpers":{"https://other.site":"ecr-login"}}"#,
        )
        .unwrap();
        let h = helper_in(&doc, "reg.site:5000").unwrap().unwrap();
        assert_eq!(
            (h.program().as_str(), h.key),
            ("docker-credential-pass", "credsStore")
        );
        let h = helper_in(&doc, "other.site").unwrap().unwrap();
        assert_eq!((h.name.as_str(), h.key), ("ecr-login", "credHelpers"));
        let none: serde_json::Value = serde_json::from_str(r#"{"credsStore":""}"#).unwrap();
        assert_eq!(helper_in(&none, "x").unwrap(), None);
        for bad in [
            r#"{"credsStore":"../../bin/sh"}"#,
            r#"{"credsStore":".hidden"}"#,
            r#"{"credsStore":1}"#,
        ] {
            let doc: serde_json::Value = serde_json::from_str(bad).unwrap();
            assert!(helper_in(&doc, "x").is_err(), "{bad}");
        }
        let doc: serde_json::Value = serde_json::from_str(r#"{"credsStore":1}"#).unwrap();
        assert!(matches!(
            helper_in(&doc, "x"),
            Err(ConfigError::HelperNotAString("credsStore"))
        ));
    }

    /// A helper script in a temp dir, run by its path.
    fn helper_script(dir: &Path, body: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let path = dir.join("docker-credential-test");
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    /// [`run_helper`] as `credentials_for` calls it, with the name the helper has here.
    fn run_test_helper(
        exe: &Path,
        registry: &str,
        timeout: Duration,
    ) -> std::result::Result<Option<Credentials>, HelperFailure> {
        run_helper(exe, "docker-credential-test", registry, timeout)
    }

    #[test]
    fn a_helper_is_run_with_the_protocol_and_its_failures_are_told_apart() {
        let t = tempfile::tempdir().unwrap();
        let long = Duration::from_secs(20);
        // The registry arrives on stdin; the answer is the protocol's JSON.
        let ok = helper_script(
            t.path(),
            r#"[ "$1" = get ] || exit 9; read -r server; [ "$server" = reg.site:5000 ] || exit 8; echo '{"ServerURL":"reg.site:5000","Username":"bob","Secret":"pw"}'"#,
        );
        let c = run_test_helper(&ok, "reg.site:5000", long)
            .unwrap()
            .unwrap();
        assert_eq!((c.username.as_str(), c.password.as_str()), ("bob", "pw"));
        assert!(matches!(
            run_test_helper(&ok, "other", long),
            Err(HelperFailure::Failed(_))
        ));
        let none = helper_script(t.path(), &format!("echo '{HELPER_NOT_FOUND}'; exit 1"));
        assert!(run_test_helper(&none, "x", long).unwrap().is_none());
        let fails = helper_script(
            t.path(),
            "echo 'gpg: decryption failed: No secret key' >&2; exit 1",
        );
        match run_test_helper(&fails, "x", long) {
            Err(HelperFailure::Failed(said)) => {
                assert!(said.contains("gpg: decryption failed"), "{said}")
            }
            other => panic!("{other:?}"),
        }
        let token = helper_script(t.path(), r#"echo '{"Username":"<token>","Secret":"t"}'"#);
        assert!(matches!(
            run_test_helper(&token, "x", long),
            Err(HelperFailure::IdentityToken)
        ));
        let garbage = helper_script(t.path(), "echo not json");
        assert!(matches!(
            run_test_helper(&garbage, "x", long),
            Err(HelperFailure::BadOutput(_))
        ));
        let endless = helper_script(t.path(), "head -c 1000000 /dev/zero");
        assert!(matches!(
            run_test_helper(&endless, "x", long),
            Err(HelperFailure::BadOutput(_))
        ));
        let hangs = helper_script(t.path(), "exec sleep 600");
        assert!(matches!(
            run_test_helper(&hangs, "x", Duration::from_millis(300)),
            Err(HelperFailure::Timeout)
        ));
        assert!(matches!(
            run_test_helper(&t.path().join("nowhere"), "x", long),
            Err(HelperFailure::Missing)
        ));
    }

    #[test]
    fn owner_and_mode_rules_follow_what_another_user_could_change() {
        let me = 1000;
        // Root's or mine, writable by the owner only: fine.
        assert_eq!(unsafe_owner_or_mode(0, 0o100755, false, me), None);
        assert_eq!(unsafe_owner_or_mode(me, 0o040700, true, me), None);
        // /tmp: world-writable with the sticky bit.
        assert_eq!(unsafe_owner_or_mode(0, 0o041777, true, me), None);
        // Another user's file or directory, however strict its mode.
        let why = unsafe_owner_or_mode(1001, 0o040755, true, me).unwrap();
        assert_eq!(
            why,
            "is a directory owned by user 1001, not by root or by you (user 1000)"
        );
        assert!(unsafe_owner_or_mode(1001, 0o100700, false, me).is_some());
        // Running as root, a file of user 1000 is another user's.
        assert!(unsafe_owner_or_mode(me, 0o100755, false, 0).is_some());
        // Writable by group or others.
        assert_eq!(
            unsafe_owner_or_mode(me, 0o100777, false, me).unwrap(),
            "is a file writable by its group and all users (mode 0777)"
        );
        assert_eq!(
            unsafe_owner_or_mode(0, 0o040775, true, me).unwrap(),
            "is a directory writable by its group (mode 0775, no sticky bit)"
        );
        assert_eq!(
            unsafe_owner_or_mode(me, 0o040757, true, me).unwrap(),
            "is a directory writable by all users (mode 0757, no sticky bit)"
        );
        // The sticky bit protects a directory's entries, not a file's bytes.
        assert!(unsafe_owner_or_mode(me, 0o101777, false, me).is_some());
    }

    #[test]
    fn a_helper_is_found_once_on_path_and_refused_where_others_could_replace_it() {
        use std::os::unix::fs::PermissionsExt;
        let euid = rustix::process::geteuid().as_raw();
        let t = tempfile::tempdir().unwrap();
        let mode = |p: &Path, m: u32| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap()
        };
        let (early, good) = (t.path().join("early"), t.path().join("good"));
        for d in [&early, &good] {
            std::fs::create_dir(d).unwrap();
            mode(d, 0o755);
        }
        let real = helper_script(&good, "exit 0");
        let path_var = std::env::join_paths([&early, &good]).unwrap();
        let find = |p: &std::ffi::OsStr| resolve_helper("docker-credential-test", Some(p), euid);
        // The first entry holding it; its real path is what runs.
        assert_eq!(find(&path_var).unwrap(), real.canonicalize().unwrap());
        // A file of that name that is not executable is passed over, as execvp does.
        std::fs::write(early.join("docker-credential-test"), "#!/bin/sh\n").unwrap();
        mode(&early.join("docker-credential-test"), 0o644);
        assert_eq!(find(&path_var).unwrap(), real.canonicalize().unwrap());
        // An earlier entry others can write, holding a planted helper: refused, naming it.
        mode(&early.join("docker-credential-test"), 0o755);
        mode(&early, 0o777);
        match find(&path_var) {
            Err(HelperFailure::Unsafe { path, why, fix }) => {
                assert_eq!(path, early.canonicalize().unwrap());
                assert_eq!(
                    why,
                    "is a directory writable by its group and all users (mode 0777, no sticky bit)"
                );
                assert!(
                    fix.starts_with(&format!("run `chmod go-w {}`", path.display())),
                    "{fix}"
                );
            }
            other => panic!("{other:?}"),
        }
        // With the sticky bit (as /tmp) the directory is fine; the helper's own mode is not.
        mode(&early, 0o1777);
        assert!(find(&path_var).is_ok());
        mode(&early.join("docker-credential-test"), 0o777);
        match find(&path_var) {
            Err(HelperFailure::Unsafe { path, .. }) => {
                assert_eq!(
                    path,
                    early.join("docker-credential-test").canonicalize().unwrap()
                )
            }
            other => panic!("{other:?}"),
        }
        std::fs::remove_file(early.join("docker-credential-test")).unwrap();
        // A link to a helper in a directory others can write: the real path is checked.
        mode(&early, 0o755);
        let open = t.path().join("open");
        std::fs::create_dir(&open).unwrap();
        helper_script(&open, "exit 0");
        mode(&open, 0o777);
        std::os::unix::fs::symlink(
            open.join("docker-credential-test"),
            early.join("docker-credential-test"),
        )
        .unwrap();
        match find(&path_var) {
            Err(HelperFailure::Unsafe { path, .. }) => {
                assert_eq!(path, open.canonicalize().unwrap())
            }
            other => panic!("{other:?}"),
        }
        // Not on PATH at all.
        assert!(matches!(
            find(t.path().join("none").as_os_str()),
            Err(HelperFailure::Missing)
        ));
    }

    #[test]
    fn parses_challenges() {
        assert_eq!(
            parse_challenge(
                r#"Bearer realm="https://auth.site/token",service="registry.site",scope="repository:a:pull""#
            ),
            Some(Challenge::Bearer {
                realm: "https://auth.site/token".into(),
                service: Some("registry.site".into())
            })
        );
        assert_eq!(
            parse_challenge(r#"Basic realm="Registry Realm""#),
            Some(Challenge::Basic)
        );
        assert_eq!(parse_challenge("Bearer service=x"), None);
        assert_eq!(parse_challenge("Negotiate"), None);
    }
}
