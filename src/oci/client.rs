//! A small blocking client for the OCI distribution API, on `ureq` with rustls.
//!
//! Only what publishing and installing need: the `/v2/` ping with Basic or Bearer
//! authentication, blob HEAD, GET (bounded into memory, or as a reader from an offset, for
//! resuming), blob upload (POST, then one PUT whose body streams from a reader with its
//! `Content-Length`, so a 10 GB layer never sits in memory), and manifest GET and PUT.
//!
//! Idempotent requests are retried on transient failures (connection errors, timeouts, 429,
//! 5xx) a few times with backoff; a streamed upload is not (its source cannot be rewound),
//! and a push run again skips every blob the registry already holds.
//!
//! The registry is not trusted (docs/SECURITY.md, "The registry"):
//!
//! - Credentials (the docker config's, and the Bearer token got with them) go only to the
//!   registry's own origin (scheme, host and port of the reference) and, Basic, to the token
//!   service its challenge names; an upload `Location` or a redirect elsewhere gets no
//!   `Authorization` ([`same_origin`], [`realm_may_get_credentials`]). Nothing is sent over plain
//!   HTTP unless `--plain-http` was given for that registry.
//! - A manifest is held to its digest: the pin of an `@sha256:` reference, else the
//!   `Docker-Content-Digest` the registry states ([`check_manifest_digest`]).
//! - Every body is read to a bound: a blob to the size its descriptor gives + 1, a manifest to
//!   [`MAX_OCI_MANIFEST_BYTES`] + 1, and through a [`Stall`] guard, so a registry that drips
//!   bytes is cut off (`AIRLOCK_REGISTRY_STALL`) besides the per-read timeout.
//! - Every request has one deadline for its response headers, the stall window
//!   ([`Stall::interval`]), shared by all its tries: a registry that drips its headers (or
//!   answers nothing) fails the request once the window has passed, never after the window
//!   times the number of tries. Bodies, down and up, are held to the stall rate; a single read
//!   or write that blocks for a whole window ends the transfer too.

use std::io::Read;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use ureq::http::{self, Method, StatusCode, Uri};
use ureq::{Body, SendBody};

use super::auth::{self, Challenge, Credentials};
use super::reference::Reference;
use crate::error::{Error, RegistryNext, Result};
use crate::hexdigest;

/// How to reach the registry.
#[derive(Clone, Debug, Default)]
pub struct RegistryOptions {
    /// Speak plain HTTP (only when asked: `--plain-http`).
    pub plain_http: bool,
    /// A PEM file of extra CA certificates (a site CA), trusted beside the system roots.
    pub ca_file: Option<PathBuf>,
}

/// Largest image manifest read (as distribution's own limit): `push` refuses to publish one
/// larger, so it never publishes what `unpack oci://` refuses.
pub const MAX_OCI_MANIFEST_BYTES: u64 = 4 << 20;
/// Tries for an idempotent request.
const TRIES: u32 = 4;

/// A connection to one repository of one registry, authenticated.
pub struct Registry {
    agent: ureq::Agent,
    base: String,
    /// The origin of `base`: the only one that gets the `Authorization` header.
    origin: Origin,
    plain_http: bool,
    stall: Stall,
    /// The reference it was opened for.
    pub reference: Reference,
    creds: Option<Credentials>,
    push: bool,
    ca_file: bool,
    authorization: Mutex<Option<String>>,
}

/// The media type of an OCI image manifest (what the client asks for and sends; the
/// ModelPack artifact is one).
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";

/// The most read of a `--ca-file` (a bundle of a few hundred PEM certificates is under 1 MiB).
const MAX_CA_FILE_BYTES: u64 = 4 << 20;

/// The variable that sets the stall deadline, `BYTES/SECONDS` ([`Stall`]).
pub(crate) const STALL_ENV: &str = "AIRLOCK_REGISTRY_STALL";

/// The stall deadline: a transfer that brings fewer than `min_bytes` in `interval` spent
/// waiting on the registry is ended, however often single bytes arrive (the per-read timeout
/// only ends a transfer that stops outright). Time airlock spends elsewhere (writing a staged
/// file, hashing) does not count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Stall {
    /// Bytes a transfer must move per `interval`.
    pub min_bytes: u64,
    /// The window.
    pub interval: Duration,
}

impl Default for Stall {
    /// 32 KiB per 60 s (about 550 bytes a second): far below any network a registry is
    /// reached over, far above a drip.
    fn default() -> Stall {
        Stall {
            min_bytes: 32 << 10,
            interval: Duration::from_secs(60),
        }
    }
}

