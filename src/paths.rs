//! The one definition of a path a bundle may carry.
//!
//! The packer refuses to write, and the reader refuses to accept, any path that fails
//! [`check_relative`]. Keeping both sides on one function means airlock never makes a bundle it
//! would refuse to unpack, and a hostile bundle cannot use a name the packer would not produce.
//! [`CollisionSet`] catches names that are distinct on Linux but the same file on a
//! case-insensitive or normalising filesystem (macOS, Windows, exFAT media).

use unicode_normalization::UnicodeNormalization;

/// Longest path accepted, in bytes.
pub(crate) const MAX_PATH: usize = 4096;
/// Longest single component accepted, in bytes (the common filesystem limit).
pub(crate) const MAX_COMPONENT: usize = 255;
/// Top-level name reserved for the receipt an unpack leaves behind.
pub const RECEIPT_DIR: &str = ".airlock";
/// File name of the manifest inside a bundle (here, on the ground floor, because an error's
/// hint names it too).
pub const MANIFEST_NAME: &str = "manifest.json";

/// Whether `path` is one of a receipt's files (`.../.airlock/NAME`).
pub fn is_receipt_file(path: &std::path::Path) -> bool {
    path.parent()
        .and_then(std::path::Path::file_name)
        .is_some_and(|n| n == RECEIPT_DIR)
}

/// Windows device names (FORMAT.md, section 4.1), compared ignoring ASCII case. Windows also
/// treats the superscript digits ¹ ² ³ as digits in `COM` and `LPT` names.
const WINDOWS_DEVICES: &[&str] = &[
    "CON",
    "PRN",
    "AUX",
    "NUL",
    "COM0",
    "COM1",
    "COM2",
    "COM3",
    "COM4",
    "COM5",
    "COM6",
    "COM7",
    "COM8",
    "COM9",
    "COM\u{b9}",
    "COM\u{b2}",
    "COM\u{b3}",
    "LPT0",
    "LPT1",
    "LPT2",
    "LPT3",
    "LPT4",
    "LPT5",
    "LPT6",
    "LPT7",
    "LPT8",
    "LPT9",
    "LPT\u{b9}",
    "LPT\u{b2}",
    "LPT\u{b3}",
    "CONIN$",
    "CONOUT$",
];

/// The Unicode version of the case folding [`fold`] applies (pinned in FORMAT.md, section
/// 4.2; a dependency update that changes it must change the document too).
pub const CASE_FOLDING_UNICODE_VERSION: (u64, u64, u64) = caseless::UNICODE_VERSION;

/// The Unicode version of the normalization data (NFD) [`fold`] applies (pinned in FORMAT.md,
/// section 4.2, apart from the case folding's: the two crates carry their own tables).
pub const NORMALIZATION_UNICODE_VERSION: (u8, u8, u8) = unicode_normalization::UNICODE_VERSION;

/// The name two paths share when a case-insensitive or normalising filesystem would make them
/// one file: Unicode canonical caseless matching, `NFD(casefold(NFD(p)))` with full case
/// folding (FORMAT.md, section 4.2). So `Model.bin` and `model.BIN`, `café` composed and
/// decomposed, and `οδος` / `οδοσ` (final and ordinary sigma) each fold to one name.
pub fn fold(path: &str) -> String {
    let mut out = String::new();
    fold_into(path, &mut out);
    out
}

/// [`fold`], appended to `out`.
fn fold_into(path: &str, out: &mut String) {
    use caseless::Caseless;
    // ASCII is its own NFD and folds to its lower case (the only full case folding of an
    // ASCII character is A-Z to a-z): the Unicode iterators cost a sixth of a pack of
    // 100,000 small files, whose names are almost always ASCII.
    if path.is_ascii() {
        out.push_str(path);
        let tail = out.len() - path.len();
        out[tail..].make_ascii_lowercase();
        return;
    }
    out.extend(path.nfd().default_case_fold().nfd());
}

