//! The trust policy: whose signatures on a manifest count, and how many distinct keys must
//! sign. A plain key set is "any one of these keys" (threshold 1, exactly the old rule); a TUF
//! root gives its `targets` role's keys and threshold, with the root's expiry.
//!
//! Signatures are read and verified by the policy's schemes ([`crate::scheme`], minisign
//! unless another is registered), against the policy's keys; each key counts once however many
//! signature files it made, and a signature counts for at most one key.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use ed25519_dalek::VerifyingKey;

use super::root::{self, Root, RootKey};
use super::time::{self, Clock};
use crate::error::{Error, Result};
use crate::keys::PublicKey;
use crate::scheme::Message;
use crate::scheme::{PolicyScheme, Refusal, Verified};

/// A key whose signatures count.
use crate::scheme::TrustedKey as PolicyKey;

impl PolicyKey {
    fn from_public(pk: &PublicKey) -> PolicyKey {
        PolicyKey {
            public: pk.key,
            minisign_id: Some(pk.key_id),
            label: pk.key_id_hex(),
        }
    }

    fn from_root(k: &RootKey) -> PolicyKey {
        PolicyKey {
            public: k.public,
            minisign_id: k.minisign_id,
            label: k.label(),
        }
    }
}

/// A TUF root in force, with where it lives and the earlier versions that led to it.
#[derive(Clone, Debug)]
pub struct TrustRoot {
    /// The `--trust` (or `AIRLOCK_TRUST`) file.
    pub path: PathBuf,
    /// The root.
    pub root: Root,
    /// Its exact bytes.
    pub bytes: Vec<u8>,
    /// Earlier versions whose chain to this one verifies, oldest first.
    pub history: Vec<Root>,
    /// Things an operator should know about the history (a link that did not verify).
    pub notes: Vec<String>,
}

/// Whose signatures count and how many.
#[derive(Clone, Debug)]
pub struct Policy {
    /// The keys.
    pub keys: Vec<PolicyKey>,
    /// How many distinct keys must sign.
    pub threshold: usize,
    /// The root these come from, if a TUF root.
    pub root: Option<Arc<TrustRoot>>,
    /// The time expiry is checked against.
    pub clock: Clock,
    /// The schemes whose signatures count, tried in order ([`crate::scheme::policy_schemes`]).
    pub schemes: Vec<PolicyScheme>,
}

/// One signature that counted.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Signer {
    /// The signature file (or registry layer).
    pub file: PathBuf,
    /// The minisign key id in the signature.
    pub key_id: String,
    /// The key it verified with, as the policy names it.
    pub key: String,
}

/// A signature file as read (bounded) from a bundle, receipt or registry.
#[derive(Clone, Debug)]
pub struct SigFile {
    /// Where it is (for messages).
    pub path: PathBuf,
    /// Its text.
    pub text: String,
}

/// The result of counting a manifest's signatures.
#[derive(Debug)]
pub struct Counted {
    /// The signatures that counted, one per key, the primary first when it counted.
    pub signers: Vec<Signer>,
    /// The signatures that counted, in `signers` order, with their file's text.
    pub signatures: Vec<(Verified, SigFile)>,
    /// Signature files that did not count, and why.
    pub not_counted: Vec<String>,
}

impl Policy {
    /// Any one of these keys (a `.pub` file or a trust directory).
    pub fn any_of(keys: &[PublicKey]) -> Policy {
        Policy {
            keys: keys.iter().map(PolicyKey::from_public).collect(),
            threshold: 1,
            root: None,
            clock: Clock::system(),
            schemes: crate::scheme::policy_schemes(),
        }
    }

    /// The targets role of a root.
    pub fn from_root(tr: TrustRoot, clock: Clock) -> Policy {
        let keys = tr
            .root
            .role_keys(root::TARGETS)
            .into_iter()
            .map(PolicyKey::from_root)
            .collect();
        Policy {
            keys,
            threshold: tr.root.role(root::TARGETS).threshold,
            root: Some(Arc::new(tr)),
            clock,
            schemes: crate::scheme::policy_schemes(),
        }
    }

    /// The policy of an earlier root version (for receipts signed under it): its targets role,
    /// no expiry of its own.
    fn of_earlier(&self, r: &Root) -> Policy {
        Policy {
            keys: r
                .role_keys(root::TARGETS)
                .into_iter()
                .map(PolicyKey::from_root)
                .collect(),
            threshold: r.role(root::TARGETS).threshold,
            root: None,
            clock: self.clock,
            schemes: self.schemes.clone(),
        }
    }

    /// The policies of the earlier root versions, newest first, with their version.
    pub fn earlier(&self) -> Vec<(u64, Policy)> {
        match &self.root {
            None => Vec::new(),
            Some(tr) => tr
                .history
                .iter()
                .rev()
                .map(|r| (r.version, self.of_earlier(r)))
                .collect(),
        }
    }