/// Why the registry client refuses a setting or an answer (issue 34 item 6: typed, not a
/// string). `Display` is the reason as the user reads it, after what it is about (the
/// variable, the token service's answer, the manifest or the blob request).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClientError {
    /// The stall setting is not `BYTES/SECONDS`.
    #[error("the form is BYTES/SECONDS, e.g. 32768/60")]
    StallForm,
    /// The stall setting's bytes are not a number.
    #[error("{bytes:?} is not a number of bytes")]
    StallBytes { bytes: String },
    /// The stall setting's seconds are not from 1 to 86400.
    #[error("{secs:?} is not a number of seconds from 1 to 86400")]
    StallSeconds { secs: String },
    /// The stall setting's bytes are 0.
    #[error("0 bytes would never stall: give at least 1")]
    StallZero,
    /// A token service that is not an http(s) URL.
    #[error("its token service {realm:?} is not an http(s) URL")]
    RealmNotHttp { realm: String },
    /// A plain-http token service on another host than the registry's.
    #[error(
        "its token service {realm} is plain http on another host ({host}): airlock sends credentials over plain http only to the registry --plain-http was given for"
    )]
    RealmPlainHttpElsewhere { realm: String, host: String },
    /// A plain-http token service without `--plain-http`.
    #[error(
        "its token service {realm} is plain http: airlock sends credentials over plain http only with --plain-http, to the registry's own host"
    )]
    RealmPlainHttp { realm: String },
    /// A pinned manifest answered with other bytes.
    #[error(
        "the registry answered the pin {pin} with another manifest (its bytes hash to {actual}): not the pinned version"
    )]
    NotPinned { pin: String, actual: String },
    /// A `Docker-Content-Digest` that is not a digest (shown shortened).
    #[error("its Docker-Content-Digest {stated:?} is not a digest")]
    NotADigest { stated: String },
    /// A `Docker-Content-Digest` that is not a digest of its algorithm (shown shortened).
    #[error("its Docker-Content-Digest {stated:?} is not a {algorithm} digest")]
    NotAnAlgorithmDigest {
        stated: String,
        algorithm: &'static str,
    },
    /// The manifest's bytes hash to another digest than the registry states.
    #[error(
        "the manifest the registry sent hashes to {computed}, its Docker-Content-Digest says {stated}"
    )]
    DigestMismatch { computed: String, stated: String },
    /// A range answer whose `Content-Range` cannot be read (shown shortened).
    #[error("it answered a range request with Content-Range {content_range:?}")]
    BadContentRange { content_range: String },
    /// A range answer starting after the byte asked for.
    #[error(
        "it answered a request for the bytes from {offset} with the bytes from {first} (Content-Range {content_range:?})"
    )]
    RangeStartsLate {
        offset: u64,
        first: u64,
        content_range: String,
    },
    /// A token service's answer that is not JSON.
    #[error("is not JSON: {0}")]
    TokenNotJson(String),
    /// A token service's answer without a token.
    #[error("holds no token")]
    NoToken,
    /// A token that is not visible ASCII.
    #[error("holds a token that is not visible ASCII")]
    TokenNotVisible,
}

impl Stall {
    /// Parses `BYTES/SECONDS` (both positive integers), e.g. `32768/60`.
    pub fn parse(text: &str) -> std::result::Result<Stall, ClientError> {
        let (bytes, secs) = text.trim().split_once('/').ok_or(ClientError::StallForm)?;
        let min_bytes: u64 = bytes.trim().parse().map_err(|_| ClientError::StallBytes {
            bytes: bytes.into(),
        })?;
        let secs: u64 = secs
            .trim()
            .parse()
            .ok()
            .filter(|s| (1..=86_400).contains(s))
            .ok_or_else(|| ClientError::StallSeconds { secs: secs.into() })?;
        if min_bytes == 0 {
            return Err(ClientError::StallZero);
        }
        Ok(Stall {
            min_bytes,
            interval: Duration::from_secs(secs),
        })
    }

    /// The deadline `AIRLOCK_REGISTRY_STALL` sets, else the default; a malformed value is a
    /// usage error.
    pub(crate) fn from_env() -> Result<Stall> {
        match std::env::var(STALL_ENV) {
            Err(std::env::VarError::NotPresent) => Ok(Stall::default()),
            Ok(v) => {
                Stall::parse(&v).map_err(|why| Error::Usage(format!("{STALL_ENV}={v:?}: {why}")))
            }
            Err(std::env::VarError::NotUnicode(_)) => Err(Error::Usage(format!(
                "{STALL_ENV} is not valid UTF-8; the form is BYTES/SECONDS, e.g. 32768/60"
            ))),
        }
    }
}

/// Bytes moved and time spent waiting in the current window of a transfer.
struct Pace {
    stall: Stall,
    bytes: u64,
    waited: Duration,
}

impl Pace {
    fn new(stall: Stall) -> Pace {
        Pace {
            stall,
            bytes: 0,
            waited: Duration::ZERO,
        }
    }

    /// Counts `bytes` moved in `waited`; fails once a whole window moved too few.
    fn note(&mut self, bytes: u64, waited: Duration) -> std::io::Result<()> {
        self.bytes += bytes;
        self.waited += waited;
        if self.waited >= self.stall.interval {
            if self.bytes < self.stall.min_bytes {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!(
                        "the transfer stalled: {} bytes in {} s, fewer than the {} bytes per {} s a transfer must move ({STALL_ENV})",
                        self.bytes,
                        self.waited.as_secs(),
                        self.stall.min_bytes,
                        self.stall.interval.as_secs()
                    ),
                ));
            }
            self.bytes = 0;
            self.waited = Duration::ZERO;
        }
        Ok(())
    }
}

/// A response body under the stall deadline: counts the time spent inside each read.
struct StallReader<R> {
    inner: R,
    pace: Pace,
}

impl<R: Read> Read for StallReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let start = Instant::now();
        let n = self.inner.read(buf)?;
        if n > 0 {
            self.pace.note(n as u64, start.elapsed())?;
        }
        Ok(n)
    }
}

/// An upload body under the stall deadline: counts the time between handing a piece to the
/// client and its asking for the next (the time the piece took to go out to the registry).
struct StallUpload<R> {
    inner: R,
    pace: Pace,
    sent: Option<(u64, Instant)>,
}

impl<R: Read> Read for StallUpload<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if let Some((n, since)) = self.sent.take() {
            self.pace.note(n, since.elapsed())?;
        }
        let n = self.inner.read(buf)?;
        if n > 0 {
            self.sent = Some((n as u64, Instant::now()));
        }
        Ok(n)
    }
}

/// Scheme, host and port of a URL: what decides whether a request may carry credentials.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Origin {
    scheme: String,
    host: String,
    port: u16,
}

/// The origin of an absolute `http`/`https` URL (`None` for anything else).
pub fn origin(url: &str) -> Option<Origin> {
    let uri: Uri = url.parse().ok()?;
    let scheme = uri.scheme_str()?.to_ascii_lowercase();
    let port = uri.port_u16().or(match scheme.as_str() {
        "https" => Some(443),
        "http" => Some(80),
        _ => None,
    })?;
    let host = uri.host()?.to_ascii_lowercase();
    if host.is_empty() {
        return None;
    }
    Some(Origin { scheme, host, port })
}

