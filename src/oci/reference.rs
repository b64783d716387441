//! The `oci://HOST[:PORT]/REPO:TAG` reference form (also `@sha256:HEX` for a digest).

use crate::error::{Error, Result};
use crate::hexdigest;

/// The scheme prefix that marks a registry reference on the command line.
pub(crate) const SCHEME: &str = "oci://";

/// A parsed `oci://` reference.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reference {
    /// `HOST[:PORT]`, as given.
    pub registry: String,
    /// The repository path, `a/b/c`.
    pub repository: String,
    /// The tag or `sha256:HEX` digest.
    pub reference: String,
}

impl std::fmt::Display for Reference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let sep = if self.is_digest() { '@' } else { ':' };
        write!(
            f,
            "{SCHEME}{}/{}{sep}{}",
            self.registry, self.repository, self.reference
        )
    }
}

/// Whether a command-line argument names a registry rather than a path.
pub fn is_oci(arg: &str) -> bool {
    arg.starts_with(SCHEME)
}

fn is_component(c: &str) -> bool {
    // distribution's path-component grammar: [a-z0-9]+ separated by one of . _ __ -+
    let b = c.as_bytes();
    !b.is_empty()
        && b[0].is_ascii_lowercase() | b[0].is_ascii_digit()
        && b[b.len() - 1].is_ascii_lowercase() | b[b.len() - 1].is_ascii_digit()
        && b.iter()
            .all(|&x| x.is_ascii_lowercase() || x.is_ascii_digit() || b"._-".contains(&x))
}

fn is_tag(t: &str) -> bool {
    let b = t.as_bytes();
    (1..=128).contains(&b.len())
        && (b[0].is_ascii_alphanumeric() || b[0] == b'_')
        && b.iter()
            .all(|&x| x.is_ascii_alphanumeric() || b"._-".contains(&x))
}

fn is_host(h: &str) -> bool {
    let (name, port) = match h.rsplit_once(':') {
        Some((n, p)) => (n, Some(p)),
        None => (h, None),
    };
    !name.is_empty()
        && name
            .bytes()
            .all(|x| x.is_ascii_alphanumeric() || b".-".contains(&x))
        && port.is_none_or(|p| p.parse::<u16>().is_ok_and(|p| p > 0))
}

impl Reference {
    /// Parses `oci://HOST[:PORT]/REPO:TAG` or `oci://HOST[:PORT]/REPO@sha256:HEX`.
    pub fn parse(text: &str) -> Result<Reference> {
        let bad = |why: &str| {
            Error::Usage(format!(
                "{text:?} is not a registry reference ({why}); the form is oci://HOST[:PORT]/REPOSITORY:TAG, for example oci://registry.site:5000/models/llama:3"
            ))
        };
        let rest = text
            .strip_prefix(SCHEME)
            .ok_or_else(|| bad("it does not start with oci://"))?;
        let (registry, path) = rest
            .split_once('/')
            .ok_or_else(|| bad("no repository after the host"))?;
        if !is_host(registry) {
            return Err(bad("the host is not HOST or HOST:PORT"));
        }
        let (repository, reference) = if let Some((repo, digest)) = path.split_once('@') {
            let hex = digest
                .strip_prefix("sha256:")
                .ok_or_else(|| bad("a digest must be sha256:HEX"))?;
            if !hexdigest::is_sha256(hex) {
                return Err(bad("a digest must be sha256: and 64 lowercase hex digits"));
            }
            (repo, digest.to_string())
        } else {
            let (repo, tag) = path
                .rsplit_once(':')
                .ok_or_else(|| bad("no :TAG after the repository"))?;
            if !is_tag(tag) {
                return Err(bad(
                    "the tag must be letters, digits, '.', '_' or '-', at most 128",
                ));
            }
            (repo, tag.to_string())
        };
        if !repository.split('/').all(is_component) {
            return Err(bad(
                "a repository is lowercase letters and digits, separated by '/', '.', '_' or '-'",
            ));
        }
        Ok(Reference {
            registry: registry.to_string(),
            repository: repository.to_string(),
            reference,
        })
    }

    /// Whether the reference is a digest rather than a tag.
    pub fn is_digest(&self) -> bool {
        self.reference.starts_with("sha256:")
    }

    /// The version a tag names, when it is one: `N` or `vN` (decimal digits, as `push` tags a
    /// bundle by default). `None` for a digest and any other tag (`latest`, `3.1`, `v3-rc`).
    pub(crate) fn tag_version(&self) -> Option<u64> {
        if self.is_digest() {
            return None;
        }
        let digits = self.reference.strip_prefix('v').unwrap_or(&self.reference);
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        digits.parse().ok()
    }

    /// Why a tag that names a version does not name the signed manifest's `version`: a
    /// registry (or whoever writes its tags) may answer tag `2` with validly signed version 1.
    /// `None` when the tag names no version or names this one.
    pub fn tag_mismatch(&self, name: &str, version: u64) -> Option<String> {
        let named = self.tag_version()?;
        (named != version).then(|| {
            format!(
                "the tag {:?} names version {named}, but the signed manifest under it is {name} version {version}: the registry serves another version than the tag says",
                self.reference
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_documented_forms_and_refuses_the_rest() {
        let r = Reference::parse("oci://127.0.0.1:5000/models/llama-3:v3").unwrap();
        assert_eq!(r.registry, "127.0.0.1:5000");
        assert_eq!(r.repository, "models/llama-3");
        assert_eq!(r.reference, "v3");
        assert_eq!(r.to_string(), "oci://127.0.0.1:5000/models/llama-3:v3");
        let d = format!("oci://reg/m@sha256:{}", "a".repeat(64));
        assert!(Reference::parse(&d).unwrap().is_digest());
        for bad in [
            "reg/m:1",
            "oci://reg",
            "oci://reg/m",
            "oci://reg/M:1",
            "oci://reg/m:",
            "oci://reg:0/m:1",
            "oci://reg:99999/m:1",
            "oci://reg/../m:1",
            "oci://reg/m@sha256:12",
            "oci://re g/m:1",
        ] {
            assert!(Reference::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_tag_names_a_version_only_as_n_or_vn() {
        let tag = |t: &str| Reference::parse(&format!("oci://reg/m:{t}")).unwrap();
        assert_eq!(tag("2").tag_version(), Some(2));
        assert_eq!(tag("v12").tag_version(), Some(12));
        assert_eq!(tag("007").tag_version(), Some(7));
        for other in [
            "latest",
            "v",
            "3.1",
            "v3-rc",
            "V3",
            "2a",
            "99999999999999999999999",
        ] {
            assert_eq!(tag(other).tag_version(), None, "{other}");
        }
        let d = Reference::parse(&format!("oci://reg/m@sha256:{}", "1".repeat(64))).unwrap();
        assert_eq!(d.tag_version(), None);
        assert!(tag("2").tag_mismatch("m", 2).is_none());
        assert!(tag("latest").tag_mismatch("m", 1).is_none());
        let why = tag("2").tag_mismatch("m", 1).unwrap();
        assert!(
            why.contains("version 2") && why.contains("version 1"),
            "{why}"
        );
    }
}
