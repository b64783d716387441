//! Git LFS pointers standing where the weights should be.
//!
//! A repository cloned without Git LFS installed (or with `GIT_LFS_SKIP_SMUDGE=1`) has a
//! ~130-byte text file in place of every large file. Loaders then fail with messages that
//! point elsewhere (safetensors reads the bytes `version ` as a header length near 2.3e18 and
//! says `HeaderTooLarge`; PyTorch says the file is not a zip), so this check runs before any
//! format check, on every file small enough to be a pointer, whatever its name.
//!
//! The pointer names the sha256 and size of the real file, which is also its blob name on the
//! Hugging Face Hub, so the finding can say exactly which bytes are missing.

use super::{Finding, codes, read::human_size};
use crate::hexdigest;

/// git-lfs never treats a blob of this size or more as a pointer.
pub(crate) const MAX_POINTER_SIZE: u64 = 1024;

/// The current spec URL and the two older aliases git-lfs still reads.
const VERSIONS: [&str; 3] = [
    "https://git-lfs.github.com/spec/v1",
    "https://hawser.github.com/spec/v1",
    "http://git-media.io/v/2",
];

/// What a pointer says about the file it replaces.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Pointer {
    /// `sha256:<64 hex>`.
    pub oid: String,
    /// Size of the real file in bytes.
    pub size: u64,
}

/// Parses a pointer: first line `version <known url>`, then `key value` lines including
/// `oid sha256:<64 hex>` and `size <bytes>`. Anything else is not a pointer.
pub(crate) fn parse(bytes: &[u8]) -> Option<Pointer> {
    if bytes.len() as u64 >= MAX_POINTER_SIZE {
        return None;
    }
    let text = std::str::from_utf8(bytes).ok()?;
    let mut lines = text.lines();
    let version = lines.next()?.strip_prefix("version ")?;
    if !VERSIONS.contains(&version) {
        return None;
    }
    let mut oid = None;
    let mut size = None;
    for line in lines.filter(|l| !l.is_empty()) {
        let (key, value) = line.split_once(' ')?;
        match key {
            "oid" => {
                hexdigest::sha256_prefixed(value)?;
                oid = Some(value.to_string());
            }
            "size" => size = Some(value.parse::<u64>().ok()?),
            _ => {}
        }
    }
    Some(Pointer {
        oid: oid?,
        size: size?,
    })
}

pub(crate) fn finding(rel: &str, pointer: &Pointer) -> Finding {
    Finding::error(
        codes::LFS_POINTER,
        rel,
        format!(
            "is a Git LFS pointer for a {} file, not the file itself (oid {})",
            human_size(pointer.size),
            pointer.oid
        ),
        "run `git lfs pull` in the source repository, or download the file with \
         huggingface_hub (`hf download` or `hf_hub_download`), then pack again",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inspect::testutil::*;

    const OID: &str = "sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393";

    #[test]
    fn parses_the_spec_example_and_the_old_aliases() {
        for url in VERSIONS {
            let text = format!("version {url}\noid {OID}\nsize 12345\n");
            assert_eq!(
                parse(text.as_bytes()),
                Some(Pointer {
                    oid: OID.to_string(),
                    size: 12345
                })
            );
        }
    }

    #[test]
    fn tolerates_extension_keys_and_crlf() {
        let text = format!(
            "version https://git-lfs.github.com/spec/v1\r\next-0-foo sha256:00\r\noid {OID}\r\nsize 7\r\n"
        );
        assert_eq!(parse(text.as_bytes()).unwrap().size, 7);
    }

    #[test]
    fn rejects_near_misses() {
        let good = format!("version https://git-lfs.github.com/spec/v1\noid {OID}\nsize 1\n");
        assert!(parse(good.as_bytes()).is_some());
        let cases = [
            good.replace("version https", "version http"),
            good.replace("size 1", "size -1"),
            good.replace("size 1\n", ""),
            good.replace("sha256:4d", "sha256:zz"),
            good.replace("sha256:", "sha1:"),
            format!("# {good}"),
            "version https://git-lfs.github.com/spec/v1".to_string(),
        ];
        for case in cases {
            assert_eq!(parse(case.as_bytes()), None, "{case}");
        }
        let mut long = good.clone().into_bytes();
        long.resize(1024, b'\n');
        assert_eq!(parse(&long), None);
    }

    #[test]
    fn the_fixture_pointer_is_reported_as_a_pointer() {
        let root = fixtures().join("corrupt");
        let findings = crate::inspect::check_file(&root, "lfs-pointer.safetensors").unwrap();
        let f = only(&findings, codes::LFS_POINTER, "lfs-pointer.safetensors");
        assert!(f.problem.contains("oid sha256:"), "{}", f.problem);
    }
}