/// Whether `url` is on `origin` (same scheme, host and port): only then does a request carry
/// the registry's `Authorization`.
pub fn same_origin(origin_: &Origin, url: &str) -> bool {
    origin(url).as_ref() == Some(origin_)
}

/// Whether the token service at `realm` may get the docker config's credentials for the
/// registry at `registry`: over https, yes (docker sends them to the realm the registry
/// names); over plain http only on the registry's own host, and only with `--plain-http`.
pub fn realm_may_get_credentials(
    realm: &str,
    registry: &Origin,
    plain_http: bool,
) -> std::result::Result<(), ClientError> {
    let Some(r) = origin(realm) else {
        return Err(ClientError::RealmNotHttp {
            realm: realm.into(),
        });
    };
    match r.scheme.as_str() {
        "https" => Ok(()),
        "http" if plain_http && r.host == registry.host => Ok(()),
        "http" if plain_http => Err(ClientError::RealmPlainHttpElsewhere {
            realm: realm.into(),
            host: r.host,
        }),
        _ => Err(ClientError::RealmPlainHttp {
            realm: realm.into(),
        }),
    }
}

/// Checks an image manifest's bytes against the digest they were asked by (`pin`, the
/// `sha256:HEX` of an `@sha256:` reference) and the one the registry states
/// (`Docker-Content-Digest`, `sha256:` or `sha512:`; another algorithm is not checked).
pub fn check_manifest_digest(
    bytes: &[u8],
    pin: Option<&str>,
    stated: Option<&str>,
) -> std::result::Result<(), ClientError> {
    use sha2::{Digest, Sha256, Sha512};
    let actual = format!("sha256:{}", hex::encode(Sha256::digest(bytes)));
    if let Some(pin) = pin
        && pin != actual
    {
        return Err(ClientError::NotPinned {
            pin: pin.into(),
            actual,
        });
    }
    let Some(stated) = stated.map(str::trim) else {
        return Ok(());
    };
    let (algorithm, hex_len, computed) = match stated.split_once(':') {
        Some(("sha256", _)) => ("sha256", 64, actual.clone()),
        Some(("sha512", _)) => (
            "sha512",
            128,
            format!("sha512:{}", hex::encode(Sha512::digest(bytes))),
        ),
        Some((other, _))
            if !other.is_empty()
                && other.bytes().all(|b| {
                    b.is_ascii_lowercase() || b.is_ascii_digit() || b"+._-".contains(&b)
                }) =>
        {
            return Ok(());
        }
        _ => {
            return Err(ClientError::NotADigest {
                stated: error_text(stated),
            });
        }
    };
    let hex = &stated[algorithm.len() + 1..];
    if !hexdigest::is_lower_hex(hex, hex_len) {
        return Err(ClientError::NotAnAlgorithmDigest {
            stated: error_text(stated),
            algorithm,
        });
    }
    if stated != computed {
        return Err(ClientError::DigestMismatch {
            computed,
            stated: stated.into(),
        });
    }
    Ok(())
}

/// How many leading bytes of a blob `GET` answer to skip to reach byte `offset`: a `200` is
/// the whole blob; a `206` starts where its `Content-Range` (`bytes FIRST-LAST/SIZE`) says,
/// which must be at `offset` or before it.
pub fn range_skip(
    partial: bool,
    content_range: Option<&str>,
    offset: u64,
) -> std::result::Result<u64, ClientError> {
    if !partial {
        return Ok(offset);
    }
    let Some(text) = content_range else {
        // RFC 9110 requires it; without it, take the answer as starting at `offset` (the
        // size and SHA-256 of the whole still decide).
        return Ok(0);
    };
    let bad = || ClientError::BadContentRange {
        content_range: error_text(text),
    };
    let spec = text.trim().strip_prefix("bytes ").ok_or_else(bad)?;
    let (range, _size) = spec.split_once('/').ok_or_else(bad)?;
    let (first, last) = range.split_once('-').ok_or_else(bad)?;
    let digits = |s: &str| -> Option<u64> {
        (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse().ok())
            .flatten()
    };
    let (first, last) = (
        digits(first).ok_or_else(bad)?,
        digits(last).ok_or_else(bad)?,
    );
    if last < first {
        return Err(bad());
    }
    if first > offset {
        return Err(ClientError::RangeStartsLate {
            offset,
            first,
            content_range: error_text(text),
        });
    }
    Ok(offset - first)
}

/// The token in a token service's answer (`token`, else `access_token`): visible ASCII, as
/// it is sent back in a header.
pub fn parse_token_answer(body: &[u8]) -> std::result::Result<String, ClientError> {
    let doc: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| ClientError::TokenNotJson(e.to_string()))?;
    let token = doc
        .get("token")
        .filter(|t| t.as_str().is_some_and(|t| !t.is_empty()))
        .or_else(|| doc.get("access_token"))
        .and_then(|t| t.as_str())
        .ok_or(ClientError::NoToken)?;
    if token.is_empty() || !token.bytes().all(|b| (0x21..=0x7e).contains(&b)) {
        return Err(ClientError::TokenNotVisible);
    }
    Ok(token.to_string())
}

/// A registry's error body as a short line for a message: distribution's JSON errors
/// (`{"errors":[{"code":..,"message":..}]}`) as `CODE: MESSAGE`, else the text; at most 200
/// characters, escaped ([`crate::display::escape`]: terminal escapes, line breaks, bidi and
/// zero-width characters shown as escapes).
pub fn error_text(text: &str) -> String {
    let line = match serde_json::from_str::<serde_json::Value>(text) {
        Ok(v) if v.get("errors").and_then(|e| e.get(0)).is_some() => {
            let first = &v["errors"][0];
            let code = first.get("code").and_then(|c| c.as_str()).unwrap_or("");
            let msg = first.get("message").and_then(|c| c.as_str()).unwrap_or("");
            format!("{code}: {msg}")
        }
        _ => text.to_string(),
    };
    let line = line.trim();
    let cut = line
        .char_indices()
        .nth(200)
        .map_or(line, |(i, _)| &line[..i]);
    crate::display::escape(cut.trim_end()).into_owned()
}

