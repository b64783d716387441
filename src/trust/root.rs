//! TUF 1.0 root metadata (`root.json`): who may sign bundles (the `targets` role), who may
//! change the root (the `root` role), how many of each must sign, and until when.
//!
//! The format is the TUF specification's, read and written as python-tuf's Metadata API does
//! (`tuf/api/_payload.py`), so a site's security team can inspect and verify an airlock root
//! with standard tooling: `signed` holds `_type` `root`, `spec_version`, `version`, `expires`,
//! `keys` and `roles`; `signatures` holds `{keyid, sig}` pairs, each an Ed25519 signature
//! (scheme `ed25519`, hex) over the canonical JSON of `signed` ([`super::json::canonical`]).
//!
//! Parsing is stricter than python-tuf, because airlock acts on the result: every rule below is
//! a refusal naming the problem.
//! - keys are `ed25519` with scheme `ed25519` only, `keyval` exactly `{"public": 64 hex}`;
//! - a key's id MUST be the one python-tuf computes (`compute_default_keyid`: SHA-256 of the
//!   canonical JSON of `{keytype, scheme, keyval}`), so one key cannot appear under two ids and
//!   be counted twice towards a threshold;
//! - exactly the four top-level roles; each names known keys, each at most once, and a
//!   threshold from 1 to its number of keys;
//! - at most one signature per key id (python-tuf refuses the same);
//! - unknown fields only under an `x-` name (they are signed, and kept), duplicate JSON keys
//!   and non-integer numbers never ([`super::json::parse`]).
//!
//! A key may carry `x-airlock-minisign-keyid`, the 8-byte minisign key id of the same Ed25519
//! key (docs/FORMAT.md section 18), so messages name keys as operators know them. It is not
//! part of the TUF key id (python-tuf computes that over keytype, scheme and keyval only).

use std::collections::BTreeMap;

use ed25519_dalek::VerifyingKey;
use sha2::{Digest, Sha256};

use super::json::{self, Value};
use crate::hexdigest;
use crate::keys::{self, PublicKey, SecretKey};

/// The role whose keys may sign bundles.
pub const TARGETS: &str = "targets";
/// The role whose keys may change the root.
pub const ROOT: &str = "root";
/// The four top-level roles every TUF root has (airlock reads `root` and `targets` only).
pub const ROLES: [&str; 4] = ["root", "snapshot", "targets", "timestamp"];
/// The `spec_version` airlock writes: the TUF specification python-tuf implements.
pub(crate) const SPEC_VERSION: &str = "1.0.31";
/// Largest root file read, in bytes.
pub const MAX_ROOT_BYTES: u64 = 1 << 20;
/// Most keys, role members or signatures one root may hold.
pub(crate) const MAX_KEYS: usize = 64;
/// The key field that records the minisign key id of an Ed25519 key.
pub(crate) const MINISIGN_KEYID: &str = "x-airlock-minisign-keyid";
const ED25519: &str = "ed25519";

/// One key of a root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RootKey {
    /// The TUF key id (64 hex).
    pub keyid: String,
    /// The Ed25519 public key.
    pub public: VerifyingKey,
    /// The minisign key id recorded with it, if any.
    pub minisign_id: Option<[u8; 8]>,
}

impl RootKey {
    /// The TUF key for a minisign public key (same Ed25519 key, its minisign id recorded).
    pub fn from_minisign(pk: &PublicKey) -> RootKey {
        RootKey {
            keyid: keyid(&pk.key),
            public: pk.key,
            minisign_id: Some(pk.key_id),
        }
    }

    /// How messages name the key: its minisign key id when known, else the start of its TUF id.
    pub fn label(&self) -> String {
        match self.minisign_id {
            Some(id) => minisign_hex(&id),
            None => format!("tuf:{}", &self.keyid[..16]),
        }
    }

    fn to_value(&self) -> Value {
        let mut m = key_object(&self.public);
        if let Some(id) = self.minisign_id {
            m.insert(MINISIGN_KEYID.into(), Value::Str(minisign_hex(&id)));
        }
        Value::Object(m)
    }
}

/// A minisign key id as minisign prints it.
pub fn minisign_hex(id: &[u8; 8]) -> String {
    format!("{:016X}", u64::from_le_bytes(*id))
}

fn key_object(public: &VerifyingKey) -> BTreeMap<String, Value> {
    let mut keyval = BTreeMap::new();
    keyval.insert("public".into(), Value::Str(hex::encode(public.as_bytes())));
    let mut m = BTreeMap::new();
    m.insert("keytype".into(), Value::Str(ED25519.into()));
    m.insert("scheme".into(), Value::Str(ED25519.into()));
    m.insert("keyval".into(), Value::Object(keyval));
    m
}

