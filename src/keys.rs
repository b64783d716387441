//! Minisign-compatible key and signature files.
//!
//! `airlock` signs the manifests it carries across an air gap. The far side
//! of the gap may have nothing but a stock `minisign` binary, and the near
//! side may already hold keys made by `minisign -G`, so rather than invent a
//! format this module reads and writes minisign's own files, byte for byte:
//!
//! * public keys (`minisign.pub`): an untrusted comment line, then base64 of
//!   `"Ed"` ‖ key id (8 bytes) ‖ Ed25519 public key (32 bytes);
//! * secret keys (`minisign.key`): an untrusted comment line, then base64 of
//!   `"Ed"` ‖ kdf (`"Sc"` = scrypt, or two zero bytes = unencrypted) ‖
//!   `"B2"` ‖ salt (32) ‖ opslimit (u64 LE) ‖ memlimit (u64 LE) ‖
//!   key id (8) ‖ Ed25519 secret key (64) ‖ BLAKE2b-256 checksum (32), the
//!   last 104 bytes XORed with scrypt output when encrypted;
//! * signatures (`.minisig`): untrusted comment, base64 of algorithm ‖ key id
//!   ‖ signature, trusted comment, base64 of the "global" signature over
//!   signature ‖ trusted comment.
//!
//! We only ever *write* prehashed (`"ED"`) signatures, i.e. Ed25519 over
//! BLAKE2b-512 of the message, so multi-gigabyte model files can be signed
//! and verified by streaming ([`prehash`], [`sign_prehashed`],
//! [`verify_prehashed`]); legacy `"Ed"` signatures over the raw message are
//! still verified by [`verify`] because minisign accepts them by default.
//!
//! Every limit and quirk here was checked against minisign's C sources
//! (0.11 and 0.12) and against the real binary; the tests embed vectors made
//! with `/usr/bin/minisign` and shell out to it to prove that it accepts what
//! we write. Secret material is zeroized: decoded key bytes and scrypt output
//! live in [`Zeroizing`] buffers, [`SecretKey`] holds an
//! [`ed25519_dalek::SigningKey`] (which zeroizes itself on drop), and no
//! error message ever contains key bytes.

use std::fmt;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use blake2::digest::consts::U32;
use blake2::{Blake2b, Blake2b512, Digest};
use ed25519_dalek::{Signer as _, SigningKey, VerifyingKey};
use zeroize::{ZeroizeOnDrop, Zeroizing};

/// Prefix of the first line of every minisign file.
pub(crate) const UNTRUSTED_COMMENT_PREFIX: &str = "untrusted comment: ";
/// Prefix of the third line of a signature file.
pub(crate) const TRUSTED_COMMENT_PREFIX: &str = "trusted comment: ";
/// Comment minisign writes into secret key files (even unencrypted ones).
pub(crate) const SECRET_KEY_COMMENT: &str = "minisign encrypted secret key";
/// Longest untrusted comment minisign can read back: it reads the line with
/// `fgets` into 1024 bytes and fails unless the newline fits as well.
pub(crate) const UNTRUSTED_COMMENT_MAX_BYTES: usize = 1024 - 1 - 1 - UNTRUSTED_COMMENT_PREFIX.len();
/// Longest trusted comment minisign writes or reads (8192-byte buffer,
/// prefix, newline and NUL).
pub const TRUSTED_COMMENT_MAX_BYTES: usize = 8192 - 1 - 1 - TRUSTED_COMMENT_PREFIX.len();
/// Longest password `minisign` can read (`PASSWORDMAXBYTES` - NUL).
pub(crate) const PASSWORD_MAX_BYTES: usize = 1023;
/// libsodium's `crypto_pwhash_scryptsalsa208sha256_OPSLIMIT_SENSITIVE`,
/// which `minisign -G` uses.
pub(crate) const KDF_OPSLIMIT_SENSITIVE: u64 = 33_554_432;
/// libsodium's `crypto_pwhash_scryptsalsa208sha256_MEMLIMIT_SENSITIVE`
/// (1 GiB), which `minisign -G` uses.
pub(crate) const KDF_MEMLIMIT_SENSITIVE: u64 = 1_073_741_824;

/// Largest scrypt memory (128·r·N bytes) we agree to spend decrypting a key.
/// minisign never writes more than its 1 GiB "sensitive" limit; a file
/// asking for more is hostile or from another tool.
const KDF_MAX_MEMORY: u128 = KDF_MEMLIMIT_SENSITIVE as u128;
/// Largest scrypt work (N·r·p) we agree to spend: twice minisign's 2^23.
const KDF_MAX_WORK: u128 = 1 << 24;

const SIGALG: [u8; 2] = *b"Ed";
const SIGALG_HASHED: [u8; 2] = *b"ED";
const KDFALG: [u8; 2] = *b"Sc";
const KDFNONE: [u8; 2] = [0, 0];
const CHKALG: [u8; 2] = *b"B2";

const KEYNUM_BYTES: usize = 8;
const PUBKEY_STRUCT_BYTES: usize = 2 + KEYNUM_BYTES + 32;
const SIG_STRUCT_BYTES: usize = 2 + KEYNUM_BYTES + 64;
const SALT_BYTES: usize = 32;
const CHK_BYTES: usize = 32;
const KEYNUM_SK_BYTES: usize = KEYNUM_BYTES + 64 + CHK_BYTES;
// Offsets inside the 158-byte secret key structure.
const SK_KDF_ALG: usize = 2;
const SK_CHK_ALG: usize = 4;
const SK_SALT: usize = 6;
const SK_OPSLIMIT: usize = SK_SALT + SALT_BYTES;
const SK_MEMLIMIT: usize = SK_OPSLIMIT + 8;
const SK_KEYNUM: usize = SK_MEMLIMIT + 8;
const SK_SECRET: usize = SK_KEYNUM + KEYNUM_BYTES;
const SK_CHK: usize = SK_SECRET + 64;
const SECKEY_STRUCT_BYTES: usize = SK_CHK + CHK_BYTES;

// SigningKey must wipe itself: SecretKey relies on it instead of a Drop impl.
const _: () = {
    const fn zeroizes_on_drop<T: ZeroizeOnDrop>() {}
    zeroizes_on_drop::<SigningKey>();
};

/// Everything that can go wrong reading, writing or checking keys and
/// signatures. Match on [`KeyError::kind`] to see through [`KeyError::File`].
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The text is not a well-formed minisign file; `line` is 1-based.
    #[error("malformed {what}, line {line}: {reason}")]
    Malformed {
        what: &'static str,
        line: usize,
        reason: String,
    },
    /// A well-formed file names a signature, KDF or checksum algorithm we do not implement.
    #[error("unsupported {what} algorithm {found}")]
    UnsupportedAlgorithm { what: &'static str, found: String },
    /// The password did not decrypt the secret key (its checksum did not match).
    #[error("wrong password for this secret key")]
    WrongPassword,
    /// The secret key is encrypted and no password was given.
    #[error("this secret key is encrypted; a password is required")]
    PasswordRequired,
    /// The password could not be typed into `minisign` (NUL, CR or LF, or too long).
    #[error("password unusable with minisign: {reason}")]
    UnusablePassword { reason: &'static str },
    /// The key file asks for scrypt parameters we refuse (too costly, or invalid).
    #[error("unsupported scrypt limits in secret key (opslimit {opslimit}, memlimit {memlimit})")]
    KdfLimits { opslimit: u64, memlimit: u64 },
    /// The signature was made by a different key than the one checking it.
    #[error("signature key id is {found} but the public key id is {expected}")]
    KeyIdMismatch { expected: String, found: String },
    /// The signature over the message (or its digest) does not verify.
    #[error("signature verification failed")]
    BadSignature,
    /// The signature over the trusted comment does not verify.
    #[error("trusted comment signature verification failed")]
    BadGlobalSignature,
    /// A comment cannot be put in a signature minisign would accept.
    #[error("invalid {which} comment: {reason}")]
    InvalidComment {
        which: &'static str,
        reason: CommentError,
    },
    /// The operating system's random number generator failed.
    #[error("random number generator failed: {reason}")]
    Random { reason: String },
    /// Reading or listing a file or directory failed.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// A trust directory holds no `*.pub` file.
    #[error("{}: no *.pub public key files in this directory", dir.display())]
    NoPublicKeys { dir: PathBuf },
    /// Two different public keys in a trust directory share a key id.
    #[error("key id {key_id} is used by two different keys: {} and {}", first.display(), second.display())]
    ConflictingKeyId {
        key_id: String,
        first: PathBuf,
        second: PathBuf,
    },
    /// Another error, found while reading the file at `path`.
    #[error("{}: {source}", path.display())]
    File {
        path: PathBuf,
        #[source]
        source: Box<KeyError>,
    },
}

impl KeyError {
    /// The underlying error, looking through any [`KeyError::File`] wrappers.
    pub fn kind(&self) -> &KeyError {
        match self {
            KeyError::File { source, .. } => source.kind(),
            other => other,
        }
    }

    pub(crate) fn in_file(self, path: &Path) -> KeyError {
        match self {
            // I/O errors already name their path.
            e @ KeyError::Io { .. } => e,
            e => KeyError::File {
                path: path.to_path_buf(),
                source: Box::new(e),
            },
        }
    }
}

fn malformed(what: &'static str, line: usize, reason: impl Into<String>) -> KeyError {
    KeyError::Malformed {
        what,
        line,
        reason: reason.into(),
    }
}

fn io_err(path: &Path, source: io::Error) -> KeyError {
    KeyError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn random_bytes(buf: &mut [u8]) -> Result<(), KeyError> {
    getrandom::getrandom(buf).map_err(|e| KeyError::Random {
        reason: e.to_string(),
    })
}

/// Minisign key ids print as the little-endian u64 in 16 uppercase hex digits, leading zeros
/// kept. That is what minisign writes since 0.12 ("zero-pad key identifiers", a deliberate
/// breaking change upstream); minisign 0.11, still what some distributions ship, wrote the same
/// number without its leading zeros (`%X`), so a 0.11 `.pub` comment may be shorter by the
/// zeros. One fixed width is what an operator can compare and grep; the number is the same.
fn key_id_to_hex(id: &[u8; 8]) -> String {
    format!("{:016X}", u64::from_le_bytes(*id))
}

/// Two algorithm bytes, shown without leaking anything but those bytes.
fn show_alg(bytes: &[u8]) -> String {
    if bytes.iter().all(|b| b.is_ascii_graphic()) {
        format!("\"{}\"", String::from_utf8_lossy(bytes))
    } else {
        format!("0x{}", hex::encode(bytes))
    }
}

/// Splits `text` into exactly `expected` lines. A final newline is optional;
/// CRLF line ends are accepted (as minisign does) but a CR anywhere else is
/// not (minisign 0.12 rejects it, 0.11 silently truncates there).
fn split_lines<'a>(
    text: &'a str,
    what: &'static str,
    expected: usize,
) -> Result<Vec<&'a str>, KeyError> {
    let body = text.strip_suffix('\n').unwrap_or(text);
    let terminated = body.len() < text.len();
    let count = body.split('\n').count();
    let mut lines = Vec::with_capacity(expected);
    for (i, raw) in body.split('\n').enumerate() {
        let line_no = i + 1;
        if line_no > expected {
            return Err(malformed(
                what,
                line_no,
                format!("unexpected extra line (a {what} file has {expected} lines)"),
            ));
        }
        // A CR is accepted only as the first half of a CRLF line end: the last line of a text
        // without a final LF has no line end, so a CR there is a lone CR (FORMAT.md, section 8).
        let line = if i + 1 < count || terminated {
            raw.strip_suffix('\r').unwrap_or(raw)
        } else {
            raw
        };
        if line.contains('\r') {
            return Err(malformed(what, line_no, "carriage return inside line"));
        }
        if line.contains('\0') {
            return Err(malformed(what, line_no, "NUL byte inside line"));
        }
        lines.push(line);
    }
    if lines.len() < expected {
        return Err(malformed(
            what,
            lines.len() + 1,
            format!(
                "missing line (a {what} file has {expected} lines, found {})",
                lines.len()
            ),
        ));
    }
    Ok(lines)
}