fn tls_roots(opts: &RegistryOptions) -> Result<Vec<ureq::tls::Certificate<'static>>> {
    let mut roots: Vec<ureq::tls::Certificate<'static>> = rustls_native_certs::load_native_certs()
        .certs
        .iter()
        .map(|c| ureq::tls::Certificate::from_der(c.as_ref()).to_owned())
        .collect();
    if let Some(path) = &opts.ca_file {
        let pem = crate::fsio::read_capped(path, MAX_CA_FILE_BYTES, crate::fsio::Follow::Final)
            .map_err(|e| Error::io(path, e.into()))?;
        let before = roots.len();
        for item in ureq::tls::parse_pem(&pem) {
            match item {
                Ok(ureq::tls::PemItem::Certificate(c)) => roots.push(c),
                Ok(_) => {}
                Err(e) => {
                    return Err(Error::io(
                        path,
                        std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()),
                    ));
                }
            }
        }
        if roots.len() == before {
            return Err(Error::io(
                path,
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    "holds no PEM certificate (--ca-file wants the site CA's certificate)",
                ),
            ));
        }
    }
    Ok(roots)
}

/// Whether a failure is worth another try.
fn transient_status(s: StatusCode) -> bool {
    s == StatusCode::TOO_MANY_REQUESTS || s.is_server_error()
}

fn transient(e: &ureq::Error) -> bool {
    matches!(
        e,
        ureq::Error::Io(_)
            | ureq::Error::Timeout(_)
            | ureq::Error::ConnectionFailed
            | ureq::Error::Protocol(_)
    )
}

/// Reads a short error text from a response body (bounded, under the stall deadline), for
/// messages.
fn body_text(resp: &mut http::Response<Body>, stall: Stall) -> String {
    let mut raw = Vec::new();
    let reader = resp.body_mut().with_config().limit(u64::MAX).reader();
    let _ = StallReader {
        inner: reader,
        pace: Pace::new(stall),
    }
    .take(4096)
    .read_to_end(&mut raw);
    error_text(&String::from_utf8_lossy(&raw))
}

fn backoff(attempt: u32) {
    std::thread::sleep(Duration::from_millis(250 << attempt.min(4)));
}

impl Registry {
    /// Connects to the registry of `reference` and authenticates for pulling (and pushing, if
    /// `push`): credentials from the docker config, Basic or a Bearer token as the registry's
    /// challenge asks.
    pub fn connect(reference: &Reference, opts: &RegistryOptions, push: bool) -> Result<Registry> {
        let roots = tls_roots(opts)?;
        let stall = Stall::from_env()?;
        let tls = ureq::tls::TlsConfig::builder()
            .root_certs(ureq::tls::RootCerts::new_with_certs(&roots))
            .build();
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .https_only(!opts.plain_http)
            .tls_config(tls)
            .timeout_connect(Some(stall.interval.min(Duration::from_secs(15))))
            // One stall window for the response headers of each try; `send` shares one window
            // between all the tries of a request.
            .timeout_recv_response(Some(stall.interval))
            .timeout_per_read(Some(stall.interval))
            .timeout_per_write(Some(stall.interval))
            .max_redirects(5)
            // A redirect never carries the Authorization header (ureq's default, stated here
            // because credentials must not follow a registry's redirect to another host).
            .redirect_auth_headers(ureq::config::RedirectAuthHeaders::Never)
            .user_agent(format!("airlock/{}", env!("CARGO_PKG_VERSION")))
            .build();
        let scheme = if opts.plain_http { "http" } else { "https" };
        let base = format!("{scheme}://{}", reference.registry);
        let origin = origin(&base).ok_or_else(|| {
            Error::Usage(format!(
                "{reference}: {base} is not a registry address airlock can reach"
            ))
        })?;
        let reg = Registry {
            agent: config.new_agent(),
            base,
            origin,
            plain_http: opts.plain_http,
            stall,
            reference: reference.clone(),
            creds: auth::credentials_for(&reference.registry)?,
            push,
            ca_file: opts.ca_file.is_some(),
            authorization: Mutex::new(None),
        };
        reg.authenticate()?;
        Ok(reg)
    }

    fn registry_error(&self, reason: impl Into<String>) -> Error {
        self.failed(reason)
    }

    /// The error for a request to this registry that failed (unreachable, an error answer, a
    /// broken transfer); its hint says to retry the push or the unpack this connection is for.
    pub fn failed(&self, reason: impl Into<String>) -> Error {
        Error::Registry {
            registry: self.reference.registry.clone(),
            reason: reason.into(),
            next: if self.push {
                RegistryNext::RetryPush
            } else {
                RegistryNext::RetryUnpack
            },
        }
    }

    fn auth_error(&self, reason: impl Into<String>) -> Error {
        Error::RegistryAuth {
            registry: self.reference.registry.clone(),
            reason: reason.into(),
            creds_from: auth::describe_source(&self.reference.registry),
            helper: auth::helper_for(&self.reference.registry).map(|h| h.program()),
        }
    }

    fn transport_error(&self, e: &ureq::Error) -> Error {
        self.registry_error(match e {
            ureq::Error::ConnectionFailed | ureq::Error::HostNotFound => {
                format!("cannot connect ({e})")
            }
            ureq::Error::Io(io) if io.kind() == std::io::ErrorKind::ConnectionRefused => {
                format!("cannot connect: connection refused ({io})")
            }
            ureq::Error::Timeout(t) => self.stalled(&format!("{t} timed out")),
            _ if e.to_string().contains("certificate") => format!(
                "TLS: {e} (the registry's certificate does not verify against the system roots{}; a site CA goes in --ca-file)",
                if self.ca_file { " and --ca-file" } else { "" }
            ),
            _ => e.to_string(),
        })
    }