/// The key id python-tuf gives an Ed25519 key: SHA-256 of the canonical JSON of
/// `{"keytype": "ed25519", "keyval": {"public": HEX}, "scheme": "ed25519"}`.
pub fn keyid(public: &VerifyingKey) -> String {
    hex::encode(Sha256::digest(json::canonical(&Value::Object(key_object(
        public,
    )))))
}

/// A role: its keys and how many of them must sign.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Role {
    /// Key ids, in the file's order.
    pub keyids: Vec<String>,
    /// Signatures needed.
    pub threshold: usize,
}

/// One signature of a root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RootSignature {
    /// The key id it claims.
    pub keyid: String,
    /// The Ed25519 signature over the canonical `signed`.
    pub sig: [u8; 64],
}

/// A parsed, validated root (its signatures not yet checked: see [`Root::verification`]).
#[derive(Clone, Debug)]
pub struct Root {
    /// `version`, from 1.
    pub version: u64,
    /// `spec_version`.
    pub spec_version: String,
    /// `expires`, seconds since the epoch.
    pub expires: i64,
    /// `keys`, by key id.
    pub keys: BTreeMap<String, RootKey>,
    /// `roles`, by name (always the four of [`ROLES`]).
    pub roles: BTreeMap<String, Role>,
    /// `signatures`.
    pub signatures: Vec<RootSignature>,
    signed: Value,
    canonical: Vec<u8>,
}

/// Which keys sign for a role, and whether they are enough.
#[derive(Clone, Debug)]
pub struct Verification {
    /// The role's threshold.
    pub threshold: usize,
    /// Keys of the role whose signature verified.
    pub signed: Vec<RootKey>,
    /// Keys of the role without a (valid) signature.
    pub unsigned: Vec<RootKey>,
}

impl Verification {
    /// Whether the threshold is met.
    pub fn ok(&self) -> bool {
        self.signed.len() >= self.threshold
    }

    /// "2 of 3 required (A, B); 1 more from: C, D".
    pub fn describe(&self) -> String {
        let names = |ks: &[RootKey]| ks.iter().map(RootKey::label).collect::<Vec<_>>().join(", ");
        let mut s = format!(
            "signed by {} of the {} required",
            self.signed.len(),
            self.threshold
        );
        if !self.signed.is_empty() {
            s.push_str(&format!(" ({})", names(&self.signed)));
        }
        if !self.ok() {
            s.push_str(&format!(
                "; {} more needed from: {}",
                self.threshold - self.signed.len(),
                names(&self.unsigned)
            ));
        }
        s
    }
}