/// Base64-decodes `s`, which must encode exactly `N` bytes, into `out`.
/// Error messages give lengths and offsets only, never content.
fn decode_exact(s: &str, out: &mut [u8], what: &'static str, line: usize) -> Result<(), KeyError> {
    let want_chars = out.len().div_ceil(3) * 4;
    if s.len() != want_chars {
        return Err(malformed(
            what,
            line,
            format!(
                "expected {want_chars} base64 characters ({} bytes), found {}",
                out.len(),
                s.len()
            ),
        ));
    }
    // The decoder wants room for its over-estimate; decode into a wiped scratch
    // buffer so secret key bytes never sit in an unzeroized allocation.
    let mut buf = Zeroizing::new(vec![0u8; base64::decoded_len_estimate(s.len())]);
    let n = B64.decode_slice(s, &mut buf[..]).map_err(|e| {
        let reason = match e {
            base64::DecodeSliceError::DecodeError(base64::DecodeError::InvalidByte(off, _)) => {
                format!("invalid base64 character at column {}", off + 1)
            }
            base64::DecodeSliceError::DecodeError(base64::DecodeError::InvalidLastSymbol(
                off,
                _,
            )) => format!("non-canonical base64 ending at column {}", off + 1),
            base64::DecodeSliceError::DecodeError(base64::DecodeError::InvalidPadding) => {
                "invalid base64 padding".to_string()
            }
            _ => "invalid base64".to_string(),
        };
        malformed(what, line, reason)
    })?;
    if n != out.len() {
        return Err(malformed(
            what,
            line,
            format!("base64 decodes to {n} bytes, expected {}", out.len()),
        ));
    }
    out.copy_from_slice(&buf[..n]);
    Ok(())
}

fn strip_prefix_checked<'a>(
    line: &'a str,
    prefix: &str,
    what: &'static str,
    line_no: usize,
) -> Result<&'a str, KeyError> {
    line.strip_prefix(prefix)
        .ok_or_else(|| malformed(what, line_no, format!("line must start with \"{prefix}\"")))
}

/// The most read of a key or signature file: minisign's are a few hundred bytes (a trusted
/// comment is at most 1024), and `/dev/zero` or a huge file named by mistake is not read.
const MAX_TEXT_FILE_BYTES: u64 = 64 << 10;

fn read_text(path: &Path, what: &'static str) -> Result<Zeroizing<String>, KeyError> {
    let bytes = Zeroizing::new(
        crate::fsio::read_capped(path, MAX_TEXT_FILE_BYTES, crate::fsio::Follow::Final)
            .map_err(|e| io_err(path, e.into()))?,
    );
    match std::str::from_utf8(&bytes) {
        Ok(s) => Ok(Zeroizing::new(s.to_owned())),
        Err(e) => {
            let line = bytes[..e.valid_up_to()]
                .iter()
                .filter(|&&b| b == b'\n')
                .count()
                + 1;
            Err(malformed(what, line, "not valid UTF-8").in_file(path))
        }
    }
}

// ---------------------------------------------------------------------------
// Public keys
// ---------------------------------------------------------------------------

/// A minisign public key: key id and Ed25519 verifying key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicKey {
    pub key_id: [u8; 8],
    pub key: VerifyingKey,
}

impl PublicKey {
    const WHAT: &'static str = "public key";

    /// Parses a `.pub` file (comment line + base64 line), or a bare base64
    /// line as printed by `minisign -G` for `minisign -P`. The comment's
    /// content is untrusted and ignored, like minisign does.
    pub fn parse(text: &str) -> Result<Self, KeyError> {
        let body = text.strip_suffix('\n').unwrap_or(text);
        let (b64, line_no) = if body.contains('\n') || body.starts_with(UNTRUSTED_COMMENT_PREFIX) {
            let lines = split_lines(text, Self::WHAT, 2)?;
            strip_prefix_checked(lines[0], UNTRUSTED_COMMENT_PREFIX, Self::WHAT, 1)?;
            (lines[1], 2)
        } else {
            (body.trim(), 1)
        };
        Self::from_base64_line(b64, line_no)
    }

    fn from_base64_line(b64: &str, line: usize) -> Result<Self, KeyError> {
        let mut raw = [0u8; PUBKEY_STRUCT_BYTES];
        decode_exact(b64, &mut raw, Self::WHAT, line)?;
        if raw[..2] != SIGALG {
            return Err(KeyError::UnsupportedAlgorithm {
                what: "public key signature",
                found: show_alg(&raw[..2]),
            });
        }
        let mut key_id = [0u8; 8];
        key_id.copy_from_slice(&raw[2..10]);
        let mut pk = [0u8; 32];
        pk.copy_from_slice(&raw[10..]);
        let key = VerifyingKey::from_bytes(&pk)
            .map_err(|_| malformed(Self::WHAT, line, "not a valid Ed25519 public key"))?;
        Ok(PublicKey { key_id, key })
    }

    /// The bare base64 form, as accepted by `minisign -P`.
    pub(crate) fn to_base64(&self) -> String {
        let mut raw = [0u8; PUBKEY_STRUCT_BYTES];
        raw[..2].copy_from_slice(&SIGALG);
        raw[2..10].copy_from_slice(&self.key_id);
        raw[10..].copy_from_slice(self.key.as_bytes());
        B64.encode(raw)
    }

    /// The `.pub` file exactly as `minisign -G` writes it.
    pub fn to_file_text(&self) -> String {
        format!(
            "{UNTRUSTED_COMMENT_PREFIX}minisign public key {}\n{}\n",
            self.key_id_hex(),
            self.to_base64()
        )
    }

    /// The key id as minisign (0.12 and later) shows it: the little-endian u64 in 16
    /// uppercase hex digits, leading zeros kept (see [`key_id_to_hex`]).
    pub fn key_id_hex(&self) -> String {
        key_id_to_hex(&self.key_id)
    }

    /// Reads and parses a `.pub` file; errors name the path.
    pub fn load(path: &Path) -> Result<Self, KeyError> {
        let text = read_text(path, Self::WHAT)?;
        Self::parse(&text).map_err(|e| e.in_file(path))
    }
}

// ---------------------------------------------------------------------------
// Secret keys
// ---------------------------------------------------------------------------

/// A minisign secret key. The Ed25519 key is wiped when this is dropped.
pub struct SecretKey {
    key_id: [u8; 8],
    signing: SigningKey,
}

impl fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SecretKey")
            .field("key_id", &key_id_to_hex(&self.key_id))
            .finish_non_exhaustive()
    }
}

/// The fields of a decoded secret key file that are not secret.
struct SecretKeyHeader {
    encrypted: bool,
}

impl SecretKey {
    const WHAT: &'static str = "secret key";

    /// A fresh key pair: Ed25519 seed and key id from the OS RNG.
    pub fn generate() -> Result<Self, KeyError> {
        let mut seed = Zeroizing::new([0u8; 32]);
        random_bytes(&mut seed[..])?;
        let mut key_id = [0u8; 8];
        random_bytes(&mut key_id)?;
        Ok(SecretKey {
            key_id,
            signing: SigningKey::from_bytes(&seed),
        })
    }

    /// The matching public key.
    pub fn public_key(&self) -> PublicKey {
        PublicKey {
            key_id: self.key_id,
            key: self.signing.verifying_key(),
        }
    }

    /// The 8-byte key id.
    pub fn key_id(&self) -> [u8; 8] {
        self.key_id
    }

    /// Whether a secret key file is password-protected (without decrypting).
    pub fn is_encrypted(text: &str) -> Result<bool, KeyError> {
        let mut raw = Zeroizing::new([0u8; SECKEY_STRUCT_BYTES]);
        let header = Self::decode(text, &mut raw)?;
        Ok(header.encrypted)
    }

    /// Decodes the file into `raw` and checks its algorithms.
    fn decode(
        text: &str,
        raw: &mut [u8; SECKEY_STRUCT_BYTES],
    ) -> Result<SecretKeyHeader, KeyError> {
        let lines = split_lines(text, Self::WHAT, 2)?;
        strip_prefix_checked(lines[0], UNTRUSTED_COMMENT_PREFIX, Self::WHAT, 1)?;
        decode_exact(lines[1], raw, Self::WHAT, 2)?;
        if raw[..2] != SIGALG {
            return Err(KeyError::UnsupportedAlgorithm {
                what: "secret key signature",
                found: show_alg(&raw[..2]),
            });
        }
        if raw[SK_CHK_ALG..SK_CHK_ALG + 2] != CHKALG {
            return Err(KeyError::UnsupportedAlgorithm {
                what: "secret key checksum",
                found: show_alg(&raw[SK_CHK_ALG..SK_CHK_ALG + 2]),
            });
        }
        let kdf = &raw[SK_KDF_ALG..SK_CHK_ALG];
        let encrypted = if kdf == KDFALG {
            true
        } else if kdf == KDFNONE {
            false
        } else {
            return Err(KeyError::UnsupportedAlgorithm {
                what: "secret key derivation",
                found: show_alg(kdf),
            });
        };
        Ok(SecretKeyHeader { encrypted })
    }

    /// Parses a secret key file. `password` is needed only if the key is
    /// encrypted (it is ignored otherwise); it is used byte for byte, as
    /// minisign uses the line typed at its prompt. Costs one scrypt run
    /// (about 1 GiB and a few seconds for minisign's keys) when encrypted.
    pub fn parse(text: &str, password: Option<&[u8]>) -> Result<Self, KeyError> {
        let mut raw = Zeroizing::new([0u8; SECKEY_STRUCT_BYTES]);
        let header = Self::decode(text, &mut raw)?;
        // `minisign -G -W` never computes the checksum and leaves it zero;
        // `minisign -C -W` keeps the real one. Accept both when unencrypted.
        let skip_checksum = !header.encrypted && raw[SK_CHK..].iter().all(|&b| b == 0);
        if header.encrypted {
            let password = password.ok_or(KeyError::PasswordRequired)?;
            let opslimit = le64(&raw[SK_OPSLIMIT..SK_OPSLIMIT + 8]);
            let memlimit = le64(&raw[SK_MEMLIMIT..SK_MEMLIMIT + 8]);
            let mut salt = [0u8; SALT_BYTES];
            salt.copy_from_slice(&raw[SK_SALT..SK_SALT + SALT_BYTES]);
            let stream = derive_stream(password, &salt, opslimit, memlimit)?;
            for (b, s) in raw[SK_KEYNUM..].iter_mut().zip(stream.iter()) {
                *b ^= s;
            }
        }
        let mut key_id = [0u8; 8];
        key_id.copy_from_slice(&raw[SK_KEYNUM..SK_KEYNUM + KEYNUM_BYTES]);
        let chk = Zeroizing::new(checksum(key_id, &raw[SK_SECRET..SK_SECRET + 64]));
        if !skip_checksum && !ct_eq(&chk[..], &raw[SK_CHK..]) {
            return Err(if header.encrypted {
                KeyError::WrongPassword
            } else {
                malformed(
                    Self::WHAT,
                    2,
                    "checksum does not match the key (corrupted file)",
                )
            });
        }
        let mut keypair = Zeroizing::new([0u8; 64]);
        keypair.copy_from_slice(&raw[SK_SECRET..SK_SECRET + 64]);
        let signing = SigningKey::from_keypair_bytes(&keypair).map_err(|_| {
            malformed(
                Self::WHAT,
                2,
                "public half of the secret key does not match its seed",
            )
        })?;
        Ok(SecretKey { key_id, signing })
    }

    /// Reads and parses a secret key file; errors name the path.
    pub fn load(path: &Path, password: Option<&[u8]>) -> Result<Self, KeyError> {
        let text = read_text(path, Self::WHAT)?;
        Self::parse(&text, password).map_err(|e| e.in_file(path))
    }

    /// The secret key file text. `None` writes it unencrypted with the same
    /// layout as `minisign -G -W` (kdf bytes, salt and limits all zero), but
    /// with a real checksum where minisign leaves zeros. `Some` encrypts it
    /// as `minisign -G` does: fresh salt, scrypt with libsodium's
    /// "sensitive" limits (about 1 GiB and a few seconds).
    pub fn to_file_text(&self, password: Option<&[u8]>) -> Result<String, KeyError> {
        self.to_file_text_with_kdf_limits(password, KDF_OPSLIMIT_SENSITIVE, KDF_MEMLIMIT_SENSITIVE)
    }