    /// The root version in force, if the policy is a root's.
    pub fn root_version(&self) -> Option<u64> {
        self.root.as_ref().map(|r| r.root.version)
    }

    /// What the policy is, for messages: "the trust set" or "the targets role of root.json
    /// version 2 (2 of 3 keys)".
    pub fn describe(&self) -> String {
        match &self.root {
            None => "the trust set".into(),
            Some(tr) => format!(
                "the targets role of {} version {} ({} of {} keys)",
                tr.path.display(),
                tr.root.version,
                self.threshold,
                self.keys.len()
            ),
        }
    }

    /// The key ids, comma-separated (for "not in the trust set" messages).
    pub fn labels(&self) -> String {
        self.keys
            .iter()
            .map(|k| k.label.clone())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Refuses an expired root (exit 3), naming it, its expiry and the clock used.
    pub fn check_current(&self) -> Result<()> {
        let Some(tr) = &self.root else {
            return Ok(());
        };
        if tr.root.is_expired(self.clock.now) {
            return Err(expired(&tr.path, &tr.root, self.clock));
        }
        Ok(())
    }

    /// A warning when the root expires within 30 days.
    pub fn expiry_warning(&self) -> Option<String> {
        let tr = self.root.as_ref()?;
        let left = tr.root.expires - self.clock.now;
        (left > 0 && left < 30 * 86_400).then(|| {
            format!(
                "{} version {} expires {} ({}): have the root keys sign a new one and carry it with `pack --trust-update`",
                tr.path.display(),
                tr.root.version,
                time::distance(tr.root.expires, self.clock.now),
                time::format(tr.root.expires)
            )
        })
    }

    /// Counts the signatures of `message` that verify with distinct keys of the policy.
    /// Signatures that do not parse or verify are named in `not_counted`.
    pub fn count(&self, message: Message<'_>, files: &[SigFile]) -> Counted {
        let mut out = Counted {
            signers: Vec::new(),
            signatures: Vec::new(),
            not_counted: Vec::new(),
        };
        let mut counted_keys: Vec<VerifyingKey> = Vec::new();
        for f in files {
            match self.verify_file(message, f) {
                Ok(v) => {
                    let key = &self.keys[v.key];
                    if counted_keys.contains(&key.public) {
                        out.not_counted.push(format!(
                            "{}: a second signature by key {} (each key counts once)",
                            f.path.display(),
                            key.label
                        ));
                        continue;
                    }
                    counted_keys.push(key.public);
                    out.signers.push(Signer {
                        file: f.path.clone(),
                        key_id: v.key_id.clone(),
                        key: key.label.clone(),
                    });
                    out.signatures.push((v, f.clone()));
                }
                Err(why) => out.not_counted.push(format!("{}: {why}", f.path.display())),
            }
        }
        out
    }

    /// [`Policy::count`], refused unless the signatures that count reach the threshold: the
    /// one rule for a bundle's manifest, a receipt and a single file (`verify FILE`). `files`
    /// holds the primary signature first, then the co-signatures. When the policy is a plain
    /// key set and no signature counted, the error is `plain` of why the primary did not count
    /// (the messages a single signature has always had: an unknown key, a signature that does
    /// not verify; `None` when it verifies on a second look); otherwise
    /// it is [`Error::SignatureThreshold`] naming `signed`, who signed, how many of how many,
    /// and who else may. The root's expiry is checked before ([`Policy::check_current`]).
    pub fn require(
        &self,
        message: Message<'_>,
        signed: &Path,
        files: &[SigFile],
        plain: impl FnOnce(Option<Refusal>) -> Error,
    ) -> Result<Counted> {
        let counted = self.count(message, files);
        if counted.signers.len() >= self.threshold {
            return Ok(counted);
        }
        if self.root.is_none() && counted.signers.is_empty() {
            let primary = files.first().map(|f| self.verify_with(message, &f.text));
            return Err(plain(primary.and_then(|r| r.err())));
        }
        Err(Error::SignatureThreshold {
            path: signed.to_path_buf(),
            detail: self.shortfall(&counted),
        })
    }

    /// [`Policy::require`] for a manifest's `bytes` (a bundle's or a receipt's, at
    /// `manifest_path`), `files` its signature first, then its co-signatures. A plain key set
    /// with no signature that counts gives the errors it has always given about the one
    /// signature: a key not in the set ([`Error::UntrustedKey`], naming the signature file and
    /// the trusted keys), a signature that is not one (naming the signature file), one that
    /// does not match the manifest (naming the manifest) ([`Error::BadSignature`]).
    pub fn require_manifest(
        &self,
        bytes: &[u8],
        manifest_path: &Path,
        files: &[SigFile],
    ) -> Result<Counted> {
        let sig_path = files.first().map_or(manifest_path, |f| f.path.as_path());
        self.require(Message::Manifest(bytes), manifest_path, files, |why| {
            self.manifest_refusal(why, manifest_path, sig_path)
        })
    }

    /// The error of [`Policy::require_manifest`] when a plain key set's one signature
    /// (`sig_path`) does not count for the manifest at `manifest_path`, from why it did not
    /// (`None`: it verified on a second look).
    fn manifest_refusal(
        &self,
        why: Option<Refusal>,
        manifest_path: &Path,
        sig_path: &Path,
    ) -> Error {
        let reason = match why {
            Some(Refusal::UnknownKey { key_id }) => {
                return Error::UntrustedKey {
                    path: sig_path.to_path_buf(),
                    key_id,
                    trusted: self.labels(),
                };
            }
            Some(Refusal::Malformed(e)) => {
                return Error::BadSignature {
                    path: sig_path.to_path_buf(),
                    reason: format!("is not a valid signature: {e}"),
                };
            }
            Some(Refusal::Invalid { key_id, reason } | Refusal::Unsupported { key_id, reason }) => {
                format!("does not match its signature from key {key_id}: {reason}")
            }
            None => "its signature verified on a second look; run the command again".into(),
        };
        Error::BadSignature {
            path: manifest_path.to_path_buf(),
            reason,
        }
    }

    /// The key that made the counted signature `v`, as a minisign public key: the policy's
    /// key, with the id the signature names (a key of a root without a minisign id matches any
    /// signature, so its id is the signature's).
    pub fn signer_key(&self, v: &Verified) -> PublicKey {
        let key = &self.keys[v.key];
        PublicKey {
            key_id: crate::scheme::minisign::key_id_bytes(&v.key_id)
                .or(key.minisign_id)
                .unwrap_or_default(),
            key: key.public,
        }
    }

    /// "signed by 1 of the 2 distinct keys the targets role of root.json version 1 requires
    /// (A in manifest.json.minisig); 1 more needed from: B, C".
    fn shortfall(&self, counted: &Counted) -> String {
        let have = counted.signers.len();
        let signed: Vec<String> = counted
            .signers
            .iter()
            .map(|s| {
                format!(
                    "{} in {}",
                    s.key,
                    s.file.file_name().map_or_else(
                        || s.file.display().to_string(),
                        |n| n.to_string_lossy().into_owned()
                    )
                )
            })
            .collect();
        let missing: Vec<String> = self
            .keys
            .iter()
            .filter(|k| !counted.signers.iter().any(|s| s.key == k.label))
            .map(|k| k.label.clone())
            .collect();
        let mut s = format!(
            "signed by {have} of the {} distinct keys {} requires",
            self.threshold,
            self.describe()
        );
        if !signed.is_empty() {
            s.push_str(&format!(" ({})", signed.join(", ")));
        }
        s.push_str(&format!(
            "; {} more needed from: {}",
            self.threshold - have,
            missing.join(", ")
        ));
        if !counted.not_counted.is_empty() {
            s.push_str(&format!(
                "; not counted: {}",
                counted.not_counted.join("; ")
            ));
        }
        s
    }

    /// The scheme that reads the signature `text` and whom it names as the signer; otherwise
    /// why the first scheme (minisign) cannot read it.
    pub fn identify(&self, text: &str) -> std::result::Result<(&'static str, String), NotCounted> {
        let mut first = None;
        for s in &self.schemes {
            match s.signer_of(text.as_bytes()) {
                Ok(id) => return Ok((s.name(), id)),
                Err(r) => {
                    first.get_or_insert(r);
                }
            }
        }
        Err(first.map_or(NotCounted::NoScheme, NotCounted::Unread))
    }

    /// The first of the policy's schemes that reads `text` verifies it over `message` with the
    /// policy's keys; [`Refusal::Malformed`] (the first scheme's) when none reads it.
    pub(crate) fn verify_with(
        &self,
        message: Message<'_>,
        text: &str,
    ) -> std::result::Result<Verified, Refusal> {
        self.verify_by(self.schemes.iter(), message, text)
    }

    /// [`Policy::verify_with`] offering `text` to `schemes` only.
    fn verify_by<'s>(
        &self,
        schemes: impl Iterator<Item = &'s PolicyScheme>,
        message: Message<'_>,
        text: &str,
    ) -> std::result::Result<Verified, Refusal> {
        let mut first = None;
        for s in schemes {
            match s.verify(message, text.as_bytes(), &self.keys) {
                Err(Refusal::Malformed(why)) => {
                    first.get_or_insert(Refusal::Malformed(format!(
                        "not a {} signature: {why}",
                        s.name()
                    )));
                }
                other => return other,
            }
        }
        Err(first.unwrap_or_else(|| Refusal::Malformed("no signature scheme is registered".into())))
    }