/// Why a TUF root file is refused (issue 34 item 6: typed, not a string). `Display` is the
/// reason as the user reads it after the file's name (`trust: ROOT: <reason>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RootError {
    /// Not JSON as TUF writes it; the parser's reason.
    Json(super::json::JsonError),
    /// The document is not a JSON object.
    NotAnObject,
    /// The document is not exactly `signed` and `signatures`.
    NotTwoFields,
    /// `what` is of JSON kind `kind`, not a string.
    NotAString { what: String, kind: &'static str },
    /// `what` is not `digits` lowercase hex digits.
    NotHex { what: String, digits: usize },
    /// `what` is of JSON kind `kind`, not an object.
    NotAnObjectField { what: String, kind: &'static str },
    /// `what` has a field it may not have (quoted).
    UnknownField { what: String, field: String },
    /// `what` lacks the field `name`.
    MissingField { what: String, name: String },
    /// `what`'s integer is out of range.
    OutOfRange { what: String, value: i128 },
    /// `what` is of JSON kind `kind`, not an integer.
    NotAnInteger { what: String, kind: &'static str },
    /// A key that is not ed25519 (its type and scheme shown).
    UnsupportedKey {
        what: String,
        keytype: String,
        scheme: String,
    },
    /// A key's `keyval` is not exactly `public`.
    KeyvalShape { what: String },
    /// A key's `public` is not an Ed25519 public key.
    BadPublicKey { what: String },
    /// A key id that is not its key's (shown bounded; `computed` is the right one).
    KeyIdMismatch { keyid: String, computed: String },
    /// A key's minisign key id is not 16 uppercase hex digits.
    MinisignKeyId { what: String },
    /// A role's `keyids` is not an array.
    KeyidsNotAnArray { what: String },
    /// A role lists more than [`MAX_KEYS`] keys.
    RoleTooManyKeys { what: String },
    /// A role's `keyids` holds something that is not a string.
    KeyidNotAString { what: String, kind: &'static str },
    /// A role names a key id twice.
    KeyidTwice { what: String, keyid: String },
    /// A role names a key id the root does not define.
    UnknownKeyid { what: String, keyid: String },
    /// A role's threshold is 0.
    ThresholdZero { what: String },
    /// A role's threshold is above its number of keys.
    ThresholdUnreachable {
        what: String,
        threshold: u64,
        keys: usize,
    },
    /// `signed._type` is not `root` (shown).
    NotRoot(String),
    /// `signed.spec_version` is not a string.
    SpecVersionNotAString,
    /// `spec_version` (quoted) is not 1.x.
    SpecVersion(String),
    /// `signed.version` is 0.
    VersionZero,
    /// `signed.expires` is not a string.
    ExpiresNotAString,
    /// `signed.expires` is not a date.
    Expires(super::time::DateError),
    /// `signed.consistent_snapshot` is not a boolean.
    ConsistentSnapshot,
    /// `signed.keys` holds more than [`MAX_KEYS`] keys.
    TooManyKeys,
    /// `signed.roles` is not exactly [`ROLES`]; what it holds (bounded).
    Roles { holds: String },
    /// `signatures` is not an array.
    SignaturesNotAnArray,
    /// More than [`MAX_KEYS`] signatures.
    TooManySignatures,
    /// A signature is not exactly `keyid` and `sig`.
    SignatureShape,
    /// Two signatures by one key id.
    SignatureTwice { keyid: String },
}

impl std::fmt::Display for RootError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use RootError::*;
        match self {
            Json(e) => write!(f, "is not valid JSON for TUF: {e}"),
            NotAnObject => f.write_str("is not a JSON object"),
            NotTwoFields => f.write_str(
                "must be an object of exactly two fields, \"signed\" and \"signatures\"",
            ),
            NotAString { what, kind } => write!(f, "{what} is {kind}, not a string"),
            NotHex { what, digits } => write!(f, "{what} is not {digits} lowercase hex digits"),
            NotAnObjectField { what, kind } => write!(f, "{what} is {kind}, not an object"),
            UnknownField { what, field } => write!(f, "{what} has an unknown field {field}"),
            MissingField { what, name } => write!(f, "{what} has no {name:?} field"),
            OutOfRange { what, value } => write!(f, "{what} {value} is out of range"),
            NotAnInteger { what, kind } => write!(f, "{what} is {kind}, not an integer"),
            UnsupportedKey {
                what,
                keytype,
                scheme,
            } => write!(
                f,
                "{what} is of type {keytype} with scheme {scheme}: airlock supports ed25519 keys (scheme ed25519) only"
            ),
            KeyvalShape { what } => {
                write!(f, "{what} keyval must hold exactly one field, \"public\"")
            }
            BadPublicKey { what } => write!(f, "{what} is not a valid Ed25519 public key"),
            KeyIdMismatch { keyid, computed } => write!(
                f,
                "key id {keyid} does not match its key: the key's id is {computed} (SHA-256 of its canonical JSON, as python-tuf computes it)"
            ),
            MinisignKeyId { what } => {
                write!(f, "{what} {MINISIGN_KEYID} is not 16 uppercase hex digits")
            }
            KeyidsNotAnArray { what } => write!(f, "{what} keyids is not an array"),
            RoleTooManyKeys { what } => write!(f, "{what} has more than {MAX_KEYS} keys"),
            KeyidNotAString { what, kind } => {
                write!(f, "{what} keyids holds {kind}, not a string")
            }
            KeyidTwice { what, keyid } => write!(f, "{what} names key id {keyid} twice"),
            UnknownKeyid { what, keyid } => write!(
                f,
                "{what} names key id {keyid}, which the root's keys do not define"
            ),
            ThresholdZero { what } => write!(
                f,
                "{what} has threshold 0: at least one signature must be required"
            ),
            ThresholdUnreachable {
                what,
                threshold,
                keys,
            } => write!(
                f,
                "{what} has threshold {threshold} but only {keys} key(s): it could never be met"
            ),
            NotRoot(t) => write!(
                f,
                "signed._type is {t}, not \"root\": this is not root metadata"
            ),
            SpecVersionNotAString => f.write_str("signed.spec_version is not a string"),
            SpecVersion(v) => write!(f, "spec_version {v} is not a TUF 1.x version"),
            VersionZero => f.write_str("signed.version is 0; versions start at 1"),
            ExpiresNotAString => f.write_str("signed.expires is not a string"),
            Expires(e) => write!(f, "signed.expires: {e}"),
            ConsistentSnapshot => f.write_str("signed.consistent_snapshot is not a boolean"),
            TooManyKeys => write!(f, "signed.keys holds more than {MAX_KEYS} keys"),
            Roles { holds } => write!(
                f,
                "signed.roles must hold exactly the roles {}; it holds {holds}",
                ROLES.join(", ")
            ),
            SignaturesNotAnArray => f.write_str("signatures is not an array"),
            TooManySignatures => write!(f, "holds more than {MAX_KEYS} signatures"),
            SignatureShape => f.write_str("a signature must hold exactly \"keyid\" and \"sig\""),
            SignatureTwice { keyid } => write!(
                f,
                "holds two signatures by key id {keyid} (python-tuf refuses this too)"
            ),
        }
    }
}

impl std::error::Error for RootError {}

/// Why a rotation from a trusted root to the next is refused ([`verify_rotation`]). `Display`
/// is the reason after the new root's name and version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RotationError {
    /// Not newer than the trusted version: a rollback.
    Rollback { new: u64, trusted: u64 },
    /// A version skipped.
    Gap { new: u64, trusted: u64 },
    /// Not signed by the threshold of the trusted root's root keys (the shortfall described).
    OldKeys { trusted: u64, shortfall: String },
    /// Not signed by the threshold of its own root keys (the shortfall described).
    OwnKeys { shortfall: String },
}