    /// Like [`SecretKey::to_file_text`] with explicit libsodium-style scrypt
    /// limits (minisign itself halves both when memory is short). The
    /// limits are ignored when `password` is `None`.
    pub fn to_file_text_with_kdf_limits(
        &self,
        password: Option<&[u8]>,
        opslimit: u64,
        memlimit: u64,
    ) -> Result<String, KeyError> {
        let mut raw = Zeroizing::new([0u8; SECKEY_STRUCT_BYTES]);
        raw[..2].copy_from_slice(&SIGALG);
        raw[SK_CHK_ALG..SK_CHK_ALG + 2].copy_from_slice(&CHKALG);
        raw[SK_KEYNUM..SK_KEYNUM + KEYNUM_BYTES].copy_from_slice(&self.key_id);
        let keypair = Zeroizing::new(self.signing.to_keypair_bytes());
        raw[SK_SECRET..SK_SECRET + 64].copy_from_slice(&keypair[..]);
        let chk = Zeroizing::new(checksum(self.key_id, &keypair[..]));
        raw[SK_CHK..].copy_from_slice(&chk[..]);
        match password {
            None => raw[SK_KDF_ALG..SK_CHK_ALG].copy_from_slice(&KDFNONE),
            Some(password) => {
                check_password_usable(password)?;
                raw[SK_KDF_ALG..SK_CHK_ALG].copy_from_slice(&KDFALG);
                let mut salt = [0u8; SALT_BYTES];
                random_bytes(&mut salt)?;
                raw[SK_SALT..SK_SALT + SALT_BYTES].copy_from_slice(&salt);
                raw[SK_OPSLIMIT..SK_OPSLIMIT + 8].copy_from_slice(&opslimit.to_le_bytes());
                raw[SK_MEMLIMIT..SK_MEMLIMIT + 8].copy_from_slice(&memlimit.to_le_bytes());
                let stream = derive_stream(password, &salt, opslimit, memlimit)?;
                for (b, s) in raw[SK_KEYNUM..].iter_mut().zip(stream.iter()) {
                    *b ^= s;
                }
            }
        }
        let b64 = Zeroizing::new(B64.encode(&raw[..]));
        Ok(format!(
            "{UNTRUSTED_COMMENT_PREFIX}{SECRET_KEY_COMMENT}\n{}\n",
            b64.as_str()
        ))
    }
}

fn le64(bytes: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(bytes);
    u64::from_le_bytes(b)
}

/// BLAKE2b-256 over sig_alg ‖ key id ‖ secret key, as `seckey_compute_chk`.
fn checksum(key_id: [u8; 8], sk: &[u8]) -> [u8; CHK_BYTES] {
    let mut h = Blake2b::<U32>::new();
    h.update(SIGALG);
    h.update(key_id);
    h.update(sk);
    h.finalize().into()
}

fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Rejects passwords that could never be typed at minisign's prompt, which
/// reads one line with `fgets` into 1024 bytes and stops at NUL.
fn check_password_usable(password: &[u8]) -> Result<(), KeyError> {
    if password.len() > PASSWORD_MAX_BYTES {
        return Err(KeyError::UnusablePassword {
            reason: "longer than 1023 bytes",
        });
    }
    if password.iter().any(|&b| b == b'\n' || b == b'\r' || b == 0) {
        return Err(KeyError::UnusablePassword {
            reason: "contains a NUL, CR or LF byte",
        });
    }
    Ok(())
}

/// libsodium's `pickparams`: (log2 N, r, p) from opslimit and memlimit, as
/// `crypto_pwhash_scryptsalsa208sha256` computes them.
fn pick_params(opslimit: u64, memlimit: u64) -> (u32, u32, u32) {
    let opslimit = opslimit.max(32_768);
    let r: u32 = 8;
    let n_log2_for = |max_n: u64| {
        let mut n_log2 = 1u32;
        while n_log2 < 63 {
            if (1u64 << n_log2) > max_n / 2 {
                break;
            }
            n_log2 += 1;
        }
        n_log2
    };
    if opslimit < memlimit / 32 {
        let max_n = opslimit / (u64::from(r) * 4);
        (n_log2_for(max_n), r, 1)
    } else {
        let max_n = memlimit / (u64::from(r) * 128);
        let n_log2 = n_log2_for(max_n);
        let max_rp = ((opslimit / 4) / (1u64 << n_log2)).min(0x3fff_ffff);
        // max_rp <= 0x3fff_ffff, so this cannot truncate.
        (n_log2, r, (max_rp as u32) / r)
    }
}

/// The 104-byte scrypt keystream minisign XORs over key id ‖ sk ‖ checksum.
fn derive_stream(
    password: &[u8],
    salt: &[u8; SALT_BYTES],
    opslimit: u64,
    memlimit: u64,
) -> Result<Zeroizing<[u8; KEYNUM_SK_BYTES]>, KeyError> {
    let limits = KeyError::KdfLimits { opslimit, memlimit };
    let (n_log2, r, p) = pick_params(opslimit, memlimit);
    let n = 1u128 << n_log2;
    if p == 0
        || 128 * u128::from(r) * n > KDF_MAX_MEMORY
        || n * u128::from(r) * u128::from(p) > KDF_MAX_WORK
    {
        return Err(limits);
    }
    // `len` only matters for scrypt's PHC-string API; the raw function fills
    // whatever buffer it is given.
    let n_log2 = u8::try_from(n_log2).map_err(|_| KeyError::KdfLimits { opslimit, memlimit })?;
    let params = scrypt::Params::new(n_log2, r, p, 64)
        .map_err(|_| KeyError::KdfLimits { opslimit, memlimit })?;
    let mut out = Zeroizing::new([0u8; KEYNUM_SK_BYTES]);
    scrypt::scrypt(password, salt, &params, &mut out[..]).map_err(|_| limits)?;
    Ok(out)
}

// ---------------------------------------------------------------------------
// Signatures
// ---------------------------------------------------------------------------

/// Which message a signature covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SigAlgorithm {
    /// `"ED"`: Ed25519 over BLAKE2b-512 of the message (minisign's default).
    Prehashed,
    /// `"Ed"`: Ed25519 over the raw message (`minisign -S -l`).
    Legacy,
}

impl SigAlgorithm {
    fn tag(self) -> [u8; 2] {
        match self {
            SigAlgorithm::Prehashed => SIGALG_HASHED,
            SigAlgorithm::Legacy => SIGALG,
        }
    }
}

/// A parsed `.minisig` file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signature {
    pub algorithm: SigAlgorithm,
    pub key_id: [u8; 8],
    pub signature: [u8; 64],
    pub untrusted_comment: String,
    pub trusted_comment: String,
    pub global_signature: [u8; 64],
}

impl Signature {
    const WHAT: &'static str = "signature";

    /// Parses a `.minisig` file strictly: exactly four lines (final newline
    /// optional, CRLF accepted), both prefixes, exact base64 lengths, and
    /// comments minisign itself would accept.
    pub fn parse(text: &str) -> Result<Self, KeyError> {
        let w = Self::WHAT;
        let lines = split_lines(text, w, 4)?;
        let untrusted = strip_prefix_checked(lines[0], UNTRUSTED_COMMENT_PREFIX, w, 1)?;
        if untrusted.len() > UNTRUSTED_COMMENT_MAX_BYTES {
            return Err(malformed(
                w,
                1,
                format!("untrusted comment longer than {UNTRUSTED_COMMENT_MAX_BYTES} bytes"),
            ));
        }
        let mut raw = [0u8; SIG_STRUCT_BYTES];
        decode_exact(lines[1], &mut raw, w, 2)?;
        let algorithm = match [raw[0], raw[1]] {
            SIGALG_HASHED => SigAlgorithm::Prehashed,
            SIGALG => SigAlgorithm::Legacy,
            _ => {
                return Err(KeyError::UnsupportedAlgorithm {
                    what: "signature",
                    found: show_alg(&raw[..2]),
                });
            }
        };
        let trusted = strip_prefix_checked(lines[2], TRUSTED_COMMENT_PREFIX, w, 3)?;
        check_trusted_comment(trusted).map_err(|reason| malformed(w, 3, reason.to_string()))?;
        let mut global_signature = [0u8; 64];
        decode_exact(lines[3], &mut global_signature, w, 4)?;
        let mut key_id = [0u8; 8];
        key_id.copy_from_slice(&raw[2..10]);
        let mut signature = [0u8; 64];
        signature.copy_from_slice(&raw[10..]);
        Ok(Signature {
            algorithm,
            key_id,
            signature,
            untrusted_comment: untrusted.to_owned(),
            trusted_comment: trusted.to_owned(),
            global_signature,
        })
    }

    /// The `.minisig` text exactly as `minisign -S` writes it. Comments are
    /// written as they are; [`sign`] is what guarantees they are valid.
    pub fn to_file_text(&self) -> String {
        let mut raw = [0u8; SIG_STRUCT_BYTES];
        raw[..2].copy_from_slice(&self.algorithm.tag());
        raw[2..10].copy_from_slice(&self.key_id);
        raw[10..].copy_from_slice(&self.signature);
        format!(
            "{UNTRUSTED_COMMENT_PREFIX}{}\n{}\n{TRUSTED_COMMENT_PREFIX}{}\n{}\n",
            self.untrusted_comment,
            B64.encode(raw),
            self.trusted_comment,
            B64.encode(self.global_signature)
        )
    }

    /// The key id in minisign's hex form.
    pub fn key_id_hex(&self) -> String {
        key_id_to_hex(&self.key_id)
    }

    /// Reads and parses a `.minisig` file; errors name the path.
    pub fn load(path: &Path) -> Result<Self, KeyError> {
        let text = read_text(path, Self::WHAT)?;
        Self::parse(&text).map_err(|e| e.in_file(path))
    }
}

/// Why a comment cannot be put in a signature minisign would accept.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CommentError {
    /// A trusted comment over [`TRUSTED_COMMENT_MAX_BYTES`].
    #[error("trusted comment longer than {TRUSTED_COMMENT_MAX_BYTES} bytes")]
    TrustedTooLong,
    /// A trusted comment with a control character other than TAB.
    #[error("trusted comment contains a control character")]
    TrustedControl,
    /// An untrusted comment over [`UNTRUSTED_COMMENT_MAX_BYTES`].
    #[error("untrusted comment longer than {UNTRUSTED_COMMENT_MAX_BYTES} bytes")]
    UntrustedTooLong,
    /// An untrusted comment with a line break or NUL.
    #[error("untrusted comment contains CR, LF or NUL")]
    UntrustedLineBreak,
}

/// A trusted comment must fit minisign's buffer and pass minisign 0.12's
/// `is_printable` (no control characters except TAB).
fn check_trusted_comment(c: &str) -> Result<(), CommentError> {
    if c.len() > TRUSTED_COMMENT_MAX_BYTES {
        return Err(CommentError::TrustedTooLong);
    }
    if c.chars().any(|ch| ch != '\t' && ch.is_control()) {
        return Err(CommentError::TrustedControl);
    }
    Ok(())
}

fn check_untrusted_comment(c: &str) -> Result<(), CommentError> {
    if c.len() > UNTRUSTED_COMMENT_MAX_BYTES {
        return Err(CommentError::UntrustedTooLong);
    }
    if c.contains(['\r', '\n', '\0']) {
        return Err(CommentError::UntrustedLineBreak);
    }
    Ok(())
}

