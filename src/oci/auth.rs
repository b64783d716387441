//! Registry credentials and challenges, as `docker login` leaves them and distribution, Harbor
//! and zot ask for them.
//!
//! Credentials come from the docker client's config file: `$DOCKER_CONFIG/config.json`, else
//! `~/.docker/config.json`, its `auths` entry for the registry (keyed `HOST[:PORT]`, with or
//! without `https://` and a `/v1/` or `/v2/` path), holding `auth` (base64 of `USER:PASSWORD`)
//! or `username` and `password`. Credential helpers (`credsStore`, `credHelpers`) run
//! programs and are not used; the error says where credentials were looked for.

use std::path::PathBuf;

use base64::Engine;

use crate::error::{Error, Result};
use crate::fsio::{Follow, OpenError, read_capped};

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
pub fn config_path() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("DOCKER_CONFIG").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(dir).join("config.json"));
    }
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(|h| PathBuf::from(h).join(".docker").join("config.json"))
}

/// Where credentials are read from, for messages.
pub fn describe_source() -> String {
    match config_path() {
        Some(p) => format!(
            "{} (the `auths` entry for the registry; DOCKER_CONFIG names its directory)",
            p.display()
        ),
        None => "the docker config (set DOCKER_CONFIG or HOME)".into(),
    }
}

/// The key an `auths` entry stands for: host and port, without scheme or path.
fn normalize(key: &str) -> &str {
    let k = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    k.split('/').next().unwrap_or(k)
}

/// Finds the credentials for `registry` (`HOST[:PORT]`). `Ok(None)` when the file or the entry
/// does not exist; an unreadable or malformed file is an error naming it.
pub fn credentials_for(registry: &str) -> Result<Option<Credentials>> {
    let Some(path) = config_path() else {
        return Ok(None);
    };
    let bytes = match read_capped(&path, MAX_CONFIG_BYTES, Follow::Final) {
        Ok(b) => b,
        Err(OpenError::NotFound) => return Ok(None),
        Err(e @ (OpenError::Io(_) | OpenError::Link | OpenError::NotRegular(_))) => {
            return Err(Error::io(&path, e.into()));
        }
        Err(OpenError::TooLarge(_)) => {
            return Err(Error::io(
                &path,
                std::io::Error::other(format!("larger than {MAX_CONFIG_BYTES} bytes")),
            ));
        }
    };
    parse_config(&bytes, registry).map_err(|why| {
        Error::io(
            &path,
            std::io::Error::new(std::io::ErrorKind::InvalidData, why),
        )
    })
}

/// The credentials for `registry` in a docker config file's bytes.
pub fn parse_config(
    bytes: &[u8],
    registry: &str,
) -> std::result::Result<Option<Credentials>, String> {
    let doc: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| format!("is not valid JSON: {e}"))?;
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
            .map_err(|_| format!("auths entry {key:?}: `auth` is not base64"))?;
        let text = String::from_utf8(raw)
            .map_err(|_| format!("auths entry {key:?}: `auth` is not UTF-8"))?;
        let (user, pass) = text
            .split_once(':')
            .ok_or_else(|| format!("auths entry {key:?}: `auth` is not USER:PASSWORD"))?;
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
        assert!(parse_config(b"{", "x").is_err());
        assert!(parse_config(br#"{"auths":{"x":{"auth":"!!"}}}"#, "x").is_err());
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