impl std::fmt::Display for RotationError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RotationError::Rollback { new, trusted } => write!(
                f,
                "is version {new}, not newer than the trusted version {trusted}: a rollback is refused"
            ),
            RotationError::Gap { new, trusted } => write!(
                f,
                "is version {new}, but the trusted root is version {trusted}: versions must follow one another, bring version {} first",
                trusted + 1
            ),
            RotationError::OldKeys { trusted, shortfall } => write!(
                f,
                "is not signed by the threshold of version {trusted}'s root keys: {shortfall}"
            ),
            RotationError::OwnKeys { shortfall } => write!(
                f,
                "is not signed by the threshold of its own root keys: {shortfall}"
            ),
        }
    }
}

impl std::error::Error for RotationError {}

fn hex_field(v: &Value, what: &str, bytes: usize) -> Result<Vec<u8>, RootError> {
    let s = v.as_str().ok_or_else(|| RootError::NotAString {
        what: what.into(),
        kind: v.kind(),
    })?;
    if !hexdigest::is_lower_hex(s, 2 * bytes) {
        return Err(RootError::NotHex {
            what: what.into(),
            digits: 2 * bytes,
        });
    }
    Ok(hex::decode(s).expect("checked hex"))
}

fn object<'a>(v: &'a Value, what: &str) -> Result<&'a BTreeMap<String, Value>, RootError> {
    v.as_object().ok_or_else(|| RootError::NotAnObjectField {
        what: what.into(),
        kind: v.kind(),
    })
}

/// Refuses fields other than `allowed` and `x-` extensions.
fn only(m: &BTreeMap<String, Value>, allowed: &[&str], what: &str) -> Result<(), RootError> {
    match m
        .keys()
        .find(|k| !allowed.contains(&k.as_str()) && !k.starts_with("x-"))
    {
        Some(k) => Err(RootError::UnknownField {
            what: what.into(),
            field: crate::display::quote(k),
        }),
        None => Ok(()),
    }
}

fn field<'a>(
    m: &'a BTreeMap<String, Value>,
    name: &str,
    what: &str,
) -> Result<&'a Value, RootError> {
    m.get(name).ok_or_else(|| RootError::MissingField {
        what: what.into(),
        name: name.into(),
    })
}

fn uint(v: &Value, what: &str) -> Result<u64, RootError> {
    match v {
        Value::Int(i) => u64::try_from(*i).map_err(|_| RootError::OutOfRange {
            what: what.into(),
            value: *i,
        }),
        other => Err(RootError::NotAnInteger {
            what: what.into(),
            kind: other.kind(),
        }),
    }
}

fn parse_key(keyid_text: &str, v: &Value) -> Result<RootKey, RootError> {
    let what = format!("key {}", crate::display::bounded(keyid_text));
    let m = object(v, &what)?;
    only(m, &["keytype", "scheme", "keyval"], &what)?;
    let keytype = field(m, "keytype", &what)?;
    let scheme = field(m, "scheme", &what)?;
    if keytype.as_str() != Some(ED25519) || scheme.as_str() != Some(ED25519) {
        return Err(RootError::UnsupportedKey {
            what,
            keytype: show(keytype),
            scheme: show(scheme),
        });
    }
    let keyval = object(field(m, "keyval", &what)?, &format!("{what} keyval"))?;
    if keyval.len() != 1 {
        return Err(RootError::KeyvalShape { what });
    }
    let public = hex_field(
        field(keyval, "public", &what)?,
        &format!("{what} keyval.public"),
        32,
    )?;
    let public = VerifyingKey::from_bytes(&public.try_into().expect("32 bytes"))
        .map_err(|_| RootError::BadPublicKey { what: what.clone() })?;
    let computed = keyid(&public);
    if computed != keyid_text {
        return Err(RootError::KeyIdMismatch {
            keyid: crate::display::bounded(keyid_text).into_owned(),
            computed,
        });
    }
    let minisign_id = match m.get(MINISIGN_KEYID) {
        None => None,
        Some(v) => {
            let s = v.as_str().filter(|s| {
                s.len() == 16 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'A'..=b'F'))
            });
            let s = s.ok_or_else(|| RootError::MinisignKeyId { what: what.clone() })?;
            Some(u64::from_str_radix(s, 16).expect("hex").to_le_bytes())
        }
    };
    Ok(RootKey {
        keyid: computed,
        public,
        minisign_id,
    })
}