/// Why a path is not safe, portable and relative ([`check_relative`]): its `Display` is phrased
/// to follow the path in a message (`"../x" has a '..' component`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// The path is empty.
    #[error("is an empty name")]
    Empty,
    /// The path is longer than [`MAX_PATH`] bytes.
    #[error("is longer than {MAX_PATH} bytes")]
    TooLong,
    /// The path starts with `/`.
    #[error("is an absolute path")]
    Absolute,
    /// The path holds this control character.
    #[error("contains the control character {0:?}")]
    Control(char),
    /// The path holds a backslash.
    #[error("contains a backslash (a Windows path separator)")]
    Backslash,
    /// The path holds a colon.
    #[error("contains ':' (a drive letter or alternate data stream on Windows)")]
    Colon,
    /// A component is empty (`//` or a trailing `/`).
    #[error("has an empty component ('//' or a trailing '/')")]
    EmptyComponent,
    /// A component is `.`.
    #[error("has a '.' component")]
    Dot,
    /// A component is `..`.
    #[error("has a '..' component")]
    DotDot,
    /// A component is longer than [`MAX_COMPONENT`] bytes.
    #[error("has a component longer than {MAX_COMPONENT} bytes")]
    LongComponent,
    /// A component is a Windows device name (the component, quoted).
    #[error("has the Windows device name {0:?}")]
    WindowsDevice(String),
    /// A component ends in a space or a dot (the component, quoted).
    #[error("has the component {0:?} ending in a space or dot, which Windows strips")]
    TrailingSpaceOrDot(String),
    /// The first component folds to [`RECEIPT_DIR`].
    #[error("uses the name {RECEIPT_DIR:?}, reserved for airlock's receipt")]
    ReceiptDir,
}

/// Checks that `path` is a safe, portable, relative `/`-separated path.
///
/// Returns the reason it is not, phrased to follow the path in an error message.
pub fn check_relative(path: &str) -> Result<(), PathError> {
    if path.is_empty() {
        return Err(PathError::Empty);
    }
    if path.len() > MAX_PATH {
        return Err(PathError::TooLong);
    }
    if path.starts_with('/') {
        return Err(PathError::Absolute);
    }
    if let Some(c) = path.chars().find(|c| c.is_control()) {
        return Err(PathError::Control(c));
    }
    if path.contains('\\') {
        return Err(PathError::Backslash);
    }
    if path.contains(':') {
        return Err(PathError::Colon);
    }
    for component in path.split('/') {
        match component {
            "" => return Err(PathError::EmptyComponent),
            "." => return Err(PathError::Dot),
            ".." => return Err(PathError::DotDot),
            _ => {}
        }
        if component.len() > MAX_COMPONENT {
            return Err(PathError::LongComponent);
        }
        let stem = component.split('.').next().unwrap_or("");
        let stem = stem.trim_end_matches(' ');
        if WINDOWS_DEVICES.iter().any(|d| d.eq_ignore_ascii_case(stem)) {
            return Err(PathError::WindowsDevice(component.to_string()));
        }
        if component.ends_with(' ') || component.ends_with('.') {
            return Err(PathError::TrailingSpaceOrDot(component.to_string()));
        }
    }
    let first = path.split('/').next().unwrap_or("");
    if fold(first) == RECEIPT_DIR {
        return Err(PathError::ReceiptDir);
    }
    Ok(())
}

/// Remembers every path seen and reports a second one that folds to the same name.
///
/// One pass, one table: every folded name ([`fold`]) goes into one growing string, and the
/// table holds where each one is (and where its original is, when folding changed it), hashed
/// with a per-set random seed. No allocation a path: with a million files the set was two
/// `String`s and a SipHash a path, the largest share of the scan's main thread.
pub struct CollisionSet {
    /// The folded names, each followed by its original when that differs.
    names: String,
    /// Where each name is in `names`: the folded name, then the original (its length 0 when
    /// the original is the folded name).
    table: hashbrown::HashTable<Seen>,
    /// The same for a name that does not fit [`Seen`]'s 8 bytes ([`Place::narrow`]): one past
    /// the first 4 GiB of names, or longer than 64 KiB. A path a bundle can carry is at most
    /// 4 KiB, so this stays empty but for a tree whose names take 4 GiB (tens of millions of
    /// files), and is not searched while it is.
    wide: hashbrown::HashTable<Place>,
    /// The hash seed (random: the names come from the model, which may be hostile).
    seed: u64,
    /// The folded name of the path at hand (reused).
    folded: String,
}