    /// The reason for a request that ran out of its stall window (`what`: ureq's name of
    /// the phase).
    fn stalled(&self, what: &str) -> String {
        format!(
            "the registry stalled: no complete answer within the {} s stall window ({what}); {STALL_ENV}=BYTES/SECONDS sets the window",
            self.stall.interval.as_secs()
        )
    }

    /// `scheme://host[:port]/v2/REPO/` + `tail`.
    fn repo_url(&self, tail: &str) -> String {
        format!("{}/v2/{}/{tail}", self.base, self.reference.repository)
    }

    /// Sends one request (no retries), with the current authorization only if `url` is on the
    /// registry's origin: an upload `Location` elsewhere gets none.
    fn send_once<B: ureq::AsSendBody>(
        &self,
        method: &Method,
        url: &str,
        headers: &[(&str, String)],
        body: B,
    ) -> std::result::Result<http::Response<Body>, ureq::Error> {
        self.send_within(method, url, headers, body, self.stall.interval)
    }

    /// [`Self::send_once`] with `left` for the response headers (what remains of the
    /// request's stall window).
    fn send_within<B: ureq::AsSendBody>(
        &self,
        method: &Method,
        url: &str,
        headers: &[(&str, String)],
        body: B,
        left: Duration,
    ) -> std::result::Result<http::Response<Body>, ureq::Error> {
        let mut req = http::Request::builder().method(method.clone()).uri(url);
        if same_origin(&self.origin, url)
            && let Some(a) = self.authorization.lock().expect("not poisoned").clone()
        {
            req = req.header("Authorization", a);
        }
        for (k, v) in headers {
            req = req.header(*k, v.as_str());
        }
        let req = req.body(body).map_err(ureq::Error::Http)?;
        let req = self
            .agent
            .configure_request(req)
            .timeout_recv_response(Some(left))
            .build();
        self.agent.run(req)
    }

    /// Whether another try fits in the request's window (with its backoff first).
    fn retry_within(&self, deadline: Instant, attempt: u32) -> bool {
        let pause = Duration::from_millis(250 << attempt.min(4));
        attempt < TRIES && Instant::now() + pause < deadline
    }

    /// Sends a replayable request: retried on transient failures, re-authenticated once on 401.
    fn send(
        &self,
        method: Method,
        url: &str,
        headers: &[(&str, String)],
        body: &[u8],
    ) -> Result<http::Response<Body>> {
        let mut reauthed = false;
        let mut attempt = 0;
        let deadline = Instant::now() + self.stall.interval;
        loop {
            attempt += 1;
            let left = deadline.saturating_duration_since(Instant::now());
            match self.send_within(&method, url, headers, body, left) {
                Ok(resp)
                    if resp.status() == StatusCode::UNAUTHORIZED
                        && !reauthed
                        && same_origin(&self.origin, url) =>
                {
                    reauthed = true;
                    self.authenticate()?;
                }
                Ok(resp)
                    if transient_status(resp.status()) && self.retry_within(deadline, attempt) =>
                {
                    backoff(attempt)
                }
                Ok(resp) => return Ok(resp),
                Err(e) if transient(&e) && self.retry_within(deadline, attempt) => backoff(attempt),
                Err(e) => return Err(self.transport_error(&e)),
            }
        }
    }

    /// Pings `/v2/` and, when the registry challenges, obtains the authorization it asks for.
    fn authenticate(&self) -> Result<()> {
        let ping = format!("{}/v2/", self.base);
        let mut attempt = 0;
        let deadline = Instant::now() + self.stall.interval;
        let resp = loop {
            attempt += 1;
            *self.authorization.lock().expect("not poisoned") = None;
            let left = deadline.saturating_duration_since(Instant::now());
            match self.send_within(&Method::GET, &ping, &[], (), left) {
                Ok(r) if transient_status(r.status()) && self.retry_within(deadline, attempt) => {
                    backoff(attempt)
                }
                Ok(r) => break r,
                Err(e) if transient(&e) && self.retry_within(deadline, attempt) => backoff(attempt),
                Err(e) => return Err(self.transport_error(&e)),
            }
        };
        let status = resp.status();
        if status.is_success() {
            return Ok(());
        }
        if status != StatusCode::UNAUTHORIZED {
            return Err(self.registry_error(format!(
                "{ping} answered {status}: not an OCI registry, or not at this address"
            )));
        }
        let challenge = resp
            .headers()
            .get("www-authenticate")
            .and_then(|h| h.to_str().ok())
            .and_then(auth::parse_challenge)
            .ok_or_else(|| {
                self.auth_error("it answered 401 without a Basic or Bearer challenge")
            })?;
        let authorization = match challenge {
            Challenge::Basic => match &self.creds {
                Some(c) => c.basic(),
                None => return Err(self.auth_error("it asks for credentials and none were found")),
            },
            Challenge::Bearer { realm, service } => self.token(&realm, service.as_deref())?,
        };
        *self.authorization.lock().expect("not poisoned") = Some(authorization);
        let check = self
            .send_once(&Method::GET, &ping, &[], ())
            .map_err(|e| self.transport_error(&e))?;
        if check.status() == StatusCode::UNAUTHORIZED || check.status() == StatusCode::FORBIDDEN {
            return Err(self.auth_error(match &self.creds {
                Some(c) => format!("user {:?}: {}", c.username, check.status()),
                None => format!("anonymous access: {}", check.status()),
            }));
        }
        Ok(())
    }