fn show(v: &Value) -> String {
    match v {
        Value::Str(s) => crate::display::quote(s),
        other => other.kind().to_string(),
    }
}

fn parse_role(name: &str, v: &Value, keys: &BTreeMap<String, RootKey>) -> Result<Role, RootError> {
    let what = format!("role {name}");
    let m = object(v, &what)?;
    only(m, &["keyids", "threshold"], &what)?;
    let Value::Array(ids) = field(m, "keyids", &what)? else {
        return Err(RootError::KeyidsNotAnArray { what });
    };
    if ids.len() > MAX_KEYS {
        return Err(RootError::RoleTooManyKeys { what });
    }
    let mut keyids: Vec<String> = Vec::with_capacity(ids.len());
    for id in ids {
        let id = id.as_str().ok_or_else(|| RootError::KeyidNotAString {
            what: what.clone(),
            kind: id.kind(),
        })?;
        if keyids.iter().any(|k| k == id) {
            return Err(RootError::KeyidTwice {
                what,
                keyid: crate::display::bounded(id).into_owned(),
            });
        }
        if !keys.contains_key(id) {
            return Err(RootError::UnknownKeyid {
                what,
                keyid: crate::display::bounded(id).into_owned(),
            });
        }
        keyids.push(id.to_string());
    }
    let threshold = uint(field(m, "threshold", &what)?, &format!("{what} threshold"))?;
    if threshold == 0 {
        return Err(RootError::ThresholdZero { what });
    }
    if threshold > keyids.len() as u64 {
        return Err(RootError::ThresholdUnreachable {
            what,
            threshold,
            keys: keyids.len(),
        });
    }
    Ok(Role {
        keyids,
        threshold: threshold as usize,
    })
}

impl Root {
    /// Parses and validates a root file (bounded by the caller to [`MAX_ROOT_BYTES`]).
    pub fn parse(bytes: &[u8]) -> Result<Root, RootError> {
        let doc = json::parse(bytes).map_err(RootError::Json)?;
        Root::from_value(doc)
    }