/// One name of a [`CollisionSet`]: offsets into its `names` (its hash is made again from the
/// name when the table grows): 8 bytes a name, so a million names take a table of 16 MiB and
/// the table's misses in the processor's caches are half as many as with 16 bytes.
#[derive(Clone, Copy)]
struct Seen {
    start: u32,
    folded_len: u16,
    original_len: u16,
}

/// Where a name is in a [`CollisionSet`]'s `names`, whatever its offset and lengths.
#[derive(Clone, Copy)]
struct Place {
    start: usize,
    folded_len: usize,
    original_len: usize,
}

impl Place {
    /// The place as a [`Seen`], when its offset and lengths fit one.
    fn narrow(self) -> Option<Seen> {
        Some(Seen {
            start: u32::try_from(self.start).ok()?,
            folded_len: u16::try_from(self.folded_len).ok()?,
            original_len: u16::try_from(self.original_len).ok()?,
        })
    }
}

impl From<Seen> for Place {
    fn from(s: Seen) -> Place {
        Place {
            start: s.start as usize,
            folded_len: usize::from(s.folded_len),
            original_len: usize::from(s.original_len),
        }
    }
}

/// A seed for a hash of names that come from outside (a model, a tree, a manifest), so no
/// one can choose names that fall together. A fixed seed if the system has no randomness to
/// give: still correct, only predictable.
pub(crate) fn hash_seed() -> u64 {
    let mut seed = [0u8; 8];
    let _ = getrandom::getrandom(&mut seed);
    u64::from_ne_bytes(seed)
}

impl Default for CollisionSet {
    fn default() -> Self {
        CollisionSet {
            names: String::new(),
            table: hashbrown::HashTable::new(),
            wide: hashbrown::HashTable::new(),
            seed: hash_seed(),
            folded: String::new(),
        }
    }
}

impl CollisionSet {
    /// A set with room for `count` paths of `bytes` bytes in all, so that it does not grow
    /// (a table and a string of a million names held twice while they are copied).
    pub fn with_capacity(count: usize, bytes: usize) -> Self {
        let mut set = CollisionSet::default();
        set.names.reserve_exact(bytes);
        set.table
            .reserve(count, |_| unreachable!("an empty table moves nothing"));
        set
    }

    /// Adds `path`; returns the earlier path it collides with, if any.
    pub fn insert(&mut self, path: &str) -> Option<String> {
        let folded = &mut self.folded;
        folded.clear();
        fold_into(path, folded);
        let hash = xxhash_rust::xxh3::xxh3_64_with_seed(folded.as_bytes(), self.seed);
        let names = &self.names;
        let name = |p: Place| &names[p.start..p.start + p.folded_len];
        let earlier = match self.table.find(hash, |s| name(Place::from(*s)) == folded) {
            Some(s) => Some(Place::from(*s)),
            None if self.wide.is_empty() => None,
            None => self.wide.find(hash, |p| name(*p) == folded).copied(),
        };
        if let Some(p) = earlier {
            let start = p.start + p.folded_len;
            return Some(match p.original_len {
                0 => name(p).to_string(),
                n => names[start..start + n].to_string(),
            });
        }
        let start = self.names.len();
        self.names.push_str(folded);
        let original_len = if *folded == path {
            0
        } else {
            self.names.push_str(path);
            path.len()
        };
        let place = Place {
            start,
            folded_len: folded.len(),
            original_len,
        };
        let (names, seed) = (&self.names, self.seed);
        let rehash = |p: Place| {
            let name = &names.as_bytes()[p.start..p.start + p.folded_len];
            xxhash_rust::xxh3::xxh3_64_with_seed(name, seed)
        };
        match place.narrow() {
            Some(seen) => {
                self.table
                    .insert_unique(hash, seen, |s| rehash(Place::from(*s)));
            }
            None => {
                self.wide.insert_unique(hash, place, |p| rehash(*p));
            }
        }
        None
    }
}

