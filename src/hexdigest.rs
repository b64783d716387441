//! What a digest written as text is: one rule for every place that reads one from input (a
//! manifest, a receipt, a TUF root, an OCI reference or image manifest, a registry header, an
//! LFS pointer, an in-toto statement, a cache or layout file name). FORMAT.md section 1: *hex*
//! is lowercase `[0-9a-f]`, and a SHA-256 digest is 64 of them. Upper case is refused
//! everywhere, as the OCI image spec (`[a-f0-9]{64}` for sha256), the Git LFS pointer spec and
//! the in-toto digest set also write it, so a digest has one spelling and two digests compare
//! as strings.

/// Whether `s` is exactly `len` lowercase hex digits (`[0-9a-f]`).
pub fn is_lower_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Whether `s` is a SHA-256 digest in hex: 64 lowercase hex digits.
pub fn is_sha256(s: &str) -> bool {
    is_lower_hex(s, 64)
}

/// The hex of an `sha256:HEX` digest (OCI, LFS), when HEX is a SHA-256 digest by
/// [`is_sha256`].
pub fn sha256_prefixed(s: &str) -> Option<&str> {
    s.strip_prefix("sha256:").filter(|h| is_sha256(h))
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIGEST: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

    #[test]
    fn sixty_four_lowercase_hex_digits_are_a_sha256_digest() {
        assert!(is_sha256(DIGEST));
        assert!(is_sha256(&"0".repeat(64)));
        assert!(is_sha256(&"f".repeat(64)));
    }

    #[test]
    fn upper_case_is_refused() {
        assert!(!is_sha256(&DIGEST.to_ascii_uppercase()));
        let mixed = format!("E{}", &DIGEST[1..]);
        assert!(!is_sha256(&mixed));
        assert!(!is_lower_hex("AB", 2));
        assert_eq!(
            sha256_prefixed(&format!("sha256:{}", DIGEST.to_ascii_uppercase())),
            None
        );
    }

    #[test]
    fn only_the_exact_length_counts() {
        assert!(!is_sha256(&DIGEST[..63]));
        assert!(!is_sha256(&format!("{DIGEST}0")));
        assert!(!is_sha256(""));
        assert!(is_lower_hex("", 0));
        assert!(is_lower_hex(&DIGEST[..40], 40));
        assert!(!is_lower_hex(DIGEST, 40));
    }

    #[test]
    fn only_hex_digits_count() {
        for bad in ['g', ' ', '-', 'x', 'é'] {
            let s = format!("{bad}{}", &DIGEST[bad.len_utf8()..]);
            assert!(!is_sha256(&s), "{s}");
        }
        assert!(!is_sha256(&format!("sha256:{}", &DIGEST[7..])));
    }

    #[test]
    fn a_prefixed_digest_needs_the_sha256_prefix_and_a_digest() {
        assert_eq!(sha256_prefixed(&format!("sha256:{DIGEST}")), Some(DIGEST));
        assert_eq!(sha256_prefixed(DIGEST), None);
        assert_eq!(sha256_prefixed(&format!("sha512:{DIGEST}")), None);
        assert_eq!(sha256_prefixed(&format!("SHA256:{DIGEST}")), None);
        assert_eq!(sha256_prefixed("sha256:"), None);
        assert_eq!(sha256_prefixed(&format!("sha256:{}", &DIGEST[1..])), None);
    }
}
