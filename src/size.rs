//! Human byte sizes for `--volume-size`.

/// FAT32's largest file: 4 GiB - 1 byte.
pub const FAT32_MAX: u64 = (4 << 30) - 1;

/// `--volume-size exfat`: exFAT has no file limit that matters (16 EiB), so a bundle is one
/// volume; this is the largest volume size airlock takes (2^62 bytes).
pub(crate) const EXFAT_MAX: u64 = 1 << 62;

/// What every error message offers instead.
const FORMS: &str = "use a number of bytes with an optional unit, such as 700M, 4.5G, 4GiB or 1000MB, or a medium: fat32 (files below 4 GiB), exfat (no file limit), dvd, dvd-dl, bd25, bd50, bd100";

/// A medium `--volume-size` can be named after (CLI.md, "Media sizes").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Preset {
    /// The name on the command line.
    pub name: &'static str,
    /// What it is, for the documentation.
    pub what: &'static str,
    /// Its capacity in bytes (0: a file-size limit, not a capacity).
    pub capacity: u64,
}

/// The optical discs: their recordable capacities in 2048-byte sectors, the smaller of the
/// two formats where there are two (DVD+R against DVD-R, and so on).
pub(crate) const PRESETS: [Preset; 5] = [
    Preset {
        name: "dvd",
        what: "DVD±R, 4.7 GB (DVD+R: 2,295,104 sectors)",
        capacity: 2_295_104 * 2048,
    },
    Preset {
        name: "dvd-dl",
        what: "DVD±R DL, 8.5 GB (DVD-R DL: 4,171,712 sectors)",
        capacity: 4_171_712 * 2048,
    },
    Preset {
        name: "bd25",
        what: "BD-R, 25 GB (12,219,392 sectors)",
        capacity: 12_219_392 * 2048,
    },
    Preset {
        name: "bd50",
        what: "BD-R DL, 50 GB (24,438,784 sectors)",
        capacity: 24_438_784 * 2048,
    },
    Preset {
        name: "bd100",
        what: "BD-R XL, 100 GB (48,878,592 sectors)",
        capacity: 48_878_592 * 2048,
    },
];

/// The volume size for a disc of `capacity` bytes: what is left after the file system, the
/// manifest and its signature (0.5% and 16 MiB kept back), shared among as few volumes as keep
/// each below 4 GiB (ISO 9660 without multi-extent files, and FAT32 sticks the volumes may pass
/// through, take no larger file), rounded down to a whole MiB. A disc then holds that many
/// whole volumes and little else.
pub(crate) fn disc_volume_size(capacity: u64) -> u64 {
    let usable = capacity - capacity / 200 - (16 << 20);
    let volumes = usable.div_ceil(FAT32_MAX);
    (usable / volumes) >> 20 << 20
}

/// Parses `700M`, `4G`, `4.5G`, `4GiB`, `1000MB`, `123`, or a medium: `fat32` (4 GiB - 1, the
/// largest file FAT32 takes), `exfat` (no file limit: one volume, whatever the size), or a
/// disc of [`PRESETS`] ([`disc_volume_size`]). K/M/G/T and KiB/MiB/GiB/TiB are powers of
/// 1024, KB/MB/GB/TB powers of 1000 (as coreutils `split -b` reads them). A decimal fraction is
/// allowed with a unit and rounded down to whole bytes.
pub fn parse_size(text: &str) -> Result<u64, SizeError> {
    let t = text.trim();
    let bad = |why| SizeError {
        text: text.to_string(),
        why,
    };
    if t.eq_ignore_ascii_case("fat32") {
        return Ok(FAT32_MAX);
    }
    if t.eq_ignore_ascii_case("exfat") {
        return Ok(EXFAT_MAX);
    }
    if let Some(p) = PRESETS.iter().find(|p| t.eq_ignore_ascii_case(p.name)) {
        return Ok(disc_volume_size(p.capacity));
    }
    let number_end = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(number_end);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() || (number.contains('.') && fraction.is_empty()) || fraction.contains('.') {
        return Err(bad(SizeRule::NotASize));
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
            return Err(bad(SizeRule::UnknownUnit(unit.to_string())));
        }
    };
    if mult == 1 && !fraction.is_empty() {
        return Err(bad(SizeRule::NotWholeBytes));
    }
    let too_large = || bad(SizeRule::TooLarge);
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

/// Why [`parse_size`] refuses a text: the text (quoted in the message), the rule, and the
/// forms it takes.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{text:?} {why}: {FORMS}")]
pub struct SizeError {
    /// The text as given.
    pub text: String,
    /// What is wrong with it.
    pub why: SizeRule,
}

/// The rule a size text breaks ([`SizeError`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SizeRule {
    /// No number, or a malformed one.
    #[error("is not a size")]
    NotASize,
    /// A unit this parser does not know (quoted).
    #[error("has an unknown unit {0:?}")]
    UnknownUnit(String),
    /// A fraction of a byte.
    #[error("is not a whole number of bytes")]
    NotWholeBytes,
    /// More bytes than a u64 holds.
    #[error("is too large")]
    TooLarge,
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
    fn media_presets_fill_their_disc_with_whole_volumes_below_4_gib() {
        assert_eq!(parse_size("exfat"), Ok(EXFAT_MAX));
        assert_eq!(parse_size("FAT32"), Ok(FAT32_MAX));
        // The figures CLI.md gives.
        let want = [
            ("dvd", 2222 << 20, 2),
            ("dvd-dl", 4045 << 20, 2),
            ("bd25", 3955 << 20, 6),
            ("bd50", 3956 << 20, 12),
            ("bd100", 3957 << 20, 24),
        ];
        for (name, size, per_disc) in want {
            let got = parse_size(name).unwrap();
            assert_eq!(got, size, "{name}: {} MiB", got >> 20);
            let cap = PRESETS.iter().find(|p| p.name == name).unwrap().capacity;
            assert!(got <= FAT32_MAX, "{name}");
            assert_eq!(cap / got, per_disc, "{name}");
            // What the disc holds beyond its volumes stays within the 0.5% and 16 MiB kept back
            // plus the rounding to whole MiB.
            let spare = cap - per_disc * got;
            assert!(spare >= cap / 200 + (16 << 20), "{name}: {spare}");
            assert!(
                spare <= cap / 200 + (16 << 20) + per_disc * (1 << 20),
                "{name}: {spare}"
            );
        }
    }

    #[test]
    fn every_error_names_fat32() {
        for bad in ["M", "4X", "4.5", "99999999999999999999T", "-1", ""] {
            let e = parse_size(bad).unwrap_err().to_string();
            assert!(e.contains("fat32"), "{bad}: {e}");
        }
    }

    #[test]
    fn each_refusal_names_its_rule() {
        let why = |t: &str| parse_size(t).unwrap_err().why;
        assert_eq!(why("M"), SizeRule::NotASize);
        assert_eq!(why("4X"), SizeRule::UnknownUnit("X".into()));
        assert_eq!(why("1.5"), SizeRule::NotWholeBytes);
        assert_eq!(why("99999999999999999999T"), SizeRule::TooLarge);
        assert_eq!(
            parse_size("4X").unwrap_err().to_string(),
            format!("\"4X\" has an unknown unit \"X\": {FORMS}")
        );
    }
}