    /// [`Policy::verify_one`] for a signature file: a file named with a scheme's own extension
    /// (a co-signature `manifest.json.KEYID.EXT`, FORMAT.md section 18.3) is offered to that
    /// scheme only, and to none when the policy registers none with it; a `.minisig` file (the
    /// primary signature's name, and the name every co-signature had before each scheme had
    /// its own) to each scheme in turn, as [`Policy::verify_with`] does.
    pub fn verify_file(
        &self,
        message: Message<'_>,
        f: &SigFile,
    ) -> std::result::Result<Verified, NotCounted> {
        let ext = f
            .path
            .extension()
            .and_then(|e| e.to_str())
            .unwrap_or(crate::scheme::minisign::EXTENSION);
        if ext == crate::scheme::minisign::EXTENSION {
            return self.verify_one(message, &f.text);
        }
        if !self.schemes.iter().any(|s| s.extension() == ext) {
            return Err(NotCounted::NoSchemeFor(ext.to_string()));
        }
        let named = self.schemes.iter().filter(|s| s.extension() == ext);
        self.worded(message, self.verify_by(named, message, &f.text))
    }

    /// The policy key that verifies the signature `text` over `message` (which key:
    /// [`Verified::key`]), or why none does, for the operator.
    pub(crate) fn verify_one(
        &self,
        message: Message<'_>,
        text: &str,
    ) -> std::result::Result<Verified, NotCounted> {
        self.worded(message, self.verify_with(message, text))
    }