    /// The Bearer token flow (distribution's token spec): GET the realm with the scope and
    /// Basic credentials, if any (refused for a realm on plain http, see
    /// [`realm_may_get_credentials`]).
    fn token(&self, realm: &str, service: Option<&str>) -> Result<String> {
        let scope = format!(
            "repository:{}:{}",
            self.reference.repository,
            if self.push { "pull,push" } else { "pull" }
        );
        let mut req = self.agent.get(realm).query("scope", &scope);
        if let Some(s) = service {
            req = req.query("service", s);
        }
        if let Some(c) = &self.creds {
            realm_may_get_credentials(realm, &self.origin, self.plain_http)
                .map_err(|why| self.auth_error(why.to_string()))?;
            req = req.header("Authorization", c.basic());
        }
        let mut resp = req.call().map_err(|e| self.transport_error(&e))?;
        let status = resp.status();
        if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
            return Err(self.auth_error(format!(
                "the token service {realm} answered {status}: {}",
                body_text(&mut resp, self.stall)
            )));
        }
        if !status.is_success() {
            return Err(self.registry_error(format!("the token service {realm} answered {status}")));
        }
        let body = self
            .read_body(&mut resp, 1 << 20, "the token service's answer")?
            .ok_or_else(|| {
                self.registry_error("the token service's answer is larger than 1 MiB")
            })?;
        let token = parse_token_answer(&body)
            .map_err(|why| self.registry_error(format!("the token service's answer {why}")))?;
        Ok(format!("Bearer {token}"))
    }

    /// Reads a response body of at most `cap` bytes (its `Content-Length` checked first, then
    /// a byte more than `cap` read at most), under the stall deadline. `Ok(None)`: larger.
    fn read_body(
        &self,
        resp: &mut http::Response<Body>,
        cap: u64,
        what: &str,
    ) -> Result<Option<Vec<u8>>> {
        let declared = resp
            .headers()
            .get("content-length")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok());
        if declared.is_some_and(|n| n > cap) {
            return Ok(None);
        }
        let mut out = Vec::with_capacity(declared.unwrap_or(0).min(cap).min(1 << 20) as usize);
        let reader = resp.body_mut().with_config().limit(u64::MAX).reader();
        StallReader {
            inner: reader,
            pace: Pace::new(self.stall),
        }
        .take(cap + 1)
        .read_to_end(&mut out)
        .map_err(|e| self.registry_error(format!("reading {what}: {e}")))?;
        Ok((out.len() as u64 <= cap).then_some(out))
    }

    fn unexpected(&self, what: &str, resp: &mut http::Response<Body>) -> Error {
        let status = resp.status();
        let text = body_text(resp, self.stall);
        if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
            return self.auth_error(format!("{what}: {status} {text}"));
        }
        self.registry_error(format!("{what}: {status} {text}"))
    }

    /// The size of blob `digest` (`sha256:HEX`) if the repository has it.
    pub fn blob_size(&self, digest: &str) -> Result<Option<u64>> {
        let url = self.repo_url(&format!("blobs/{digest}"));
        let mut resp = self.send(Method::HEAD, &url, &[], &[])?;
        match resp.status() {
            s if s.is_success() => Ok(Some(
                resp.headers()
                    .get("content-length")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0),
            )),
            StatusCode::NOT_FOUND => Ok(None),
            _ => Err(self.unexpected(&format!("HEAD blob {digest}"), &mut resp)),
        }
    }

    /// Reads blob `digest` whole into memory: at most `size` bytes, the size its descriptor
    /// gives (or, where none does, a limit), never a byte more than `size` + 1 from the wire.
    pub fn blob_bytes(&self, digest: &str, size: u64) -> Result<Option<Vec<u8>>> {
        let url = self.repo_url(&format!("blobs/{digest}"));
        let mut resp = self.send(Method::GET, &url, &[], &[])?;
        match resp.status() {
            s if s.is_success() => {}
            StatusCode::NOT_FOUND => return Ok(None),
            _ => return Err(self.unexpected(&format!("GET blob {digest}"), &mut resp)),
        }
        let what = format!("blob {digest}");
        match self.read_body(&mut resp, size, &what)? {
            Some(bytes) => Ok(Some(bytes)),
            None => Err(Error::Artifact {
                reference: self.reference.to_string(),
                reason: format!("blob {digest} holds more than the {size} bytes expected of it"),
            }),
        }
    }

    /// Opens blob `digest` for reading from byte `offset` (a resumed download). Returns the
    /// reader and how many leading bytes of it to skip (a registry that ignores `Range`
    /// answers from the start).
    pub fn open_blob(&self, digest: &str, offset: u64) -> Result<(Box<dyn Read + Send>, u64)> {
        let url = self.repo_url(&format!("blobs/{digest}"));
        let headers: Vec<(&str, String)> = if offset > 0 {
            vec![("Range", format!("bytes={offset}-"))]
        } else {
            vec![]
        };
        let mut resp = self.send(Method::GET, &url, &headers, &[])?;
        let skip = match resp.status() {
            s @ (StatusCode::PARTIAL_CONTENT | StatusCode::OK) => range_skip(
                s == StatusCode::PARTIAL_CONTENT,
                resp.headers()
                    .get("content-range")
                    .and_then(|v| v.to_str().ok()),
                offset,
            )
            .map_err(|why| self.registry_error(format!("GET blob {digest}: {why}")))?,
            StatusCode::NOT_FOUND => {
                return Err(Error::Artifact {
                    reference: self.reference.to_string(),
                    reason: format!(
                        "the repository has no blob {digest}, which the signed manifest lists"
                    ),
                });
            }
            _ => return Err(self.unexpected(&format!("GET blob {digest}"), &mut resp)),
        };
        let reader = StallReader {
            inner: resp.into_body().into_with_config().limit(u64::MAX).reader(),
            pace: Pace::new(self.stall),
        };
        Ok((Box::new(reader), skip))
    }

    /// Starts an upload session; returns its absolute URL.
    fn start_upload(&self) -> Result<String> {
        let url = self.repo_url("blobs/uploads/");
        let mut resp = self.send(Method::POST, &url, &[("Content-Length", "0".into())], &[])?;
        if resp.status() != StatusCode::ACCEPTED {
            return Err(self.unexpected("starting a blob upload", &mut resp));
        }
        let loc = resp
            .headers()
            .get("location")
            .and_then(|l| l.to_str().ok())
            .ok_or_else(|| self.registry_error("a blob upload started without a Location"))?;
        Ok(
            if loc.starts_with("http://") || loc.starts_with("https://") {
                loc.to_string()
            } else {
                format!("{}{loc}", self.base)
            },
        )
    }

    fn upload_url(location: &str, digest: &str) -> String {
        let sep = if location.contains('?') { '&' } else { '?' };
        format!("{location}{sep}digest={digest}")
    }

    /// Uploads a small blob from memory (config, the airlock manifest and signature).
    pub fn put_blob_bytes(&self, digest: &str, bytes: &[u8]) -> Result<()> {
        let location = self.start_upload()?;
        let url = Self::upload_url(&location, digest);
        let headers = [("Content-Type", "application/octet-stream".to_string())];
        let mut resp = self.send(Method::PUT, &url, &headers, bytes)?;
        if resp.status() != StatusCode::CREATED {
            return Err(self.unexpected(&format!("uploading blob {digest}"), &mut resp));
        }
        Ok(())
    }

    /// Uploads a blob of `size` bytes streamed from `reader` in one PUT (never held in
    /// memory). The registry checks the content against `digest` before it keeps it.
    pub fn put_blob_stream(
        &self,
        digest: &str,
        size: u64,
        reader: impl Read + 'static,
    ) -> Result<()> {
        let location = self.start_upload()?;
        let url = Self::upload_url(&location, digest);
        let headers = [
            ("Content-Type", "application/octet-stream".to_string()),
            ("Content-Length", size.to_string()),
        ];
        let reader = StallUpload {
            inner: reader,
            pace: Pace::new(self.stall),
            sent: None,
        };
        let mut resp = self
            .send_once(
                &Method::PUT,
                &url,
                &headers,
                SendBody::from_owned_reader(reader),
            )
            .map_err(|e| self.transport_error(&e))?;
        if resp.status() != StatusCode::CREATED {
            return Err(self.unexpected(&format!("uploading blob {digest}"), &mut resp));
        }
        Ok(())
    }

    /// Fetches the image manifest the reference names: its bytes and media type, held to the
    /// reference's pin and to the digest the registry states ([`check_manifest_digest`]).
    pub fn get_manifest(&self) -> Result<Option<(Vec<u8>, String)>> {
        let url = self.repo_url(&format!("manifests/{}", self.reference.reference));
        let mut resp = self.send(
            Method::GET,
            &url,
            &[("Accept", OCI_MANIFEST.to_string())],
            &[],
        )?;
        match resp.status() {
            s if s.is_success() => {}
            StatusCode::NOT_FOUND => return Ok(None),
            _ => return Err(self.unexpected("GET manifest", &mut resp)),
        }
        let media_type = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let stated = resp
            .headers()
            .get("docker-content-digest")
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
        let artifact = |reason: String| Error::Artifact {
            reference: self.reference.to_string(),
            reason,
        };
        let out = self
            .read_body(&mut resp, MAX_OCI_MANIFEST_BYTES, "the manifest")?
            .ok_or_else(|| {
                artifact(format!(
                    "its manifest is larger than {MAX_OCI_MANIFEST_BYTES} bytes"
                ))
            })?;
        let pin = self
            .reference
            .is_digest()
            .then_some(self.reference.reference.as_str());
        check_manifest_digest(&out, pin, stated.as_deref())
            .map_err(|why| artifact(why.to_string()))?;
        Ok(Some((out, media_type)))
    }

    /// Puts the image manifest under the reference's tag.
    pub fn put_manifest(&self, bytes: &[u8]) -> Result<()> {
        let url = self.repo_url(&format!("manifests/{}", self.reference.reference));
        let mut resp = self.send(
            Method::PUT,
            &url,
            &[("Content-Type", OCI_MANIFEST.to_string())],
            bytes,
        )?;
        if resp.status() != StatusCode::CREATED {
            return Err(self.unexpected("putting the manifest", &mut resp));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_stay_on_the_registry_origin() {
        let reg = origin("https://Registry.site:5000").unwrap();
        assert!(same_origin(
            &reg,
            "https://registry.site:5000/v2/m/blobs/uploads/x?a=b"
        ));
        for other in [
            "https://registry.site:5001/upload",
            "https://evil.site:5000/upload",
            "http://registry.site:5000/upload",
            "https://registry.site/upload",
            "https://registry.site:5000.evil.site/upload",
            "https://registry.site:5000@evil.site/upload",
            "/v2/relative",
            "ftp://registry.site:5000/",
        ] {
            assert!(!same_origin(&reg, other), "{other}");
        }
        let default_port = origin("https://registry.site").unwrap();
        assert!(same_origin(&default_port, "https://registry.site:443/v2/"));
        let plain = origin("http://registry.site").unwrap();
        assert!(same_origin(&plain, "http://registry.site:80/v2/"));
    }

    #[test]
    fn a_token_service_on_plain_http_gets_credentials_only_on_the_registry_host_when_asked() {
        let reg = origin("http://registry.site:5000").unwrap();
        assert!(realm_may_get_credentials("https://auth.other/token", &reg, false).is_ok());
        assert!(realm_may_get_credentials("https://auth.other/token", &reg, true).is_ok());
        assert!(realm_may_get_credentials("http://registry.site:5001/token", &reg, true).is_ok());
        let elsewhere = realm_may_get_credentials("http://auth.other/token", &reg, true);
        assert!(elsewhere.unwrap_err().to_string().contains("another host"));
        assert!(realm_may_get_credentials("http://registry.site:5001/token", &reg, false).is_err());
        assert!(realm_may_get_credentials("file:///etc/passwd", &reg, true).is_err());
        assert!(realm_may_get_credentials("token", &reg, true).is_err());
    }

    #[test]
    fn a_manifest_is_held_to_its_pin_and_to_the_stated_digest() {
        use sha2::{Digest, Sha256, Sha512};
        let bytes = b"{\"schemaVersion\":2}";
        let d256 = format!("sha256:{}", hex::encode(Sha256::digest(bytes)));
        let d512 = format!("sha512:{}", hex::encode(Sha512::digest(bytes)));
        let other = format!("sha256:{}", "0".repeat(64));
        assert!(check_manifest_digest(bytes, None, None).is_ok());
        assert!(check_manifest_digest(bytes, Some(&d256), Some(&d256)).is_ok());
        // One case rule (hexdigest): an upper-case digest is not a digest.
        let upper = format!("sha256:{}", d256[7..].to_uppercase());
        assert!(check_manifest_digest(bytes, None, Some(&upper)).is_err());
        assert!(check_manifest_digest(bytes, None, Some(&d512)).is_ok());
        assert!(check_manifest_digest(bytes, None, Some("blake3:abcd")).is_ok());
        let pinned = check_manifest_digest(bytes, Some(&other), Some(&other))
            .unwrap_err()
            .to_string();
        assert!(pinned.contains("not the pinned version"), "{pinned}");
        let stated = check_manifest_digest(bytes, None, Some(&other))
            .unwrap_err()
            .to_string();
        assert!(stated.contains("Docker-Content-Digest"), "{stated}");
        for malformed in ["sha256:12", "sha256:", "nonsense", ":x", "sha512:zz"] {
            assert!(
                check_manifest_digest(bytes, None, Some(malformed)).is_err(),
                "{malformed}"
            );
        }
    }

    #[test]
    fn range_answers_must_start_at_or_before_the_offset() {
        assert_eq!(range_skip(false, None, 100), Ok(100));
        assert_eq!(range_skip(true, Some("bytes 100-199/200"), 100), Ok(0));
        assert_eq!(range_skip(true, Some("bytes 40-199/*"), 100), Ok(60));
        assert_eq!(range_skip(true, None, 100), Ok(0));
        for bad in [
            "bytes 101-199/200",
            "bytes 100-99/200",
            "bytes -199/200",
            "bytes 1-2",
            "items 0-1/2",
            "bytes +1-2/3",
            "bytes 99999999999999999999999-1/2",
        ] {
            assert!(range_skip(true, Some(bad), 100).is_err(), "{bad}");
        }
    }

    #[test]
    fn token_answers_and_error_bodies() {
        assert_eq!(parse_token_answer(br#"{"token":"abc"}"#), Ok("abc".into()));
        assert_eq!(
            parse_token_answer(br#"{"token":"","access_token":"xyz"}"#),
            Ok("xyz".into())
        );
        assert!(parse_token_answer(br#"{"token":"a\r\nX-Evil: 1"}"#).is_err());
        assert!(parse_token_answer(br#"{"token":7}"#).is_err());
        assert!(parse_token_answer(b"<html>").is_err());
        assert_eq!(
            error_text(r#"{"errors":[{"code":"DENIED","message":"no"}]}"#),
            "DENIED: no"
        );
        assert_eq!(error_text("bad\u{1b}[2Jthing\n"), "bad\\x1b[2Jthing");
        // Bidi overrides and zero-width characters passed before (issue 36 item 4): the rest
        // of the line showed reversed.
        assert_eq!(
            error_text("denied \u{202e}txt.exe\u{200b}\u{2066}"),
            "denied \\u{202e}txt.exe\\u{200b}\\u{2066}"
        );
        assert_eq!(
            error_text(r#"{"errors":[{"code":"DENIED","message":"a\u001b]52;c;eA==\u0007"}]}"#),
            "DENIED: a\\x1b]52;c;eA==\\x07"
        );
        assert_eq!(error_text(&"x".repeat(1000)).len(), 200);
    }

    #[test]
    fn stall_deadline_counts_bytes_per_window_of_waiting() {
        assert_eq!(Stall::parse("32768/60"), Ok(Stall::default()));
        for bad in ["", "1", "0/60", "1/0", "x/1", "1/100000", "-1/5"] {
            assert!(Stall::parse(bad).is_err(), "{bad}");
        }
        let stall = Stall::parse("1000/10").unwrap();
        let s = Duration::from_secs;
        // A drip: a byte per 4 s is refused once a whole window has passed.
        let mut p = Pace::new(stall);
        assert!(p.note(1, s(4)).is_ok());
        assert!(p.note(1, s(4)).is_ok());
        let e = p.note(1, s(4)).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
        assert!(e.to_string().contains("stalled"), "{e}");
        // Enough bytes per window, however slowly each arrives, passes window after window.
        let mut p = Pace::new(stall);
        for _ in 0..100 {
            assert!(p.note(600, s(6)).is_ok());
        }
        // A fast burst does not buy a later drip more than the window it fell in.
        let mut p = Pace::new(stall);
        assert!(p.note(1 << 20, s(1)).is_ok());
        assert!(p.note(1, s(9)).is_ok());
        assert!(p.note(1, s(9)).is_ok());
        assert!(p.note(1, s(2)).is_err());
    }

    #[test]
    fn a_stalled_body_is_cut_off_through_the_reader() {
        /// Gives one byte per read.
        struct Drip;
        impl Read for Drip {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                buf[0] = b'x';
                Ok(1)
            }
        }
        // The reader measures real time; a zero-second window makes every read a whole one.
        let stall = Stall {
            min_bytes: 2,
            interval: Duration::ZERO,
        };
        let mut r = StallReader {
            inner: Drip,
            pace: Pace::new(stall),
        };
        let mut out = Vec::new();
        let e = (&mut r).take(1 << 20).read_to_end(&mut out).unwrap_err();
        assert!(e.to_string().contains("stalled"), "{e}");
        assert!(out.len() <= 1);
        let mut up = StallUpload {
            inner: Drip,
            pace: Pace::new(stall),
            sent: None,
        };
        let mut buf = [0u8; 8];
        assert!(up.read(&mut buf).is_ok());
        assert!(
            up.read(&mut buf)
                .unwrap_err()
                .to_string()
                .contains("stalled")
        );
    }
}
