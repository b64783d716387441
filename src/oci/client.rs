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

use std::io::Read;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use ureq::http::{self, Method, StatusCode};
use ureq::{Body, SendBody};

use super::auth::{self, Challenge, Credentials};
use super::reference::Reference;
use crate::error::{Error, Result};

/// How to reach the registry.
#[derive(Clone, Debug, Default)]
pub struct RegistryOptions {
    /// Speak plain HTTP (only when asked: `--plain-http`).
    pub plain_http: bool,
    /// A PEM file of extra CA certificates (a site CA), trusted beside the system roots.
    pub ca_file: Option<PathBuf>,
}

/// Largest image manifest read.
pub const MAX_OCI_MANIFEST_BYTES: u64 = 4 << 20;
/// Tries for an idempotent request.
const TRIES: u32 = 4;

/// A connection to one repository of one registry, authenticated.
pub struct Registry {
    agent: ureq::Agent,
    base: String,
    /// The reference it was opened for.
    pub reference: Reference,
    creds: Option<Credentials>,
    push: bool,
    ca_file: bool,
    authorization: Mutex<Option<String>>,
}

pub use super::modelpack::OCI_MANIFEST;

/// The most read of a `--ca-file` (a bundle of a few hundred PEM certificates is under 1 MiB).
const MAX_CA_FILE_BYTES: u64 = 4 << 20;

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