    /// A scheme's answer, a refusal in the policy's words.
    fn worded(
        &self,
        message: Message<'_>,
        answer: std::result::Result<Verified, Refusal>,
    ) -> std::result::Result<Verified, NotCounted> {
        answer.map_err(|r| match r {
            Refusal::Malformed(why) => NotCounted::Malformed(why),
            Refusal::Unsupported { key_id, reason } => NotCounted::Unsupported { key_id, reason },
            Refusal::Invalid { key_id, .. } => NotCounted::Invalid {
                key_id,
                what: message.what(),
            },
            Refusal::UnknownKey { key_id } => NotCounted::UnknownKey {
                key_id,
                trusted: self.describe(),
            },
        })
    }
}

/// Why a signature does not count for the policy ([`Policy::identify`],
/// [`Policy::verify_file`]): a scheme's [`Refusal`] in the policy's words, which name the
/// policy's keys and what was signed. `Display` is the reason after the signature file's name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NotCounted {
    /// No scheme of the policy reads it: the first scheme's refusal, in its own words.
    Unread(Refusal),
    /// The policy registers no scheme.
    NoScheme,
    /// A co-signature of this extension, which no scheme of the policy reads.
    NoSchemeFor(String),
    /// Not a well-formed signature of any scheme offered it.
    Malformed(String),
    /// Made with an algorithm this build does not verify.
    Unsupported {
        /// The key it names.
        key_id: String,
        /// The scheme's words.
        reason: String,
    },
    /// Does not verify with the trusted key it names.
    Invalid {
        /// The key it names.
        key_id: String,
        /// What was signed ([`Message::what`]).
        what: &'static str,
    },
    /// Names a key the policy does not hold.
    UnknownKey {
        /// The key it names.
        key_id: String,
        /// The policy ([`Policy::describe`]).
        trusted: String,
    },
}

impl std::fmt::Display for NotCounted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Unread(r) => f.write_str(&r.reason()),
            Self::NoScheme => f.write_str("no signature scheme is registered"),
            Self::NoSchemeFor(ext) => write!(
                f,
                "a .{ext} signature, and no signature scheme of the trust policy reads .{ext} files"
            ),
            Self::Malformed(why) => f.write_str(why),
            Self::Unsupported { key_id, reason } => {
                write!(f, "the signature by key {key_id}: {reason}")
            }
            Self::Invalid { key_id, what } => write!(
                f,
                "the signature by key {key_id} does not verify ({what} or the signature was changed)"
            ),
            Self::UnknownKey { key_id, trusted } => {
                write!(f, "signed by key {key_id}, which is not one of {trusted}")
            }
        }
    }
}

impl std::error::Error for NotCounted {}

/// The error for an expired root.
pub fn expired(path: &std::path::Path, r: &Root, clock: Clock) -> Error {
    Error::TrustExpired {
        path: path.to_path_buf(),
        version: r.version,
        expires: time::format(r.expires),
        now: format!(
            "{}{}",
            time::format(clock.now),
            if clock.system.is_some() {
                " as given by --assume-now"
            } else {
                " by this machine's clock"
            }
        ),
    }
}
