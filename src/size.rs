//! Human byte sizes for `--volume-size`.

/// FAT32's largest file: 4 GiB - 1 byte.
pub const FAT32_MAX: u64 = (4 << 30) - 1;

/// Parses `700M`, `4G`, `4GiB`, `1000MB`, `123`, or `fat32`. K/M/G/T and KiB/MiB/GiB/TiB are
/// powers of 1024, KB/MB/GB/TB powers of 1000 (as coreutils `split -b` reads them).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    if t.eq_ignore_ascii_case("fat32") {
        return Ok(FAT32_MAX);
    }
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    if digits.is_empty() {
        return Err(format!("{text:?} is not a size (try 700M, 4GiB or fat32)"));
    }
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{text:?} is too large"))?;
    let mult: u64 = match unit.to_ascii_uppercase().as_str() {
        "" | "B" => 1,
        "K" | "KIB" => 1 << 10,
        "M" | "MIB" => 1 << 20,
        "G" | "GIB" => 1 << 30,
        "T" | "TIB" => 1 << 40,
        "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "TB" => 1_000_000_000_000,
        _ => {
            return Err(format!(
                "{text:?} has an unknown unit {unit:?} (use K, M, G, T, KiB.., KB..)"
            ));
        }
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("{text:?} is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_documented_forms() {
        assert_eq!(parse_size("700M"), Ok(700 << 20));
        assert_eq!(parse_size("4G"), Ok(4 << 30));
        assert_eq!(parse_size("4GiB"), Ok(4 << 30));
        assert_eq!(parse_size("4gib"), Ok(4 << 30));
        assert_eq!(parse_size("1000MB"), Ok(1_000_000_000));
        assert_eq!(parse_size("fat32"), Ok(4_294_967_295));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert!(parse_size("M").is_err());
        assert!(parse_size("4X").is_err());
        assert!(parse_size("99999999999999999999T").is_err());
        assert!(parse_size("-1").is_err());
    }
}