/// A set of names borrowed from elsewhere (a manifest's directories), hashed like
/// [`CollisionSet`]: one table, no allocation a name, no SipHash.
pub struct NameSet<'a> {
    table: hashbrown::HashTable<(u64, &'a str)>,
    seed: u64,
}

impl<'a> NameSet<'a> {
    /// An empty set with room for `capacity` names.
    pub fn with_capacity(capacity: usize) -> Self {
        NameSet {
            table: hashbrown::HashTable::with_capacity(capacity),
            seed: hash_seed(),
        }
    }

    fn hash(&self, name: &str) -> u64 {
        xxhash_rust::xxh3::xxh3_64_with_seed(name.as_bytes(), self.seed)
    }

    /// Adds `name` (a name already in the set stays once).
    pub fn insert(&mut self, name: &'a str) {
        let hash = self.hash(name);
        if self
            .table
            .find(hash, |(h, n)| *h == hash && *n == name)
            .is_none()
        {
            self.table.insert_unique(hash, (hash, name), |(h, _)| *h);
        }
    }

    /// Whether `name` is in the set.
    pub fn contains(&self, name: &str) -> bool {
        let hash = self.hash(name);
        self.table
            .find(hash, |(h, n)| *h == hash && *n == name)
            .is_some()
    }
}

