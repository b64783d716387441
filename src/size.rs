//! Human byte sizes for `--volume-size`.

/// FAT32's largest file: 4 GiB - 1 byte.
pub const FAT32_MAX: u64 = (4 << 30) - 1;

/// What every error message offers instead.
const FORMS: &str = "use a number of bytes with an optional unit, such as 700M, 4.5G, 4GiB or 1000MB, or fat32 for a FAT32 medium (4 GiB - 1)";

/// Parses `700M`, `4G`, `4.5G`, `4GiB`, `1000MB`, `123`, or `fat32`. K/M/G/T and
/// KiB/MiB/GiB/TiB are powers of 1024, KB/MB/GB/TB powers of 1000 (as coreutils `split -b` reads
/// them). A decimal fraction is allowed with a unit and rounded down to whole bytes.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    if t.eq_ignore_ascii_case("fat32") {
        return Ok(FAT32_MAX);
    }
    let number_end = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(number_end);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() || (number.contains('.') && fraction.is_empty()) || fraction.contains('.') {
        return Err(format!("{text:?} is not a size: {FORMS}"));
    }
    let mult: u64 = match unit.trim_start().to_ascii_uppercase().as_str() {
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
            return Err(format!("{text:?} has an unknown unit {unit:?}: {FORMS}"));
        }
    };
    if mult == 1 && !fraction.is_empty() {
        return Err(format!("{text:?} is not a whole number of bytes: {FORMS}"));
    }
    let too_large = || format!("{text:?} is too large: {FORMS}");
    let whole: u64 = whole.parse().map_err(|_| too_large())?;
    let mut bytes = whole.checked_mul(mult).ok_or_else(too_large)?;
    // The fraction in integers, so that 4.5G is exact and no float rounding creeps in.
    if !fraction.is_empty() {
        let digits = &fraction[..fraction.len().min(18)];
        let part: u128 = digits.parse().map_err(|_| too_large())?;
        let extra = part * u128::from(mult) / 10u128.pow(digits.len() as u32);
        bytes = bytes
            .checked_add(u64::try_from(extra).map_err(|_| too_large())?)
            .ok_or_else(too_large)?;
    }
    Ok(bytes)
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

    #[test]
    fn decimal_sizes_are_exact_and_rounded_down() {
        assert_eq!(parse_size("4.5G"), Ok(4_831_838_208));
        assert_eq!(parse_size("0.5KiB"), Ok(512));
        assert_eq!(parse_size("1.5MB"), Ok(1_500_000));
        assert_eq!(parse_size("1.0001K"), Ok(1024));
        for bad in ["4.G", ".5G", "4..5G", "4.5.1G", "1.5", "1.5B"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn every_error_names_fat32() {
        for bad in ["M", "4X", "4.5", "99999999999999999999T", "-1", ""] {
            let e = parse_size(bad).unwrap_err();
            assert!(e.contains("fat32"), "{bad}: {e}");
        }
    }
}