    fn from_value(doc: Value) -> Result<Root, RootError> {
        let Value::Object(mut top) = doc else {
            return Err(RootError::NotAnObject);
        };
        if top.len() != 2 || !top.contains_key("signed") || !top.contains_key("signatures") {
            return Err(RootError::NotTwoFields);
        }
        let signed = top.remove("signed").expect("checked");
        let signatures = top.remove("signatures").expect("checked");
        let m = object(&signed, "signed")?;
        only(
            m,
            &[
                "_type",
                "spec_version",
                "version",
                "expires",
                "consistent_snapshot",
                "keys",
                "roles",
            ],
            "signed",
        )?;
        match field(m, "_type", "signed")? {
            Value::Str(t) if t == "root" => {}
            other => {
                return Err(RootError::NotRoot(show(other)));
            }
        }
        let spec_version = field(m, "spec_version", "signed")?
            .as_str()
            .ok_or(RootError::SpecVersionNotAString)?
            .to_string();
        let parts: Vec<&str> = spec_version.split('.').collect();
        if !(2..=3).contains(&parts.len())
            || parts
                .iter()
                .any(|p| p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()))
            || parts[0] != "1"
        {
            return Err(RootError::SpecVersion(crate::display::quote(&spec_version)));
        }
        let version = uint(field(m, "version", "signed")?, "signed.version")?;
        if version == 0 {
            return Err(RootError::VersionZero);
        }
        let expires = super::time::parse(
            field(m, "expires", "signed")?
                .as_str()
                .ok_or(RootError::ExpiresNotAString)?,
        )
        .map_err(RootError::Expires)?;
        if let Some(cs) = m.get("consistent_snapshot")
            && !matches!(cs, Value::Bool(_))
        {
            return Err(RootError::ConsistentSnapshot);
        }
        let key_map = object(field(m, "keys", "signed")?, "signed.keys")?;
        if key_map.len() > MAX_KEYS {
            return Err(RootError::TooManyKeys);
        }
        let mut keys = BTreeMap::new();
        for (id, v) in key_map {
            keys.insert(id.clone(), parse_key(id, v)?);
        }
        let role_map = object(field(m, "roles", "signed")?, "signed.roles")?;
        if role_map.len() != ROLES.len() || ROLES.iter().any(|r| !role_map.contains_key(*r)) {
            return Err(RootError::Roles {
                holds: crate::display::bounded(
                    &role_map.keys().cloned().collect::<Vec<_>>().join(", "),
                )
                .into_owned(),
            });
        }
        let mut roles = BTreeMap::new();
        for (name, v) in role_map {
            roles.insert(name.clone(), parse_role(name, v, &keys)?);
        }
        let Value::Array(sig_list) = signatures else {
            return Err(RootError::SignaturesNotAnArray);
        };
        if sig_list.len() > MAX_KEYS {
            return Err(RootError::TooManySignatures);
        }
        let mut sigs: Vec<RootSignature> = Vec::with_capacity(sig_list.len());
        for s in &sig_list {
            let sm = object(s, "a signature")?;
            if sm.len() != 2 {
                return Err(RootError::SignatureShape);
            }
            let keyid = hex_field(
                field(sm, "keyid", "a signature")?,
                "a signature's keyid",
                32,
            )?;
            let sig = hex_field(field(sm, "sig", "a signature")?, "a signature's sig", 64)?;
            let keyid = hex::encode(keyid);
            if sigs.iter().any(|o| o.keyid == keyid) {
                return Err(RootError::SignatureTwice { keyid });
            }
            sigs.push(RootSignature {
                keyid,
                sig: sig.try_into().expect("64 bytes"),
            });
        }
        let canonical = json::canonical(&signed);
        Ok(Root {
            version,
            spec_version,
            expires,
            keys,
            roles,
            signatures: sigs,
            signed,
            canonical,
        })
    }

    /// A new, unsigned root: `targets` and `root` roles from minisign public keys, the
    /// `snapshot` and `timestamp` roles (which airlock does not use) given the targets role's
    /// keys and threshold so standard tooling finds a complete root.
    pub fn build(
        version: u64,
        expires: i64,
        targets: (&[RootKey], usize),
        root: (&[RootKey], usize),
    ) -> Result<Root, RootError> {
        let mut keys = BTreeMap::new();
        let mut role = |pks: &[RootKey], threshold: usize| {
            let mut ids: Vec<Value> = Vec::new();
            for k in pks {
                if !ids.iter().any(|v| v.as_str() == Some(&k.keyid)) {
                    ids.push(Value::Str(k.keyid.clone()));
                }
                keys.insert(k.keyid.clone(), k.to_value());
            }
            let mut r = BTreeMap::new();
            r.insert("keyids".to_string(), Value::Array(ids));
            r.insert("threshold".to_string(), Value::Int(threshold as i128));
            Value::Object(r)
        };
        let mut roles = BTreeMap::new();
        roles.insert(TARGETS.to_string(), role(targets.0, targets.1));
        roles.insert(ROOT.to_string(), role(root.0, root.1));
        for unused in ["snapshot", "timestamp"] {
            roles.insert(unused.to_string(), role(targets.0, targets.1));
        }
        let mut signed = BTreeMap::new();
        signed.insert("_type".into(), Value::Str("root".into()));
        signed.insert("spec_version".into(), Value::Str(SPEC_VERSION.into()));
        signed.insert("version".into(), Value::Int(version.into()));
        signed.insert("expires".into(), Value::Str(super::time::format(expires)));
        signed.insert("consistent_snapshot".into(), Value::Bool(true));
        signed.insert("keys".into(), Value::Object(keys));
        signed.insert("roles".into(), Value::Object(roles));
        let mut doc = BTreeMap::new();
        doc.insert("signed".into(), Value::Object(signed));
        doc.insert("signatures".into(), Value::Array(Vec::new()));
        Root::from_value(Value::Object(doc))
    }

    /// The bytes a signature covers: the canonical JSON of `signed`.
    pub fn canonical_signed(&self) -> &[u8] {
        &self.canonical
    }

    /// The file: `{"signatures": [...], "signed": {...}}` in python-tuf's layout.
    pub fn to_bytes(&self) -> Vec<u8> {
        let sigs = self
            .signatures
            .iter()
            .map(|s| {
                let mut m = BTreeMap::new();
                m.insert("keyid".to_string(), Value::Str(s.keyid.clone()));
                m.insert("sig".to_string(), Value::Str(hex::encode(s.sig)));
                Value::Object(m)
            })
            .collect();
        let mut doc = BTreeMap::new();
        doc.insert("signatures".to_string(), Value::Array(sigs));
        doc.insert("signed".to_string(), self.signed.clone());
        json::pretty(&Value::Object(doc))
    }

    /// Adds (or replaces) the signature of `sk`'s key. Returns whether it replaced one.
    pub fn sign(&mut self, sk: &SecretKey) -> bool {
        let keyid = keyid(&sk.public_key().key);
        let sig = keys::sign_raw(sk, &self.canonical);
        let replaced = self.signatures.iter().any(|s| s.keyid == keyid);
        self.signatures.retain(|s| s.keyid != keyid);
        self.signatures.push(RootSignature { keyid, sig });
        self.signatures.sort_by(|a, b| a.keyid.cmp(&b.keyid));
        replaced
    }

    /// A role (always present after parsing).
    pub fn role(&self, name: &str) -> &Role {
        &self.roles[name]
    }

    /// The keys of a role, in its order.
    pub fn role_keys(&self, name: &str) -> Vec<&RootKey> {
        self.role(name)
            .keyids
            .iter()
            .map(|id| &self.keys[id])
            .collect()
    }

    /// Checks `of`'s signatures against this root's `role` (this root is the delegator: itself
    /// for a root's own signatures, the trusted version for a rotation). Each key counts once.
    pub fn verification(&self, role: &str, of: &Root) -> Verification {
        let r = self.role(role);
        let mut signed = Vec::new();
        let mut unsigned = Vec::new();
        for id in &r.keyids {
            let key = &self.keys[id];
            let ok = of
                .signatures
                .iter()
                .find(|s| &s.keyid == id)
                .is_some_and(|s| keys::verify_raw(&key.public, &of.canonical, &s.sig));
            if ok && !signed.iter().any(|k: &RootKey| k.public == key.public) {
                signed.push(key.clone());
            } else if !ok {
                unsigned.push(key.clone());
            }
        }
        Verification {
            threshold: r.threshold,
            signed,
            unsigned,
        }
    }

    /// Whether the root has expired at `now` (python-tuf: expired when now >= expires).
    pub fn is_expired(&self, now: i64) -> bool {
        now >= self.expires
    }

    /// The key with this Ed25519 public key, if the root has it.
    pub fn key_for(&self, public: &VerifyingKey) -> Option<&RootKey> {
        self.keys.values().find(|k| &k.public == public)
    }
}