/// Orders paths the way a bundle stores them: component by component, as bytes, so that a
/// directory comes right before its contents (`a`, `a/b`, `a.txt`).
pub fn bundle_order(a: &str, b: &str) -> std::cmp::Ordering {
    a.split('/').cmp(b.split('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_ordinary_model_paths() {
        for p in [
            "config.json",
            "model-00001-of-00002.safetensors",
            "tokenizer/special_tokens_map.json",
            "a b/ü.txt",
            ".gitattributes",
            ".airlockrc",
            "sub/.airlock",
            "COM10",
            "com1x.txt",
        ] {
            assert_eq!(check_relative(p), Ok(()), "{p}");
        }
    }

    #[test]
    fn refuses_every_unsafe_shape() {
        for p in [
            "",
            "/etc/passwd",
            "../x",
            "a/../../x",
            "a/..",
            "./a",
            "a//b",
            "a/",
            "a\\b",
            "C:/x",
            "c:x",
            "\\\\?\\C:\\x",
            "NUL",
            "sub/com1.txt",
            "Lpt9",
            "a\nb",
            "a\rb",
            "a\0b",
            "a\x7fb",
            "x.",
            "x ",
            ".airlock",
            ".airlock/manifest.json",
            ".AIRLOCK/manifest.json",
            ".Airlock",
            "COM\u{b9}",
            "sub/lpt\u{b3}.txt",
            "com\u{b2}.log",
        ] {
            assert!(check_relative(p).is_err(), "{p:?} should be refused");
        }
    }

    /// Each input breaks exactly one rule, and the reason names that rule: deleting any one
    /// check changes the answer for at least one input.
    #[test]
    fn each_refusal_gives_its_own_reason() {
        for (p, why) in [
            ("", "is an empty name"),
            ("/etc/passwd", "is an absolute path"),
            ("/", "is an absolute path"),
            ("a\nb", "contains the control character '\\n'"),
            ("a\rb", "contains the control character '\\r'"),
            ("a\0b", "contains the control character '\\0'"),
            ("a\x7fb", "contains the control character '\\u{7f}'"),
            ("a\u{85}b", "contains the control character '\\u{85}'"),
            ("a\\b", "contains a backslash"),
            ("c:x", "contains ':'"),
            ("a/b:stream", "contains ':'"),
            ("a//b", "has an empty component"),
            ("a/", "has an empty component"),
            (".", "has a '.' component"),
            ("./a", "has a '.' component"),
            ("a/.", "has a '.' component"),
            ("..", "has a '..' component"),
            ("a/../b", "has a '..' component"),
            ("NUL", "has the Windows device name \"NUL\""),
            ("sub/com1.txt", "has the Windows device name \"com1.txt\""),
            ("Lpt9", "has the Windows device name"),
            ("CON .txt", "has the Windows device name \"CON .txt\""),
            ("con  .tar.gz", "has the Windows device name"),
            ("CONIN$", "has the Windows device name"),
            ("COM0", "has the Windows device name"),
            ("x.", "ending in a space or dot"),
            ("x ", "ending in a space or dot"),
            ("a/b./c", "ending in a space or dot"),
            (".airlock", "reserved for airlock's receipt"),
            (".airlock/manifest.json", "reserved for airlock's receipt"),
        ] {
            let got = check_relative(p).expect_err(p).to_string();
            assert!(got.contains(why), "{p:?}: expected {why:?}, got {got:?}");
        }
        // Near misses are accepted.
        for p in [
            "CONSOLE.txt",
            "COM10",
            "xCON",
            "con-fig.json",
            ".airlocks",
            "a/.airlock",
            "x.y",
            " x",
            ".x",
            "...a",
            "a..b",
        ] {
            assert_eq!(check_relative(p), Ok(()), "{p:?}");
        }
    }

    /// Components of exactly 255 bytes and paths of exactly 4096 pass; one byte more does not,
    /// for the length reason (the over-long path is otherwise well formed).
    #[test]
    fn length_limits_are_exact() {
        assert_eq!(MAX_COMPONENT, 255);
        assert_eq!(MAX_PATH, 4096);
        assert_eq!(check_relative(&"a".repeat(255)), Ok(()));
        assert_eq!(
            check_relative(&format!("d/{}", "é".repeat(127) + "a")),
            Ok(())
        );
        let why = check_relative(&"a".repeat(256)).unwrap_err().to_string();
        assert!(why.contains("component longer than 255 bytes"), "{why}");
        let why = check_relative(&format!("d/{}/e", "é".repeat(128)))
            .unwrap_err()
            .to_string();
        assert!(why.contains("component longer than 255 bytes"), "{why}");
        // 15 components of 255 bytes, one of 253 and one of 2: exactly 4096 bytes.
        let exact = format!(
            "{}/{}/bb",
            vec!["a".repeat(255); 15].join("/"),
            "c".repeat(253)
        );
        assert_eq!(exact.len(), 4096);
        assert_eq!(check_relative(&exact), Ok(()));
        let over = format!("{exact}x");
        assert_eq!(over.len(), 4097);
        let why = check_relative(&over).unwrap_err().to_string();
        assert!(why.contains("is longer than 4096 bytes"), "{why}");
    }

    #[test]
    fn collisions_fold_case_and_normalisation() {
        let mut set = CollisionSet::default();
        assert_eq!(set.insert("Model.bin"), None);
        assert_eq!(set.insert("model.BIN"), Some("Model.bin".into()));
        assert_eq!(set.insert("caf\u{e9}"), None);
        assert_eq!(set.insert("cafe\u{301}"), Some("caf\u{e9}".into()));
        assert_eq!(set.insert("other"), None);
        // Full Unicode case folding, not lower-casing: one file on NTFS and APFS.
        assert_eq!(set.insert("\u{3bf}\u{3b4}\u{3bf}\u{3c2}"), None);
        assert_eq!(
            set.insert("\u{3bf}\u{3b4}\u{3bf}\u{3c3}"),
            Some("\u{3bf}\u{3b4}\u{3bf}\u{3c2}".into())
        );
        assert_eq!(set.insert("Stra\u{df}e"), None);
        assert_eq!(set.insert("STRASSE"), Some("Stra\u{df}e".into()));
    }

    /// The table keeps every name as it grows: a hundred thousand distinct names, then each
    /// again in upper case, which collides with its own earlier name (kept once when folding
    /// left it as it was, and as written when it did not).
    #[test]
    fn collisions_are_found_among_many_names() {
        let mut set = CollisionSet::default();
        let name = |i: u32| format!("d{}/f{i}.bin", i / 1000);
        for i in 0..100_000 {
            assert_eq!(set.insert(&name(i)), None);
        }
        assert_eq!(set.insert("Mixed/Case"), None);
        for i in (0..100_000).step_by(997) {
            assert_eq!(set.insert(&name(i).to_uppercase()), Some(name(i)));
        }
        assert_eq!(set.insert("mixed/case"), Some("Mixed/Case".into()));
        let dirs: Vec<String> = (0..1000).map(|i| format!("d{i}")).collect();
        let mut names = NameSet::with_capacity(0);
        for d in &dirs {
            names.insert(d);
        }
        names.insert(&dirs[0]);
        assert!(dirs.iter().all(|d| names.contains(d)));
        assert!(!names.contains("d1000") && !names.contains("D1"));
    }

    /// A name longer than 64 KiB (no path a bundle carries, but the set does not rely on the
    /// path rules) is kept beside the 8-byte places, and collisions are found across both.
    #[test]
    fn collisions_are_found_among_names_too_long_for_the_narrow_table() {
        let mut set = CollisionSet::default();
        let long = format!("d/{}", "a".repeat(70_000));
        let long_upper = long.to_uppercase();
        assert_eq!(set.insert("x"), None);
        assert_eq!(set.insert(&long_upper), None);
        assert_eq!(set.wide.len(), 1);
        assert_eq!(set.insert("y"), None);
        assert_eq!(set.insert(&long), Some(long_upper.clone()));
        assert_eq!(set.insert("X"), Some("x".into()));
        assert_eq!(set.insert("Y"), Some("y".into()));
        for i in 0..10_000 {
            assert_eq!(set.insert(&format!("n{i}")), None);
        }
        assert_eq!(set.insert(&long.replace('a', "A")), Some(long_upper));
        assert_eq!(set.insert("N9999"), Some("n9999".into()));
        assert_eq!((set.table.len(), set.wide.len()), (10_002, 1));
    }

    #[test]
    fn case_folding_is_the_unicode_version_format_md_pins() {
        assert_eq!(CASE_FOLDING_UNICODE_VERSION, (16, 0, 0));
        assert_eq!(fold("\u{3a3}\u{3c2}"), "\u{3c3}\u{3c3}");
    }

    /// The ASCII shortcut of `fold` gives what the Unicode path gives, character by character
    /// and for a mixed name (a name with one non-ASCII character takes the Unicode path).
    #[test]
    fn the_ascii_shortcut_of_fold_is_the_unicode_fold() {
        use caseless::Caseless;
        let slow = |s: &str| -> String { s.nfd().default_case_fold().nfd().collect() };
        for b in 0u8..=127 {
            let s = (b as char).to_string();
            assert_eq!(fold(&s), slow(&s), "{b:#x}");
        }
        let name = "Model-00001-OF-00002.SafeTensors/Tokenizer_Config.JSON";
        assert_eq!(fold(name), slow(name));
        assert_eq!(fold("K\u{212a}"), slow("K\u{212a}"));
    }

    #[test]
    fn normalization_is_the_unicode_version_format_md_pins() {
        assert_eq!(NORMALIZATION_UNICODE_VERSION, (18, 0, 0));
        // NFD both before and after folding: U+1E9E (capital sharp s) folds to "ss", U+212B
        // (Angstrom sign) decomposes to A + ring and folds with its precomposed forms.
        assert_eq!(fold("\u{1e9e}"), "ss");
        assert_eq!(fold("\u{212b}"), fold("\u{e5}"));
        assert_eq!(fold("\u{c5}"), "a\u{30a}");
    }

    #[test]
    fn order_puts_directory_before_contents() {
        let mut v = vec!["a.txt", "a/b", "a", "b", "a/a/z", "a-b"];
        v.sort_by(|a, b| bundle_order(a, b));
        assert_eq!(v, ["a", "a/a/z", "a/b", "a-b", "a.txt", "b"]);
    }
}