/// Reads a short error text from a response body (bounded), for messages.
fn body_text(resp: &mut http::Response<Body>) -> String {
    let text = resp
        .body_mut()
        .with_config()
        .limit(4096)
        .read_to_string()
        .unwrap_or_default();
    // distribution's JSON errors: {"errors":[{"code":..,"message":..}]}
    if let Ok(v) = serde_json::from_str::<serde_json::Value>(&text)
        && let Some(first) = v.get("errors").and_then(|e| e.get(0))
    {
        let code = first.get("code").and_then(|c| c.as_str()).unwrap_or("");
        let msg = first.get("message").and_then(|c| c.as_str()).unwrap_or("");
        return format!("{code}: {msg}");
    }
    text.chars()
        .take(200)
        .collect::<String>()
        .trim()
        .to_string()
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
        let tls = ureq::tls::TlsConfig::builder()
            .root_certs(ureq::tls::RootCerts::new_with_certs(&roots))
            .build();
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .https_only(!opts.plain_http)
            .tls_config(tls)
            .timeout_connect(Some(Duration::from_secs(15)))
            .timeout_recv_response(Some(Duration::from_secs(120)))
            .timeout_per_read(Some(Duration::from_secs(60)))
            .timeout_per_write(Some(Duration::from_secs(60)))
            .max_redirects(5)
            .user_agent(format!("airlock/{}", env!("CARGO_PKG_VERSION")))
            .build();
        let scheme = if opts.plain_http { "http" } else { "https" };
        let reg = Registry {
            agent: config.new_agent(),
            base: format!("{scheme}://{}", reference.registry),
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
        Error::Registry {
            registry: self.reference.registry.clone(),
            reason: reason.into(),
        }
    }

    fn auth_error(&self, reason: impl Into<String>) -> Error {
        Error::RegistryAuth {
            registry: self.reference.registry.clone(),
            reason: reason.into(),
            creds_from: auth::describe_source(),
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
            _ if e.to_string().contains("certificate") => format!(
                "TLS: {e} (the registry's certificate does not verify against the system roots{}; a site CA goes in --ca-file)",
                if self.ca_file { " and --ca-file" } else { "" }
            ),
            _ => e.to_string(),
        })
    }

    /// `scheme://host[:port]/v2/REPO/` + `tail`.
    fn repo_url(&self, tail: &str) -> String {
        format!("{}/v2/{}/{tail}", self.base, self.reference.repository)
    }

    /// Sends one request with the current authorization (no retries).
    fn send_once<B: ureq::AsSendBody>(
        &self,
        method: &Method,
        url: &str,
        headers: &[(&str, String)],
        body: B,
    ) -> std::result::Result<http::Response<Body>, ureq::Error> {
        let mut req = http::Request::builder().method(method.clone()).uri(url);
        if let Some(a) = self.authorization.lock().expect("not poisoned").clone() {
            req = req.header("Authorization", a);
        }
        for (k, v) in headers {
            req = req.header(*k, v.as_str());
        }
        let req = req.body(body).map_err(ureq::Error::Http)?;
        self.agent.run(req)
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
        loop {
            attempt += 1;
            match self.send_once(&method, url, headers, body) {
                Ok(resp) if resp.status() == StatusCode::UNAUTHORIZED && !reauthed => {
                    reauthed = true;
                    self.authenticate()?;
                }
                Ok(resp) if transient_status(resp.status()) && attempt < TRIES => backoff(attempt),
                Ok(resp) => return Ok(resp),
                Err(e) if transient(&e) && attempt < TRIES => backoff(attempt),
                Err(e) => return Err(self.transport_error(&e)),
            }
        }
    }

    /// Pings `/v2/` and, when the registry challenges, obtains the authorization it asks for.
    fn authenticate(&self) -> Result<()> {
        let ping = format!("{}/v2/", self.base);
        let mut attempt = 0;
        let resp = loop {
            attempt += 1;
            *self.authorization.lock().expect("not poisoned") = None;
            match self.send_once(&Method::GET, &ping, &[], ()) {
                Ok(r) if transient_status(r.status()) && attempt < TRIES => backoff(attempt),
                Ok(r) => break r,
                Err(e) if transient(&e) && attempt < TRIES => backoff(attempt),
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
    /// Basic credentials, if any.
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
            req = req.header("Authorization", c.basic());
        }
        let mut resp = req.call().map_err(|e| self.transport_error(&e))?;
        let status = resp.status();
        if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
            return Err(self.auth_error(format!(
                "the token service {realm} answered {status}: {}",
                body_text(&mut resp)
            )));
        }
        if !status.is_success() {
            return Err(self.registry_error(format!("the token service {realm} answered {status}")));
        }
        let body = resp
            .body_mut()
            .with_config()
            .limit(1 << 20)
            .read_to_vec()
            .map_err(|e| self.registry_error(format!("the token service's answer: {e}")))?;
        let doc: serde_json::Value = serde_json::from_slice(&body)
            .map_err(|e| self.registry_error(format!("the token service's answer: {e}")))?;
        let token = doc
            .get("token")
            .or_else(|| doc.get("access_token"))
            .and_then(|t| t.as_str())
            .ok_or_else(|| self.registry_error("the token service's answer holds no token"))?;
        Ok(format!("Bearer {token}"))
    }

    fn unexpected(&self, what: &str, resp: &mut http::Response<Body>) -> Error {
        let status = resp.status();
        let text = body_text(resp);
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

    /// Reads blob `digest` whole into memory, refusing more than `cap` bytes.
    pub fn blob_bytes(&self, digest: &str, cap: u64) -> Result<Option<Vec<u8>>> {
        let url = self.repo_url(&format!("blobs/{digest}"));
        let mut resp = self.send(Method::GET, &url, &[], &[])?;
        match resp.status() {
            s if s.is_success() => {}
            StatusCode::NOT_FOUND => return Ok(None),
            _ => return Err(self.unexpected(&format!("GET blob {digest}"), &mut resp)),
        }
        let mut out = Vec::new();
        resp.body_mut()
            .with_config()
            .limit(u64::MAX)
            .reader()
            .take(cap + 1)
            .read_to_end(&mut out)
            .map_err(|e| self.registry_error(format!("reading blob {digest}: {e}")))?;
        if out.len() as u64 > cap {
            return Err(Error::Artifact {
                reference: self.reference.to_string(),
                reason: format!("blob {digest} is larger than the {cap}-byte limit"),
            });
        }
        Ok(Some(out))
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
            StatusCode::PARTIAL_CONTENT => 0,
            StatusCode::OK => offset,
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
        let reader = resp.into_body().into_with_config().limit(u64::MAX).reader();
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

    /// Fetches the image manifest the reference names: its bytes and media type.
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
        let mut out = Vec::new();
        resp.body_mut()
            .with_config()
            .limit(u64::MAX)
            .reader()
            .take(MAX_OCI_MANIFEST_BYTES + 1)
            .read_to_end(&mut out)
            .map_err(|e| self.registry_error(format!("reading the manifest: {e}")))?;
        if out.len() as u64 > MAX_OCI_MANIFEST_BYTES {
            return Err(Error::Artifact {
                reference: self.reference.to_string(),
                reason: format!("its manifest is larger than {MAX_OCI_MANIFEST_BYTES} bytes"),
            });
        }
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