/// Checks a rotation from the trusted root to the next, as the TUF client workflow (5.3.4 and
/// 5.3.5) and python-tuf's `update_root` do: the new version is exactly one more, and the new
/// root is signed by the threshold of the trusted root's `root` role AND of its own. Expiry is
/// not checked here: an expired intermediate root may still vouch for the next one; only the
/// last root of a chain must be current.
pub fn verify_rotation(trusted: &Root, new: &Root) -> Result<(), RotationError> {
    if new.version <= trusted.version {
        return Err(RotationError::Rollback {
            new: new.version,
            trusted: trusted.version,
        });
    }
    if new.version != trusted.version + 1 {
        return Err(RotationError::Gap {
            new: new.version,
            trusted: trusted.version,
        });
    }
    let old = trusted.verification(ROOT, new);
    if !old.ok() {
        return Err(RotationError::OldKeys {
            trusted: trusted.version,
            shortfall: old.describe(),
        });
    }
    let own = new.verification(ROOT, new);
    if !own.ok() {
        return Err(RotationError::OwnKeys {
            shortfall: own.describe(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> SecretKey {
        SecretKey::generate().unwrap()
    }

    fn root_of(sks: &[&SecretKey], threshold: usize, version: u64) -> Root {
        let pks: Vec<RootKey> = sks
            .iter()
            .map(|k| RootKey::from_minisign(&k.public_key()))
            .collect();
        Root::build(version, 4_102_444_800, (&pks, threshold), (&pks, threshold)).unwrap()
    }

    #[test]
    fn keyid_and_signature_are_securesystemslibs() {
        // Known answers from the venv: Ed25519PrivateKey.from_private_bytes(bytes([7] * 32)),
        // SSlibKey.from_crypto(key.public_key()).keyid, and CryptoSigner(...).sign(b'{"a":1}').
        let seed = [7u8; 32];
        let signing = ed25519_dalek::SigningKey::from_bytes(&seed);
        let public = signing.verifying_key();
        assert_eq!(
            hex::encode(public.as_bytes()),
            "ea4a6c63e29c520abef5507b132ec5f9954776aebebe7b92421eea691446d22c"
        );
        assert_eq!(
            keyid(&public),
            "bfe1a83869e5bf574e3ff3acbb83f840de84a990d10059f3096f0bf4f2b90c10"
        );
        let sig: [u8; 64] = hex::decode(
            "c3c84c44582dc618e2d0e6ee5aa8306b397910e03cffb1e80fb12cfe46309642\
             fb09dac35a35cc58268092e906759bda8068d90ace76a8bd6fc179754e58ab0e",
        )
        .unwrap()
        .try_into()
        .unwrap();
        assert!(keys::verify_raw(&public, br#"{"a":1}"#, &sig));
        assert!(!keys::verify_raw(&public, br#"{"a":2}"#, &sig));
    }

    #[test]
    fn build_sign_parse_round_trip() {
        let (a, b) = (key(), key());
        let mut r = root_of(&[&a, &b], 2, 1);
        assert!(!r.verification(ROOT, &r).ok());
        assert!(!r.sign(&a));
        assert!(
            r.sign(&a),
            "the same key signing again replaces its signature"
        );
        assert_eq!(r.signatures.len(), 1);
        r.sign(&b);
        assert!(r.verification(ROOT, &r).ok());
        let again = Root::parse(&r.to_bytes()).unwrap();
        assert_eq!(again.canonical_signed(), r.canonical_signed());
        assert!(again.verification(ROOT, &again).ok());
        assert_eq!(again.role(TARGETS).threshold, 2);
        assert!(
            again.role_keys(TARGETS)[0].minisign_id.is_some(),
            "minisign ids are kept"
        );
    }

    #[test]
    fn hostile_roots_are_refused() {
        let a = key();
        let mut r = root_of(&[&a], 1, 1);
        r.sign(&a);
        let good = String::from_utf8(r.to_bytes()).unwrap();
        let id = keyid(&a.public_key().key);
        let cases: Vec<(String, &str)> = vec![
            (
                good.replace("\"threshold\": 1", "\"threshold\": 0"),
                "threshold 0",
            ),
            (
                good.replace("\"threshold\": 1", "\"threshold\": 2"),
                "could never be met",
            ),
            (
                good.replacen("\"keytype\": \"ed25519\"", "\"keytype\": \"rsa\"", 1),
                "ed25519 keys",
            ),
            (
                good.replacen(
                    &format!("\"{id}\"\n    ]"),
                    &format!("\"{id}\",\n     \"{id}\"\n    ]"),
                    1,
                ),
                "twice",
            ),
            (
                good.replace("\"_type\": \"root\"", "\"_type\": \"targets\""),
                "not root metadata",
            ),
            (
                good.replace("\"version\": 1", "\"version\": 1.0"),
                "not an integer",
            ),
            (
                good.replace("\"spec_version\": \"1.0.31\"", "\"spec_version\": \"2.0\""),
                "TUF 1.x",
            ),
            (
                good.replace(
                    "\"consistent_snapshot\": true",
                    "\"consistent_snapshot\": true, \"evil\": 1",
                ),
                "unknown field",
            ),
        ];
        for (text, want) in cases {
            assert_ne!(text, good, "the case for {want:?} must change the file");
            let e = Root::parse(text.as_bytes()).unwrap_err().to_string();
            assert!(e.contains(want), "{want:?}: {e}");
        }
        // A key listed under an id that is not its own.
        let other = "0".repeat(64);
        let text = good.replace(&id, &other);
        let e = Root::parse(text.as_bytes()).unwrap_err().to_string();
        assert!(e.contains("does not match its key"), "{e}");
        // The same key id twice in `keys` (a duplicate JSON key).
        let dup = good.replacen(
            &format!("\"keys\": {{\n   \"{id}\": {{"),
            &format!("\"keys\": {{\n   \"{id}\": {{}},\n   \"{id}\": {{"),
            1,
        );
        assert_ne!(dup, good);
        let e = Root::parse(dup.as_bytes()).unwrap_err().to_string();
        assert!(e.contains("appears twice"), "{e}");
        // Two signatures by one key id.
        let sig_obj = format!("\"keyid\": \"{id}\"");
        let start = good.find("\"signatures\": [").unwrap();
        let end = good[start..].find(']').unwrap() + start;
        let body = &good[start + "\"signatures\": [".len()..end];
        assert!(body.contains(&sig_obj));
        let twice = format!(
            "{}{body},{body}{}",
            &good[..start + "\"signatures\": [".len()],
            &good[end..]
        );
        let e = Root::parse(twice.as_bytes()).unwrap_err().to_string();
        assert!(e.contains("two signatures"), "{e}");
    }

    #[test]
    fn rotation_needs_both_thresholds_and_the_next_version() {
        let (a, b, c) = (key(), key(), key());
        let mut v1 = root_of(&[&a], 1, 1);
        v1.sign(&a);
        let mut v2 = root_of(&[&b, &c], 1, 2);
        // Only the new keys: refused.
        v2.sign(&b);
        let e = verify_rotation(&v1, &v2).unwrap_err().to_string();
        assert!(e.contains("version 1's root keys"), "{e}");
        // Only the old key: refused.
        let mut old_only = root_of(&[&b, &c], 1, 2);
        old_only.sign(&a);
        let e = verify_rotation(&v1, &old_only).unwrap_err().to_string();
        assert!(e.contains("its own root keys"), "{e}");
        // Both: accepted.
        v2.sign(&a);
        verify_rotation(&v1, &v2).unwrap();
        // Skipping a version, or going back: refused.
        let mut v3 = root_of(&[&a], 1, 3);
        v3.sign(&a);
        assert!(
            verify_rotation(&v1, &v3)
                .unwrap_err()
                .to_string()
                .contains("bring version 2")
        );
        assert!(
            verify_rotation(&v2, &v1)
                .unwrap_err()
                .to_string()
                .contains("rollback")
        );
        // The kind, not only the text.
        assert!(matches!(
            verify_rotation(&v2, &v1),
            Err(RotationError::Rollback { new: 1, trusted: 2 })
        ));
        assert!(matches!(
            verify_rotation(&v1, &v3),
            Err(RotationError::Gap { .. })
        ));
    }
}