/// BLAKE2b-512 of everything `reader` yields: the message a prehashed
/// (`"ED"`) signature covers. Reads in 64 KiB chunks.
pub fn prehash(mut reader: impl Read) -> io::Result<[u8; 64]> {
    let mut h = Blake2b512::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => h.update(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(h.finalize().into())
}

/// [`prehash`] of a file; errors name the path.
pub fn prehash_file(path: &Path) -> Result<[u8; 64], KeyError> {
    let (file, _) = crate::fsio::open_regular(path, crate::fsio::Follow::Final)
        .map_err(|e| io_err(path, e.into()))?;
    prehash(file).map_err(|e| io_err(path, e))
}

/// Signs `message` the way `minisign -S` does (prehashed, `"ED"`). Fails if
/// a comment contains CR/LF (or, for the trusted comment, any control
/// character but TAB) or is longer than minisign can read back.
pub fn sign(
    sk: &SecretKey,
    message: &[u8],
    untrusted_comment: &str,
    trusted_comment: &str,
) -> Result<Signature, KeyError> {
    let digest: [u8; 64] = Blake2b512::digest(message).into();
    sign_prehashed(sk, &digest, untrusted_comment, trusted_comment)
}

/// [`sign`] given the message's [`prehash`] digest.
pub fn sign_prehashed(
    sk: &SecretKey,
    digest: &[u8; 64],
    untrusted_comment: &str,
    trusted_comment: &str,
) -> Result<Signature, KeyError> {
    check_untrusted_comment(untrusted_comment).map_err(|reason| KeyError::InvalidComment {
        which: "untrusted",
        reason,
    })?;
    check_trusted_comment(trusted_comment).map_err(|reason| KeyError::InvalidComment {
        which: "trusted",
        reason,
    })?;
    let signature = sk.signing.sign(digest).to_bytes();
    let global_signature = sk
        .signing
        .sign(&global_message(&signature, trusted_comment))
        .to_bytes();
    Ok(Signature {
        algorithm: SigAlgorithm::Prehashed,
        key_id: sk.key_id,
        signature,
        untrusted_comment: untrusted_comment.to_owned(),
        trusted_comment: trusted_comment.to_owned(),
        global_signature,
    })
}

fn global_message(signature: &[u8; 64], trusted_comment: &str) -> Vec<u8> {
    let mut m = Vec::with_capacity(64 + trusted_comment.len());
    m.extend_from_slice(signature);
    m.extend_from_slice(trusted_comment.as_bytes());
    m
}

/// Verifies like `minisign -V`: key id first, then the signature over the
/// message (prehashed or legacy), then the signature over the trusted comment.
pub fn verify(pk: &PublicKey, sig: &Signature, message: &[u8]) -> Result<(), KeyError> {
    check_key_id(pk, sig)?;
    match sig.algorithm {
        SigAlgorithm::Prehashed => {
            let digest: [u8; 64] = Blake2b512::digest(message).into();
            check_ed25519(pk, &digest, &sig.signature).map_err(|_| KeyError::BadSignature)?;
        }
        SigAlgorithm::Legacy => {
            check_ed25519(pk, message, &sig.signature).map_err(|_| KeyError::BadSignature)?;
        }
    }
    check_global(pk, sig)
}

/// [`verify`] given the message's [`prehash`] digest. A legacy signature
/// needs the whole message, so it is refused with `UnsupportedAlgorithm`.
pub fn verify_prehashed(
    pk: &PublicKey,
    sig: &Signature,
    digest: &[u8; 64],
) -> Result<(), KeyError> {
    check_key_id(pk, sig)?;
    if sig.algorithm != SigAlgorithm::Prehashed {
        return Err(KeyError::UnsupportedAlgorithm {
            what: "signature (legacy, not prehashed)",
            found: show_alg(&SIGALG),
        });
    }
    check_ed25519(pk, digest, &sig.signature).map_err(|_| KeyError::BadSignature)?;
    check_global(pk, sig)
}

fn check_key_id(pk: &PublicKey, sig: &Signature) -> Result<(), KeyError> {
    if sig.key_id != pk.key_id {
        return Err(KeyError::KeyIdMismatch {
            expected: pk.key_id_hex(),
            found: sig.key_id_hex(),
        });
    }
    Ok(())
}

fn check_global(pk: &PublicKey, sig: &Signature) -> Result<(), KeyError> {
    check_ed25519(
        pk,
        &global_message(&sig.signature, &sig.trusted_comment),
        &sig.global_signature,
    )
    .map_err(|_| KeyError::BadGlobalSignature)
}

/// A plain Ed25519 signature of `message` (no prehash, no minisign framing): what TUF's
/// `ed25519` scheme signs, over the canonical JSON of a metadata object.
pub fn sign_raw(sk: &SecretKey, message: &[u8]) -> [u8; 64] {
    sk.signing.sign(message).to_bytes()
}

/// Checks a plain Ed25519 signature strictly (as [`verify`] checks minisign's): what TUF's
/// `ed25519` scheme verifies.
pub fn verify_raw(key: &VerifyingKey, message: &[u8], signature: &[u8; 64]) -> bool {
    key.verify_strict(message, &ed25519_dalek::Signature::from_bytes(signature))
        .is_ok()
}

/// Strict Ed25519 verification (canonical S, no small-order R or key), the
/// checks libsodium's `crypto_sign_verify_detached` makes.
fn check_ed25519(
    pk: &PublicKey,
    msg: &[u8],
    sig: &[u8; 64],
) -> Result<(), ed25519_dalek::SignatureError> {
    pk.key
        .verify_strict(msg, &ed25519_dalek::Signature::from_bytes(sig))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::fs;
    use std::io::Write as _;
    use std::process::{Command, Output, Stdio};
    use std::sync::{Mutex, MutexGuard};

    // Known-answer vectors made with Debian's /usr/bin/minisign 0.11:
    //   minisign -G -W -p unenc.pub -s unenc.key
    //   printf 'correct horse\ncorrect horse\n' | minisign -G -p enc.pub -s enc.key
    //   cp enc.key enc-decrypted.key
    //   echo 'correct horse' | minisign -C -W -s enc-decrypted.key
    //   printf 'airlock known-answer message\nline two\n' > message.txt
    //   minisign -S -s unenc.key -m message.txt -x unenc.minisig \
    //     -c "airlock test vector" -t "$(printf 'timestamp:1700000000\tfile:message.txt\thashed')"
    //   minisign -S -l -s unenc.key -m message.txt -x unenc-legacy.minisig \
    //     -c "airlock legacy vector" -t "legacy trusted comment"
    //   echo 'correct horse' | minisign -S -s enc.key -m message.txt -x enc.minisig \
    //     -t "signed with the encrypted key"
    const MESSAGE: &[u8] = b"airlock known-answer message\nline two\n";
    const PASSWORD: &[u8] = b"correct horse";

    const UNENC_PUB: &str = "untrusted comment: minisign public key D497470B34166912\n\
RWQSaRY0C0eX1GqSglUX97H7IoNm+CzqFGpiHoOd//gVINK4XGhT+k2s\n";
    const UNENC_KEY: &str = "untrusted comment: minisign encrypted secret key\n\
RWQAAEIyAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAEmkWNAtHl9RyunyXJlcKq2UMIFxGsutDTAnFRtjsH1LpA3Cz0WCq4WqSglUX97H7IoNm+CzqFGpiHoOd//gVINK4XGhT+k2sAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n";
    const ENC_PUB: &str = "untrusted comment: minisign public key B5A7E4BE74F66F7F\n\
RWR/b/Z0vuSntedg2d1tv8Q5sxg+riR1KnHBGzDG232mydLLnbUAZqdU\n";
    const ENC_KEY: &str = "untrusted comment: minisign encrypted secret key\n\
RWRTY0IyUba4d04rkPO2+CC5XWxf70pkkr9NH0nh7wIj9zGnLzgAAAACAAAAAAAAAEAAAAAAoyV33CPXG3CHDk5tY5XQ2DYbkgT9D+AkVorEDXI01TBiEfwJtFqNjXtvc2XY1LgbDIUjfuUPivGYdk/H6D2hpcm1rJ5J6NVD0ktKohBnV9Lb1w+7fHltm0k+JqP0aQ349Id12ZCXll0=\n";
    /// ENC_KEY after `minisign -C -W`: kdf bytes zeroed, salt, limits and
    /// (real) checksum kept.
    const ENC_KEY_DECRYPTED: &str = "untrusted comment: minisign encrypted secret key\n\
RWQAAEIyUba4d04rkPO2+CC5XWxf70pkkr9NH0nh7wIj9zGnLzgAAAACAAAAAAAAAEAAAAAAf2/2dL7kp7UhpUalJ3Z0k60OAlehQNCzsJqwQPSkpwa0kVU6pQIWnedg2d1tv8Q5sxg+riR1KnHBGzDG232mydLLnbUAZqdUO9u/ibTM9M8gzkOnZ5nz5HglXoA78Bi6IvyuT9+f1O4=\n";
    const UNENC_SIG_UNTRUSTED: &str = "airlock test vector";
    const UNENC_SIG_TRUSTED: &str = "timestamp:1700000000\tfile:message.txt\thashed";
    const UNENC_SIG: &str = "untrusted comment: airlock test vector\n\
RUQSaRY0C0eX1Jjf8RsxUlniO9XQFCKqpuFFUNYAGfAbQ9bw+cQR/z6XGlNmjkpFDA3HwzZKjOXl6CeH66dsqkZx9ljbyvSNwA0=\n\
trusted comment: timestamp:1700000000\tfile:message.txt\thashed\n\
7tDhN/aWQtTqvjfApQShxl41U57nCO52kOC/X+s9ZKh37qCLaxjw3auhcg4iBzFAMuIGIx2SbRwmHk+bqLQ/Bg==\n";
    const UNENC_LEGACY_SIG: &str = "untrusted comment: airlock legacy vector\n\
RWQSaRY0C0eX1Hfv6c4dehfO4FoxGGEx46YvWa3FEazlpMU7NypmKCZqliunI1NTLkEogpq4cItGIs1bLZ9Wr8vLHP4WaRztDQ8=\n\
trusted comment: legacy trusted comment\n\
nvM6GQLLA3cEzHRacPZLyIgN41DumkgPXDEGx/iptBfA4erMrf4xgHwVIoNbvPu0mcc4i+b5lD7b/ua42KGcBQ==\n";
    const ENC_SIG: &str = "untrusted comment: signature from minisign secret key\n\
RUR/b/Z0vuSntTzERZlqOxV9fT1WnVfyeviZGvEDqBNSAJkQUqEDlgxsDuVWcaUMSb9Z1X5eCmo+4MSD7Mbzp0ny9OdWxhAdyAI=\n\
trusted comment: signed with the encrypted key\n\
4JfL6fLz722cGDzK4JlpjILrWK/03M2MJGkYFDQh+djiuPda9a2wt9Cza8BvW7vaPKw90BIDctD8Vg7ewu/aAg==\n";

    // Cheapest scrypt limits libsodium allows (N = 2^10): for tests that
    // exercise our own encryption without paying 1 GiB each time.
    const CHEAP_OPS: u64 = 32_768;
    const CHEAP_MEM: u64 = 16_777_216;

    /// Full-cost scrypt runs take 1 GiB each; run them one at a time.
    static SCRYPT_LOCK: Mutex<()> = Mutex::new(());
    fn heavy() -> MutexGuard<'static, ()> {
        SCRYPT_LOCK.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn key_line(text: &str) -> &str {
        text.lines().nth(1).expect("second line")
    }

    fn decode_sk(text: &str) -> Vec<u8> {
        B64.decode(key_line(text)).expect("base64")
    }

    fn encode_sk(raw: &[u8]) -> String {
        format!(
            "untrusted comment: {SECRET_KEY_COMMENT}\n{}\n",
            B64.encode(raw)
        )
    }

    // ---- known-answer vectors -------------------------------------------

    #[test]
    fn minisign_unencrypted_key_matches_its_public_key() {
        let sk = SecretKey::parse(UNENC_KEY, None).unwrap();
        let pk = PublicKey::parse(UNENC_PUB).unwrap();
        assert_eq!(sk.public_key(), pk);
        assert_eq!(sk.key_id(), pk.key_id);
        assert_eq!(pk.key_id_hex(), "D497470B34166912");
        assert_eq!(pk.key_id, [0x12, 0x69, 0x16, 0x34, 0x0b, 0x47, 0x97, 0xd4]);
        assert_eq!(pk.to_file_text(), UNENC_PUB);
        assert!(!SecretKey::is_encrypted(UNENC_KEY).unwrap());
        // A password for an unencrypted key is ignored, as minisign does.
        let again = SecretKey::parse(UNENC_KEY, Some(b"ignored")).unwrap();
        assert_eq!(again.public_key(), pk);
    }

    #[test]
    fn unencrypted_output_has_minisign_w_layout() {
        let sk = SecretKey::parse(UNENC_KEY, None).unwrap();
        let ours_text = sk.to_file_text(None).unwrap();
        assert_eq!(ours_text.lines().next(), UNENC_KEY.lines().next());
        let ours = decode_sk(&ours_text);
        let theirs = decode_sk(UNENC_KEY);
        assert_eq!(ours.len(), SECKEY_STRUCT_BYTES);
        // minisign -G -W: "Ed", 00 00, "B2", zero salt, zero limits ...
        assert_eq!(&theirs[..6], b"Ed\0\0B2");
        assert!(theirs[SK_SALT..SK_KEYNUM].iter().all(|&b| b == 0));
        // ... and it never computes the checksum.
        assert!(theirs[SK_CHK..].iter().all(|&b| b == 0));
        assert_eq!(ours[..SK_CHK], theirs[..SK_CHK]);
        let mut id = [0u8; 8];
        id.copy_from_slice(&ours[SK_KEYNUM..SK_SECRET]);
        assert_eq!(ours[SK_CHK..], checksum(id, &ours[SK_SECRET..SK_CHK]));
        let back = SecretKey::parse(&ours_text, None).unwrap();
        assert_eq!(back.public_key(), sk.public_key());
    }

    #[test]
    fn minisign_c_w_key_parses_and_checksum_is_enforced() {
        let enc_pub = PublicKey::parse(ENC_PUB).unwrap();
        let sk = SecretKey::parse(ENC_KEY_DECRYPTED, None).unwrap();
        assert_eq!(sk.public_key(), enc_pub);
        // The checksum minisign computed is BLAKE2b-256 over "Ed" || id || sk.
        let raw = decode_sk(ENC_KEY_DECRYPTED);
        let mut id = [0u8; 8];
        id.copy_from_slice(&raw[SK_KEYNUM..SK_SECRET]);
        assert_eq!(raw[SK_CHK..], checksum(id, &raw[SK_SECRET..SK_CHK]));
        // Signing with it reproduces minisign's signature made with ENC_KEY.
        let sig = sign(
            &sk,
            MESSAGE,
            "signature from minisign secret key",
            "signed with the encrypted key",
        )
        .unwrap();
        assert_eq!(sig.to_file_text(), ENC_SIG);
        // Corrupting the checksum or the key id is detected.
        for pos in [SK_CHK, SK_CHK + 31, SK_KEYNUM] {
            let mut bad = raw.clone();
            bad[pos] ^= 1;
            let err = SecretKey::parse(&encode_sk(&bad), None).unwrap_err();
            assert!(
                matches!(
                    err,
                    KeyError::Malformed {
                        what: "secret key",
                        line: 2,
                        ..
                    }
                ),
                "{err:?}"
            );
        }
    }

    #[test]
    fn minisign_encrypted_key_needs_the_password() {
        assert!(SecretKey::is_encrypted(ENC_KEY).unwrap());
        assert!(matches!(
            SecretKey::parse(ENC_KEY, None),
            Err(KeyError::PasswordRequired)
        ));
        let raw = decode_sk(ENC_KEY);
        assert_eq!(&raw[..6], b"EdScB2");
        assert_eq!(le64(&raw[SK_OPSLIMIT..SK_MEMLIMIT]), KDF_OPSLIMIT_SENSITIVE);
        assert_eq!(le64(&raw[SK_MEMLIMIT..SK_KEYNUM]), KDF_MEMLIMIT_SENSITIVE);

        let _guard = heavy();
        let sk = SecretKey::parse(ENC_KEY, Some(PASSWORD)).unwrap();
        assert_eq!(sk.public_key(), PublicKey::parse(ENC_PUB).unwrap());
        let sig = sign(
            &sk,
            MESSAGE,
            "signature from minisign secret key",
            "signed with the encrypted key",
        )
        .unwrap();
        assert_eq!(sig.to_file_text(), ENC_SIG);
        assert!(matches!(
            SecretKey::parse(ENC_KEY, Some(b"correct horse ")),
            Err(KeyError::WrongPassword)
        ));
    }

    #[test]
    fn minisign_signatures_verify_and_round_trip() {
        let unenc = PublicKey::parse(UNENC_PUB).unwrap();
        let enc = PublicKey::parse(ENC_PUB).unwrap();
        for (text, pk, alg) in [
            (UNENC_SIG, &unenc, SigAlgorithm::Prehashed),
            (UNENC_LEGACY_SIG, &unenc, SigAlgorithm::Legacy),
            (ENC_SIG, &enc, SigAlgorithm::Prehashed),
        ] {
            let sig = Signature::parse(text).unwrap();
            assert_eq!(sig.algorithm, alg);
            assert_eq!(sig.key_id, pk.key_id);
            verify(pk, &sig, MESSAGE).unwrap();
            assert_eq!(sig.to_file_text(), text);
        }
        let sig = Signature::parse(UNENC_SIG).unwrap();
        assert_eq!(sig.untrusted_comment, UNENC_SIG_UNTRUSTED);
        assert_eq!(sig.trusted_comment, UNENC_SIG_TRUSTED);
        let digest = prehash(MESSAGE).unwrap();
        verify_prehashed(&unenc, &sig, &digest).unwrap();
        // A legacy signature cannot be checked against a digest.
        let legacy = Signature::parse(UNENC_LEGACY_SIG).unwrap();
        assert!(matches!(
            verify_prehashed(&unenc, &legacy, &digest),
            Err(KeyError::UnsupportedAlgorithm { .. })
        ));
    }

    #[test]
    fn our_signature_is_byte_identical_to_minisign() {
        let sk = SecretKey::parse(UNENC_KEY, None).unwrap();
        let sig = sign(&sk, MESSAGE, UNENC_SIG_UNTRUSTED, UNENC_SIG_TRUSTED).unwrap();
        assert_eq!(sig.to_file_text(), UNENC_SIG);
        let digest = prehash(MESSAGE).unwrap();
        let sig2 = sign_prehashed(&sk, &digest, UNENC_SIG_UNTRUSTED, UNENC_SIG_TRUSTED).unwrap();
        assert_eq!(sig2, sig);
    }

    // ---- tampering ------------------------------------------------------

    #[test]
    fn tampering_fails_with_the_right_error() {
        let pk = PublicKey::parse(UNENC_PUB).unwrap();
        for text in [UNENC_SIG, UNENC_LEGACY_SIG] {
            let good = Signature::parse(text).unwrap();
            verify(&pk, &good, MESSAGE).unwrap();
            // Any bit of the message.
            for i in 0..MESSAGE.len() {
                for bit in [0x01u8, 0x80] {
                    let mut m = MESSAGE.to_vec();
                    m[i] ^= bit;
                    assert!(matches!(
                        verify(&pk, &good, &m),
                        Err(KeyError::BadSignature)
                    ));
                }
            }
            let mut longer = MESSAGE.to_vec();
            longer.push(b'\n');
            assert!(matches!(
                verify(&pk, &good, &longer),
                Err(KeyError::BadSignature)
            ));
            assert!(matches!(
                verify(&pk, &good, &MESSAGE[..MESSAGE.len() - 1]),
                Err(KeyError::BadSignature)
            ));
            // Any byte of the signature.
            for i in 0..64 {
                let mut s = good.clone();
                s.signature[i] ^= 0x04;
                assert!(matches!(
                    verify(&pk, &s, MESSAGE),
                    Err(KeyError::BadSignature)
                ));
            }
            // Any byte of the global signature.
            for i in 0..64 {
                let mut s = good.clone();
                s.global_signature[i] ^= 0x04;
                assert!(matches!(
                    verify(&pk, &s, MESSAGE),
                    Err(KeyError::BadGlobalSignature)
                ));
            }
            // Any byte of the trusted comment, or its length.
            let tc = good.trusted_comment.clone();
            for i in 0..tc.len() {
                let mut bytes = tc.clone().into_bytes();
                bytes[i] = if bytes[i] == b'x' { b'y' } else { b'x' };
                let mut s = good.clone();
                s.trusted_comment = String::from_utf8(bytes).unwrap();
                assert!(matches!(
                    verify(&pk, &s, MESSAGE),
                    Err(KeyError::BadGlobalSignature)
                ));
            }
            for changed in [
                format!("{tc} "),
                tc[..tc.len() - 1].to_string(),
                String::new(),
            ] {
                let mut s = good.clone();
                s.trusted_comment = changed;
                assert!(matches!(
                    verify(&pk, &s, MESSAGE),
                    Err(KeyError::BadGlobalSignature)
                ));
            }
            // Swapping the algorithm changes what was signed.
            let mut s = good.clone();
            s.algorithm = match s.algorithm {
                SigAlgorithm::Prehashed => SigAlgorithm::Legacy,
                SigAlgorithm::Legacy => SigAlgorithm::Prehashed,
            };
            assert!(matches!(
                verify(&pk, &s, MESSAGE),
                Err(KeyError::BadSignature)
            ));
            // The untrusted comment is not covered.
            let mut s = good.clone();
            s.untrusted_comment = "anything at all".into();
            verify(&pk, &s, MESSAGE).unwrap();
        }
    }

    #[test]
    fn no_edit_of_a_signed_line_still_verifies() {
        let pk = PublicKey::parse(UNENC_PUB).unwrap();
        let good = Signature::parse(UNENC_SIG).unwrap();
        let first_line_end = UNENC_SIG.find('\n').unwrap();
        let bytes = UNENC_SIG.as_bytes();
        for i in first_line_end + 1..bytes.len() {
            for repl in [
                b'A', b'z', b'0', b'+', b'/', b'=', b' ', b'\t', b'\n', b'\r',
            ] {
                if bytes[i] == repl {
                    continue;
                }
                let mut t = bytes.to_vec();
                t[i] = repl;
                let t = String::from_utf8(t).unwrap();
                // An edit may only verify if it changed nothing but line
                // endings (e.g. the final LF turned into a CR).
                if let Ok(sig) = Signature::parse(&t)
                    && verify(&pk, &sig, MESSAGE).is_ok()
                {
                    assert_eq!(sig, good, "edit at byte {i} to {repl:#x} still verifies");
                    assert!(i == bytes.len() - 1, "edit at byte {i} to {repl:#x}");
                }
            }
        }
    }

    #[test]
    fn wrong_key_id_is_reported_first() {
        let enc = PublicKey::parse(ENC_PUB).unwrap();
        let sig = Signature::parse(UNENC_SIG).unwrap();
        match verify(&enc, &sig, b"not even the right message") {
            Err(KeyError::KeyIdMismatch { expected, found }) => {
                assert_eq!(expected, "B5A7E4BE74F66F7F");
                assert_eq!(found, "D497470B34166912");
            }
            other => panic!("expected KeyIdMismatch, got {other:?}"),
        }
        assert!(matches!(
            verify_prehashed(&enc, &sig, &[0; 64]),
            Err(KeyError::KeyIdMismatch { .. })
        ));
        // Right id, wrong key: the signature check catches it.
        let impostor = PublicKey {
            key_id: sig.key_id,
            key: enc.key,
        };
        assert!(matches!(
            verify(&impostor, &sig, MESSAGE),
            Err(KeyError::BadSignature)
        ));
    }

    /// The key id keeps its leading zeros, as minisign 0.12+ prints it, and a `.pub` written by
    /// minisign 0.11 (comment without the zeros) is the same key: the comment is never parsed.
    #[test]
    fn key_id_display_keeps_leading_zeros() {
        let mut pk = PublicKey::parse(UNENC_PUB).unwrap();
        pk.key_id = 0x0000_00AB_CDEF_0123u64.to_le_bytes();
        assert_eq!(pk.key_id_hex(), "000000ABCDEF0123");
        assert!(
            pk.to_file_text()
                .starts_with("untrusted comment: minisign public key 000000ABCDEF0123\n")
        );
        pk.key_id = 0x0123_4567_89AB_CDEFu64.to_le_bytes();
        assert_eq!(pk.key_id_hex(), "0123456789ABCDEF");
        pk.key_id = [0; 8];
        assert_eq!(pk.key_id_hex(), "0000000000000000");
        pk.key_id = 0x0000_00AB_CDEF_0123u64.to_le_bytes();
        let padded = pk.to_file_text();
        let v011 = padded.replace("key 000000ABCDEF0123", "key ABCDEF0123");
        assert_eq!(PublicKey::parse(&v011).unwrap(), pk);
        // The signature's key id is shown the same way.
        let mut sig = Signature::parse(UNENC_SIG).unwrap();
        sig.key_id = 0x0F00u64.to_le_bytes();
        assert_eq!(sig.key_id_hex(), "0000000000000F00");
    }

    // ---- our own keys ---------------------------------------------------

    #[test]
    fn generated_keys_round_trip_unencrypted() {
        let sk = SecretKey::generate().unwrap();
        let other = SecretKey::generate().unwrap();
        assert_ne!(sk.key_id(), other.key_id());
        assert_ne!(sk.public_key().key, other.public_key().key);
        let text = sk.to_file_text(None).unwrap();
        assert!(!SecretKey::is_encrypted(&text).unwrap());
        let back = SecretKey::parse(&text, None).unwrap();
        assert_eq!(back.public_key(), sk.public_key());
        let pk_text = sk.public_key().to_file_text();
        assert_eq!(PublicKey::parse(&pk_text).unwrap(), sk.public_key());
        assert_eq!(
            PublicKey::parse(&sk.public_key().to_base64()).unwrap(),
            sk.public_key()
        );
        let sig = sign(&back, b"m", "u", "t").unwrap();
        verify(&sk.public_key(), &sig, b"m").unwrap();
        assert_eq!(Signature::parse(&sig.to_file_text()).unwrap(), sig);
        assert!(!format!("{sk:?}").contains(&B64.encode(sk.signing.to_bytes())));
    }

    #[test]
    fn our_encrypted_key_round_trips() {
        let sk = SecretKey::generate().unwrap();
        let text = sk
            .to_file_text_with_kdf_limits(Some(PASSWORD), CHEAP_OPS, CHEAP_MEM)
            .unwrap();
        let raw = decode_sk(&text);
        assert_eq!(&raw[..6], b"EdScB2");
        assert!(SecretKey::is_encrypted(&text).unwrap());
        // Neither the key id nor the secret key appear in clear.
        assert_ne!(raw[SK_KEYNUM..SK_SECRET], sk.key_id());
        assert_ne!(raw[SK_SECRET..SK_SECRET + 32], sk.signing.to_bytes());
        let back = SecretKey::parse(&text, Some(PASSWORD)).unwrap();
        assert_eq!(back.public_key(), sk.public_key());
        assert_eq!(
            sign(&back, MESSAGE, "u", "t").unwrap(),
            sign(&sk, MESSAGE, "u", "t").unwrap()
        );
        assert!(matches!(
            SecretKey::parse(&text, Some(b"correct horsf")),
            Err(KeyError::WrongPassword)
        ));
        assert!(matches!(
            SecretKey::parse(&text, Some(b"")),
            Err(KeyError::WrongPassword)
        ));
        assert!(matches!(
            SecretKey::parse(&text, None),
            Err(KeyError::PasswordRequired)
        ));
        // A fresh salt each time.
        let text2 = sk
            .to_file_text_with_kdf_limits(Some(PASSWORD), CHEAP_OPS, CHEAP_MEM)
            .unwrap();
        assert_ne!(text, text2);
        // Empty passwords work (minisign accepts them too).
        let empty = sk
            .to_file_text_with_kdf_limits(Some(b""), CHEAP_OPS, CHEAP_MEM)
            .unwrap();
        assert_eq!(
            SecretKey::parse(&empty, Some(b"")).unwrap().public_key(),
            sk.public_key()
        );
    }

    #[test]
    fn passwords_minisign_cannot_type_are_refused() {
        let sk = SecretKey::generate().unwrap();
        for pw in [
            &b"a\nb"[..],
            b"a\rb",
            b"a\0b",
            &[b'x'; PASSWORD_MAX_BYTES + 1],
        ] {
            assert!(matches!(
                sk.to_file_text_with_kdf_limits(Some(pw), CHEAP_OPS, CHEAP_MEM),
                Err(KeyError::UnusablePassword { .. })
            ));
        }
    }

    /// minisign reads a password of up to 1023 bytes (its 1024-byte buffer less the NUL).
    #[test]
    fn the_longest_password_minisign_reads_is_usable() {
        assert_eq!(PASSWORD_MAX_BYTES, 1023);
        check_password_usable(&[b'x'; 1023]).unwrap();
        assert!(matches!(
            check_password_usable(&[b'x'; 1024]),
            Err(KeyError::UnusablePassword { .. })
        ));
    }

    #[test]
    fn pick_params_matches_libsodium() {
        // Values libsodium documents for its presets.
        assert_eq!(
            pick_params(KDF_OPSLIMIT_SENSITIVE, KDF_MEMLIMIT_SENSITIVE),
            (20, 8, 1)
        );
        assert_eq!(pick_params(524_288, 16_777_216), (14, 8, 1));
        assert_eq!(pick_params(CHEAP_OPS, CHEAP_MEM), (10, 8, 1));
        // minisign's fallback halves both limits.
        assert_eq!(
            pick_params(KDF_OPSLIMIT_SENSITIVE / 2, KDF_MEMLIMIT_SENSITIVE / 2),
            (19, 8, 1)
        );
        // opslimit-bound branch, and the opslimit floor.
        assert_eq!(pick_params(1_000_000, 1 << 30), (14, 8, 1));
        assert_eq!(pick_params(0, 1 << 30), (10, 8, 1));
        // memlimit-bound branch with p > 1.
        assert_eq!(pick_params(1 << 30, 1 << 24), (14, 8, 2048));
    }

    #[test]
    fn hostile_kdf_limits_are_refused_before_deriving() {
        let mut raw = decode_sk(ENC_KEY);
        for (ops, mem) in [
            (2 * KDF_OPSLIMIT_SENSITIVE, 2 * KDF_MEMLIMIT_SENSITIVE),
            (u64::MAX, u64::MAX),
            (1 << 30, 1 << 24),
        ] {
            raw[SK_OPSLIMIT..SK_MEMLIMIT].copy_from_slice(&ops.to_le_bytes());
            raw[SK_MEMLIMIT..SK_KEYNUM].copy_from_slice(&mem.to_le_bytes());
            match SecretKey::parse(&encode_sk(&raw), Some(PASSWORD)) {
                Err(KeyError::KdfLimits { opslimit, memlimit }) => {
                    assert_eq!((opslimit, memlimit), (ops, mem));
                }
                other => panic!("expected KdfLimits, got {other:?}"),
            }
        }
    }

    // ---- strict parsing -------------------------------------------------

    fn malformed_line(r: Result<impl fmt::Debug, KeyError>) -> usize {
        match r {
            Err(KeyError::Malformed { line, .. }) => line,
            other => panic!("expected Malformed, got {other:?}"),
        }
    }

    #[test]
    fn signature_parse_is_strict_and_cites_lines() {
        let lines: Vec<&str> = UNENC_SIG.lines().collect();
        let join = |ls: &[&str]| ls.join("\n");
        let good = Signature::parse(UNENC_SIG).unwrap();
        // Final newline optional; CRLF accepted.
        assert_eq!(Signature::parse(&join(&lines)).unwrap(), good);
        assert_eq!(
            Signature::parse(&UNENC_SIG.replace('\n', "\r\n")).unwrap(),
            good
        );
        // A lone CR at the very end (no LF after it) is not a line end.
        assert_eq!(
            malformed_line(Signature::parse(&format!("{}\r", join(&lines)))),
            4
        );
        // Line count.
        assert_eq!(malformed_line(Signature::parse("")), 2);
        assert_eq!(malformed_line(Signature::parse(&join(&lines[..3]))), 4);
        assert_eq!(
            malformed_line(Signature::parse(&format!("{UNENC_SIG}\n"))),
            5
        );
        assert_eq!(
            malformed_line(Signature::parse(&format!("{UNENC_SIG}x\n"))),
            5
        );
        // Prefixes.
        let mut l = lines.clone();
        l[0] = "untrusted comment:airlock";
        assert_eq!(malformed_line(Signature::parse(&join(&l))), 1);
        let mut l = lines.clone();
        l[2] = "Trusted comment: x";
        assert_eq!(malformed_line(Signature::parse(&join(&l))), 3);
        // Base64 lengths and content.
        let short = &lines[1][..lines[1].len() - 4];
        let mut l = lines.clone();
        l[1] = short;
        assert_eq!(malformed_line(Signature::parse(&join(&l))), 2);
        let padded = format!("{}AAAA", lines[3]);
        let mut l = lines.clone();
        l[3] = &padded;
        assert_eq!(malformed_line(Signature::parse(&join(&l))), 4);
        let bad_char = lines[1].replacen('R', "*", 1);
        let mut l = lines.clone();
        l[1] = &bad_char;
        assert_eq!(malformed_line(Signature::parse(&join(&l))), 2);
        let spaced = format!(" {}", &lines[3][1..]);
        let mut l = lines.clone();
        l[3] = &spaced;
        assert_eq!(malformed_line(Signature::parse(&join(&l))), 4);
        // Stray CR, control characters, over-long comments.
        let cr = UNENC_SIG.replacen("airlock", "air\rlock", 1);
        assert_eq!(malformed_line(Signature::parse(&cr)), 1);
        let ctl = UNENC_SIG.replacen("timestamp", "time\x1bstamp", 1);
        assert_eq!(malformed_line(Signature::parse(&ctl)), 3);
        let long_u = UNENC_SIG.replacen(
            UNENC_SIG_UNTRUSTED,
            &"u".repeat(UNTRUSTED_COMMENT_MAX_BYTES + 1),
            1,
        );
        assert_eq!(malformed_line(Signature::parse(&long_u)), 1);
        let long_t = UNENC_SIG.replacen(
            UNENC_SIG_TRUSTED,
            &"t".repeat(TRUSTED_COMMENT_MAX_BYTES + 1),
            1,
        );
        assert_eq!(malformed_line(Signature::parse(&long_t)), 3);
        // Unknown algorithm.
        let mut raw = B64.decode(lines[1]).unwrap();
        raw[..2].copy_from_slice(b"Xd");
        let other_alg = B64.encode(&raw);
        let mut l = lines.clone();
        l[1] = &other_alg;
        assert!(matches!(
            Signature::parse(&join(&l)),
            Err(KeyError::UnsupportedAlgorithm { .. })
        ));
    }

    #[test]
    fn public_key_parse_forms_and_errors() {
        let pk = PublicKey::parse(UNENC_PUB).unwrap();
        let b64 = key_line(UNENC_PUB);
        assert_eq!(pk.to_base64(), b64);
        for form in [
            b64.to_string(),
            format!("{b64}\n"),
            format!("  {b64} \n"),
            UNENC_PUB.trim_end().to_string(),
            UNENC_PUB.replace('\n', "\r\n"),
            // Comment content is untrusted and ignored (minisign 0.12 pads ids).
            format!("untrusted comment: whatever\n{b64}\n"),
        ] {
            assert_eq!(PublicKey::parse(&form).unwrap(), pk, "{form:?}");
        }
        assert_eq!(malformed_line(PublicKey::parse("")), 1);
        assert_eq!(
            malformed_line(PublicKey::parse(&format!("comment\n{b64}\n"))),
            1
        );
        assert_eq!(
            malformed_line(PublicKey::parse(
                "untrusted comment: minisign public key 1\n"
            )),
            2
        );
        assert_eq!(
            malformed_line(PublicKey::parse(&format!("{UNENC_PUB}{b64}\n"))),
            3
        );
        assert_eq!(malformed_line(PublicKey::parse(&b64[..b64.len() - 4])), 1);
        let mut raw = B64.decode(b64).unwrap();
        raw[..2].copy_from_slice(b"ED");
        assert!(matches!(
            PublicKey::parse(&B64.encode(&raw)),
            Err(KeyError::UnsupportedAlgorithm { .. })
        ));
    }

    #[test]
    fn secret_key_parse_errors() {
        let raw = decode_sk(UNENC_KEY);
        for (pos, value) in [(0usize, *b"ED"), (SK_KDF_ALG, *b"Sd"), (SK_CHK_ALG, *b"B3")] {
            let mut bad = raw.clone();
            bad[pos..pos + 2].copy_from_slice(&value);
            assert!(matches!(
                SecretKey::parse(&encode_sk(&bad), None),
                Err(KeyError::UnsupportedAlgorithm { .. })
            ));
            assert!(SecretKey::is_encrypted(&encode_sk(&bad)).is_err());
        }
        // The stored public half must belong to the seed.
        let mut bad = raw.clone();
        bad[SK_SECRET + 40] ^= 1;
        assert_eq!(malformed_line(SecretKey::parse(&encode_sk(&bad), None)), 2);
        assert_eq!(
            malformed_line(SecretKey::parse(key_line(UNENC_KEY), None)),
            2
        );
        assert_eq!(
            malformed_line(SecretKey::parse(
                &UNENC_KEY.replace("untrusted", "trusted"),
                None
            )),
            1
        );
        assert_eq!(
            malformed_line(SecretKey::parse(&format!("{UNENC_KEY}\n"), None)),
            3
        );
        // Error messages never echo key material.
        let mut bad = raw.clone();
        bad[SK_CHK] ^= 1;
        let bad_text = encode_sk(&bad);
        for text in [bad_text.clone(), bad_text.replacen("AAAA", "A*AA", 1)] {
            let msg = SecretKey::parse(&text, None).unwrap_err().to_string();
            let line = key_line(&text);
            for w in line.as_bytes().windows(8) {
                assert!(!msg.contains(std::str::from_utf8(w).unwrap()), "{msg}");
            }
        }
    }

    #[test]
    fn sign_rejects_comments_minisign_cannot_carry() {
        let sk = SecretKey::parse(UNENC_KEY, None).unwrap();
        for (u, t) in [
            ("a\nb", "t"),
            ("a\rb", "t"),
            ("u", "a\nb"),
            ("u", "a\rb"),
            ("u", "a\0b"),
            ("u", "bell\x07"),
            (&*"u".repeat(UNTRUSTED_COMMENT_MAX_BYTES + 1), "t"),
            ("u", &*"t".repeat(TRUSTED_COMMENT_MAX_BYTES + 1)),
        ] {
            assert!(
                matches!(
                    sign(&sk, MESSAGE, u, t),
                    Err(KeyError::InvalidComment { .. })
                ),
                "{u:?} {t:?}"
            );
        }
        // The longest comments minisign can read back are fine.
        let u = "u".repeat(UNTRUSTED_COMMENT_MAX_BYTES);
        let t = "t".repeat(TRUSTED_COMMENT_MAX_BYTES);
        let sig = sign(&sk, MESSAGE, &u, &t).unwrap();
        let parsed = Signature::parse(&sig.to_file_text()).unwrap();
        verify(&sk.public_key(), &parsed, MESSAGE).unwrap();
        let sig = sign(&sk, MESSAGE, "", "tab\tand ünïcødé").unwrap();
        verify(&sk.public_key(), &sig, MESSAGE).unwrap();
    }

    /// The comment limits are minisign's buffers, in numbers: a signature's first line must
    /// fit `fgets` into 1024 bytes with its LF and the NUL, the trusted comment line into 8192.
    /// (The tests above use the constants by name, so a wrong constant would pass them.)
    #[test]
    fn comment_limits_are_minisigns_buffers() {
        assert_eq!(UNTRUSTED_COMMENT_MAX_BYTES, 1003);
        assert_eq!(TRUSTED_COMMENT_MAX_BYTES, 8173);
        let sk = SecretKey::parse(UNENC_KEY, None).unwrap();
        let sig = sign(&sk, MESSAGE, &"u".repeat(1003), &"t".repeat(8173)).unwrap();
        let text = sig.to_file_text();
        let lines: Vec<&str> = text.split_inclusive('\n').collect();
        assert_eq!(lines[0].len() + 1, 1024);
        assert_eq!(lines[2].len() + 1, 8192);
        Signature::parse(&text).unwrap();
        for (u, t) in [(1004, 1), (1, 8174)] {
            let err = sign(&sk, MESSAGE, &"u".repeat(u), &"t".repeat(t)).unwrap_err();
            assert!(err.to_string().contains("longer than"), "{err}");
        }
    }

    /// Each base64 fault is named as what it is, with its column (the line alone would stay
    /// right if the reasons were lost).
    #[test]
    fn base64_faults_name_the_fault_and_column() {
        let lines: Vec<&str> = UNENC_SIG.lines().collect();
        let reason = |line2: &str| {
            let text = format!("{}\n{line2}\n{}\n{}\n", lines[0], lines[2], lines[3]);
            match Signature::parse(&text) {
                Err(KeyError::Malformed {
                    line: 2, reason, ..
                }) => reason,
                other => panic!("expected Malformed on line 2, got {other:?}"),
            }
        };
        let sig = lines[1];
        let mut bad = sig.to_string();
        bad.replace_range(10..11, "*");
        assert_eq!(reason(&bad), "invalid base64 character at column 11");
        // The last symbol before the padding, with bits set that the 74 bytes do not use.
        let alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let last = sig.len() - 2;
        let v = alphabet.find(&sig[last..=last]).unwrap();
        let mut bad = sig.to_string();
        bad.replace_range(last..=last, &alphabet[v + 1..v + 2]);
        assert_eq!(reason(&bad), "non-canonical base64 ending at column 99");
        let bad = format!("{}AAAA", &sig[..sig.len() - 4]);
        assert_eq!(reason(&bad), "base64 decodes to 75 bytes, expected 74");
    }

    /// Algorithm bytes are shown as text when printable, in hex otherwise.
    #[test]
    fn unsupported_algorithms_are_shown_as_their_bytes() {
        let found = |tag: [u8; 2]| {
            let mut raw = B64.decode(key_line(UNENC_PUB)).unwrap();
            raw[..2].copy_from_slice(&tag);
            match PublicKey::parse(&B64.encode(&raw)) {
                Err(KeyError::UnsupportedAlgorithm { found, .. }) => found,
                other => panic!("expected UnsupportedAlgorithm, got {other:?}"),
            }
        };
        assert_eq!(found(*b"ED"), "\"ED\"");
        assert_eq!(found([0, 1]), "0x0001");
        assert_eq!(found(*b"E "), "0x4520");
    }

    /// Each refused secret key algorithm is named with its own two bytes.
    #[test]
    fn secret_key_algorithms_are_named_with_their_bytes() {
        let raw = decode_sk(UNENC_KEY);
        for (pos, value, what) in [
            (0usize, *b"ED", "secret key signature"),
            (SK_KDF_ALG, *b"Sd", "secret key derivation"),
            (SK_CHK_ALG, *b"B3", "secret key checksum"),
        ] {
            let mut bad = raw.clone();
            bad[pos..pos + 2].copy_from_slice(&value);
            match SecretKey::parse(&encode_sk(&bad), None) {
                Err(KeyError::UnsupportedAlgorithm { what: w, found }) => {
                    assert_eq!(
                        (w, found.as_str()),
                        (
                            what,
                            &*format!("{:?}", std::str::from_utf8(&value).unwrap())
                        )
                    );
                }
                other => panic!("expected UnsupportedAlgorithm, got {other:?}"),
            }
        }
    }

    /// The checksum comparison notices any difference, including two that cancel out when
    /// XORed together.
    #[test]
    fn checksum_differences_never_cancel() {
        assert!(ct_eq(b"abc", b"abc"));
        assert!(!ct_eq(&[1, 1], &[0, 0]));
        assert!(!ct_eq(&[1, 2, 3], &[1, 2]));
        // A key with a real checksum (`minisign -C -W` keeps it).
        let mut bad = decode_sk(ENC_KEY_DECRYPTED);
        bad[SK_CHK] ^= 1;
        bad[SK_CHK + 1] ^= 1;
        let err = SecretKey::parse(&encode_sk(&bad), None).unwrap_err();
        assert!(err.to_string().contains("checksum does not match"), "{err}");
    }

    /// A read error other than `Interrupted` ends the hash with that error (it is not retried).
    #[test]
    fn prehash_passes_read_errors_on() {
        struct Broken;
        impl Read for Broken {
            fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
                Err(io::Error::other("disk on fire"))
            }
        }
        let err = prehash(Broken).unwrap_err();
        assert_eq!(err.to_string(), "disk on fire");
    }

    /// Encryption covers all 104 bytes after the limits: key id, both halves of the key pair
    /// and the checksum (minisign's layout), not a prefix of them. (Our own files round-trip
    /// even if it covered less; minisign's encrypted vector, checked in a slower test, would not.)
    #[test]
    fn encryption_covers_id_key_pair_and_checksum() {
        let sk = SecretKey::generate().unwrap();
        let plain = decode_sk(&sk.to_file_text(None).unwrap());
        let text = sk
            .to_file_text_with_kdf_limits(Some(PASSWORD), CHEAP_OPS, CHEAP_MEM)
            .unwrap();
        let enc = decode_sk(&text);
        assert_eq!(enc.len(), plain.len());
        for (from, to) in [
            (SK_KEYNUM, SK_SECRET),
            (SK_SECRET, SK_SECRET + 32),
            (SK_SECRET + 32, SK_CHK),
            (SK_CHK, enc.len()),
        ] {
            // Equal only if the keystream is all zero there: a chance of 2^-64 or less.
            assert_ne!(
                enc[from..to],
                plain[from..to],
                "bytes {from}..{to} in the clear"
            );
        }
        let back = SecretKey::parse(&text, Some(PASSWORD)).unwrap();
        assert_eq!(back.public_key(), sk.public_key());
    }

    /// A secret key's debug form shows its id and nothing else.
    #[test]
    fn secret_key_debug_shows_only_the_id() {
        let sk = SecretKey::parse(UNENC_KEY, None).unwrap();
        assert_eq!(
            format!("{sk:?}"),
            "SecretKey { key_id: \"D497470B34166912\", .. }"
        );
    }

    /// CRLF line ends are accepted whether or not the last line has one.
    #[test]
    fn crlf_without_a_final_line_end() {
        let good = Signature::parse(UNENC_SIG).unwrap();
        let crlf = UNENC_SIG.trim_end().replace('\n', "\r\n");
        assert_eq!(Signature::parse(&crlf).unwrap(), good);
    }

    #[test]
    fn prehash_streams() {
        let big: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        struct Trickle<'a>(&'a [u8], bool);
        impl Read for Trickle<'_> {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                self.1 = !self.1;
                if self.1 {
                    return Err(io::ErrorKind::Interrupted.into());
                }
                let n = buf.len().min(self.0.len()).min(7777);
                buf[..n].copy_from_slice(&self.0[..n]);
                self.0 = &self.0[n..];
                Ok(n)
            }
        }
        let want: [u8; 64] = Blake2b512::digest(&big).into();
        assert_eq!(prehash(Trickle(&big, false)).unwrap(), want);
        assert_eq!(prehash(&big[..]).unwrap(), want);
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("big");
        fs::write(&p, &big).unwrap();
        assert_eq!(prehash_file(&p).unwrap(), want);
        let missing = dir.path().join("missing");
        match prehash_file(&missing) {
            Err(KeyError::Io { path, .. }) => assert_eq!(path, missing),
            other => panic!("expected Io, got {other:?}"),
        }
    }

    // ---- files and trust stores ----------------------------------------

    #[test]
    fn load_functions_name_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope.pub");
        let err = PublicKey::load(&missing).unwrap_err();
        assert!(matches!(&err, KeyError::Io { path, .. } if *path == missing));
        assert!(err.to_string().contains("nope.pub"));

        let bad = dir.path().join("bad.pub");
        fs::write(&bad, "untrusted comment: x\nnot base64\n").unwrap();
        let err = PublicKey::load(&bad).unwrap_err();
        assert!(matches!(&err, KeyError::File { path, .. } if *path == bad));
        assert!(matches!(err.kind(), KeyError::Malformed { line: 2, .. }));
        assert!(err.to_string().contains("bad.pub"));
        assert!(err.to_string().contains("line 2"), "{err}");
        let cause = std::error::Error::source(&err).unwrap().to_string();
        assert!(cause.contains("malformed public key, line 2"), "{cause}");

        let latin1 = dir.path().join("latin1.minisig");
        fs::write(
            &latin1,
            b"untrusted comment: ok\nx\ntrusted comment: caf\xe9\n",
        )
        .unwrap();
        let err = Signature::load(&latin1).unwrap_err();
        assert!(
            matches!(err.kind(), KeyError::Malformed { line: 3, .. }),
            "{err:?}"
        );

        let skp = dir.path().join("k.key");
        fs::write(&skp, UNENC_KEY).unwrap();
        assert_eq!(
            SecretKey::load(&skp, None).unwrap().public_key(),
            PublicKey::parse(UNENC_PUB).unwrap()
        );
        let sigp = dir.path().join("m.minisig");
        fs::write(&sigp, UNENC_SIG).unwrap();
        assert_eq!(
            Signature::load(&sigp).unwrap(),
            Signature::parse(UNENC_SIG).unwrap()
        );
    }

    #[test]
    fn load_trust_file_and_directory() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let unenc = PublicKey::parse(UNENC_PUB).unwrap();
        let enc = PublicKey::parse(ENC_PUB).unwrap();

        // Empty directory: error naming it.
        match crate::trust::load_path(d) {
            Err(KeyError::NoPublicKeys { dir }) => assert_eq!(dir, d),
            other => panic!("expected NoPublicKeys, got {other:?}"),
        }
        fs::write(d.join("notes.txt"), "hello").unwrap();
        fs::write(d.join("b.pub.bak"), UNENC_PUB).unwrap();
        fs::create_dir(d.join("sub")).unwrap();
        fs::write(d.join("sub").join("c.pub"), UNENC_PUB).unwrap();
        fs::create_dir(d.join("dir.pub")).unwrap();
        assert!(matches!(
            crate::trust::load_path(d),
            Err(KeyError::NoPublicKeys { .. })
        ));

        // Sorted by name, not recursive.
        fs::write(d.join("b.pub"), UNENC_PUB).unwrap();
        fs::write(d.join("a.pub"), ENC_PUB).unwrap();
        assert_eq!(
            crate::trust::load_path(d).unwrap(),
            vec![enc.clone(), unenc.clone()]
        );
        // A single file.
        assert_eq!(
            crate::trust::load_path(&d.join("b.pub")).unwrap(),
            vec![unenc.clone()]
        );
        // The same key twice is kept once.
        fs::write(d.join("c.pub"), key_line(UNENC_PUB)).unwrap();
        assert_eq!(
            crate::trust::load_path(d).unwrap(),
            vec![enc.clone(), unenc.clone()]
        );
        // Two keys claiming one id is an error.
        let impostor = PublicKey {
            key_id: unenc.key_id,
            key: enc.key,
        };
        fs::write(d.join("d.pub"), impostor.to_file_text()).unwrap();
        match crate::trust::load_path(d) {
            Err(KeyError::ConflictingKeyId {
                key_id,
                first,
                second,
            }) => {
                assert_eq!(key_id, "D497470B34166912");
                assert_eq!(first, d.join("b.pub"));
                assert_eq!(second, d.join("d.pub"));
            }
            other => panic!("expected ConflictingKeyId, got {other:?}"),
        }
        // A broken file is named.
        fs::write(d.join("d.pub"), "garbage").unwrap();
        let err = crate::trust::load_path(d).unwrap_err();
        assert!(matches!(&err, KeyError::File { path, .. } if *path == d.join("d.pub")));
        // Missing path.
        assert!(matches!(
            crate::trust::load_path(&d.join("missing")),
            Err(KeyError::Io { .. })
        ));
    }

    // ---- the real minisign ----------------------------------------------

    fn run(cmd: &mut Command, stdin: &[u8]) -> Output {
        let mut child = match cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
        {
            Ok(c) => c,
            Err(e) if e.kind() == io::ErrorKind::NotFound => panic!(
                "the `minisign` binary is needed for the interoperability tests \
                 but was not found ({e}); run `apt-get install minisign`"
            ),
            Err(e) => panic!("cannot run minisign: {e}"),
        };
        child.stdin.take().unwrap().write_all(stdin).unwrap();
        child.wait_with_output().unwrap()
    }

    fn minisign(args: &[&std::ffi::OsStr], stdin: &[u8]) -> Output {
        run(Command::new("minisign").args(args), stdin)
    }

    fn describe(out: &Output) -> String {
        format!(
            "status {:?}\nstdout: {}\nstderr: {}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    }

    #[test]
    fn real_minisign_accepts_our_files() {
        use std::ffi::OsStr;
        let os = |s: &'static str| OsStr::new(s);
        let dir = tempfile::tempdir().unwrap();
        let p = |name: &str| dir.path().join(name);
        let version = minisign(&[os("-v")], b"");
        assert!(version.status.success(), "{}", describe(&version));

        let sk = SecretKey::generate().unwrap();
        let pk = sk.public_key();
        fs::write(p("our.pub"), pk.to_file_text()).unwrap();
        fs::write(p("our.key"), sk.to_file_text(None).unwrap()).unwrap();
        let message = b"model.safetensors manifest\n\x00\xff binary tail";
        fs::write(p("msg"), message).unwrap();
        let tc = "timestamp:1700000001\tfile:msg\thashed\tünïcødé";
        let sig = sign(&sk, message, "signed by airlock", tc).unwrap();
        fs::write(p("msg.minisig"), sig.to_file_text()).unwrap();

        // minisign -V accepts our public key file, signature and comment.
        let out = minisign(
            &[
                os("-V"),
                os("-H"),
                os("-p"),
                p("our.pub").as_os_str(),
                os("-m"),
                p("msg").as_os_str(),
            ],
            b"",
        );
        assert!(out.status.success(), "{}", describe(&out));
        assert!(
            String::from_utf8_lossy(&out.stdout).contains(&format!("Trusted comment: {tc}")),
            "{}",
            describe(&out)
        );
        // ... and our bare base64 form.
        let bare = pk.to_base64();
        let out = minisign(
            &[
                os("-V"),
                os("-P"),
                OsStr::new(&bare),
                os("-m"),
                p("msg").as_os_str(),
            ],
            b"",
        );
        assert!(out.status.success(), "{}", describe(&out));
        // Negative control: the harness does notice a failure.
        fs::write(p("msg"), b"tampered").unwrap();
        let out = minisign(
            &[
                os("-V"),
                os("-p"),
                p("our.pub").as_os_str(),
                os("-m"),
                p("msg").as_os_str(),
            ],
            b"",
        );
        assert!(!out.status.success(), "{}", describe(&out));
        fs::write(p("msg"), message).unwrap();

        // minisign -R derives the same public key from our unencrypted key.
        let out = minisign(
            &[
                os("-R"),
                os("-s"),
                p("our.key").as_os_str(),
                os("-p"),
                p("recreated.pub").as_os_str(),
            ],
            b"",
        );
        assert!(out.status.success(), "{}", describe(&out));
        let recreated = fs::read_to_string(p("recreated.pub")).unwrap();
        assert_eq!(PublicKey::parse(&recreated).unwrap(), pk);
        assert_eq!(key_line(&recreated), pk.to_base64());

        // minisign -S with our unencrypted key: byte-identical to ours.
        let out = minisign(
            &[
                os("-S"),
                os("-s"),
                p("our.key").as_os_str(),
                os("-m"),
                p("msg").as_os_str(),
                os("-x"),
                p("theirs.minisig").as_os_str(),
                os("-c"),
                os("signed by airlock"),
                os("-t"),
                OsStr::new(tc),
            ],
            b"",
        );
        assert!(out.status.success(), "{}", describe(&out));
        assert_eq!(
            fs::read_to_string(p("theirs.minisig")).unwrap(),
            sig.to_file_text()
        );

        // minisign -S decrypts a key we encrypted with minisign's own limits.
        let password = "airlock pass phrase";
        let enc_text = {
            let _guard = heavy();
            sk.to_file_text(Some(password.as_bytes())).unwrap()
        };
        let raw = decode_sk(&enc_text);
        assert_eq!(le64(&raw[SK_OPSLIMIT..SK_MEMLIMIT]), KDF_OPSLIMIT_SENSITIVE);
        assert_eq!(le64(&raw[SK_MEMLIMIT..SK_KEYNUM]), KDF_MEMLIMIT_SENSITIVE);
        fs::write(p("enc.key"), &enc_text).unwrap();
        let sign_with_enc = |password: &str| {
            let _guard = heavy();
            minisign(
                &[
                    os("-S"),
                    os("-s"),
                    p("enc.key").as_os_str(),
                    os("-m"),
                    p("msg").as_os_str(),
                    os("-x"),
                    p("enc.minisig").as_os_str(),
                    os("-t"),
                    os("from our encrypted key"),
                ],
                format!("{password}\n").as_bytes(),
            )
        };
        let out = sign_with_enc(password);
        assert!(out.status.success(), "{}", describe(&out));
        let theirs = Signature::load(&p("enc.minisig")).unwrap();
        verify(&pk, &theirs, message).unwrap();
        let ours = sign(
            &sk,
            message,
            "signature from minisign secret key",
            "from our encrypted key",
        )
        .unwrap();
        assert_eq!(
            fs::read_to_string(p("enc.minisig")).unwrap(),
            ours.to_file_text()
        );
    }

    // ---- robustness -----------------------------------------------------

    /// Inputs near valid files: one byte replaced, or lines shuffled.
    fn near_valid() -> impl Strategy<Value = String> {
        let files = prop::sample::select(vec![
            UNENC_PUB,
            ENC_PUB,
            UNENC_KEY,
            ENC_KEY,
            ENC_KEY_DECRYPTED,
            UNENC_SIG,
            UNENC_LEGACY_SIG,
            ENC_SIG,
        ]);
        let mutate =
            (files.clone(), any::<prop::sample::Index>(), any::<char>()).prop_map(|(f, idx, c)| {
                let mut chars: Vec<char> = f.chars().collect();
                let i = idx.index(chars.len());
                chars[i] = c;
                chars.into_iter().collect::<String>()
            });
        let truncate = (files.clone(), any::<prop::sample::Index>())
            .prop_map(|(f, idx)| f[..idx.index(f.len() + 1)].to_string());
        let splice = prop::collection::vec(files, 1..4).prop_map(|fs| {
            fs.iter()
                .flat_map(|f| f.lines())
                .step_by(2)
                .collect::<Vec<_>>()
                .join("\n")
        });
        prop_oneof![mutate, truncate, splice]
    }

    proptest! {
        #[test]
        fn parsers_never_panic_on_arbitrary_text(s in any::<String>()) {
            let _ = Signature::parse(&s);
            let _ = PublicKey::parse(&s);
            let _ = SecretKey::parse(&s, None);
            let _ = SecretKey::is_encrypted(&s);
        }

        #[test]
        fn parsers_never_panic_on_arbitrary_bytes(b in prop::collection::vec(any::<u8>(), 0..400)) {
            let s = String::from_utf8_lossy(&b);
            let _ = Signature::parse(&s);
            let _ = PublicKey::parse(&s);
            let _ = SecretKey::parse(&s, None);
        }

        #[test]
        fn parsers_never_panic_near_valid_files(s in near_valid()) {
            let _ = Signature::parse(&s);
            let _ = PublicKey::parse(&s);
            let _ = SecretKey::is_encrypted(&s);
            // Only unencrypted keys get a password here: an encrypted one
            // would cost a full scrypt run per case.
            let pw = if SecretKey::is_encrypted(&s).unwrap_or(true) { None } else { Some(PASSWORD) };
            let _ = SecretKey::parse(&s, pw);
        }

        #[test]
        fn parsed_signatures_round_trip(s in near_valid()) {
            if let Ok(sig) = Signature::parse(&s) {
                prop_assert_eq!(Signature::parse(&sig.to_file_text()).unwrap(), sig);
            }
        }
    }
}
