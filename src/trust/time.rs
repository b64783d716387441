//! Dates in TUF metadata (`expires`: `YYYY-MM-DDTHH:MM:SSZ`, always UTC) and the clock they are
//! checked against.
//!
//! The clock is this machine's, unless the operator says it is wrong (`--assume-now DATE`):
//! then DATE is used instead and every command says so, loudly, because a clock set forward
//! makes a good root look expired and a date given by hand makes an expired root look good.

use std::time::{SystemTime, UNIX_EPOCH};

/// The time expiry is checked against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Clock {
    /// Seconds since the epoch.
    pub now: i64,
    /// The system clock's reading when `now` was given by the operator instead.
    pub system: Option<i64>,
}

impl Clock {
    /// This machine's clock.
    pub fn system() -> Clock {
        Clock {
            now: system_now(),
            system: None,
        }
    }

    /// The operator's date instead of this machine's clock.
    pub fn assumed(now: i64) -> Clock {
        Clock {
            now,
            system: Some(system_now()),
        }
    }

    /// The loud line a command prints when the clock is the operator's.
    pub fn warning(&self) -> Option<String> {
        self.system.map(|sys| {
            format!(
                "--assume-now: trust-root expiry is checked against {} as given, NOT against this machine's clock ({}); use this only on a machine whose clock is known to be wrong",
                format(self.now),
                format(sys)
            )
        })
    }
}

fn system_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// Formats seconds since the epoch as TUF writes dates.
pub fn format(secs: i64) -> String {
    crate::manifest::rfc3339(secs)
}

/// Why a date was refused (the text as it was given).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DateError {
    /// Not of the form `YYYY-MM-DDTHH:MM:SSZ` (a TUF root's `expires`).
    #[error("{} is not a date of the form YYYY-MM-DDTHH:MM:SSZ", crate::display::quote(.0))]
    Shape(String),
    /// Of that form, but no such day or time.
    #[error("{} is not a valid date and time", crate::display::quote(.0))]
    Invalid(String),
    /// A date on the command line in neither accepted form.
    #[error("{0:?} is not a date: use YYYY-MM-DD or YYYY-MM-DDTHH:MM:SSZ")]
    NotAnArgument(String),
}

/// Parses a TUF date, exactly `YYYY-MM-DDTHH:MM:SSZ` (the form python-tuf reads and writes).
pub fn parse(text: &str) -> Result<i64, DateError> {
    let b = text.as_bytes();
    let shape = b.len() == 20
        && b.iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b'-',
            10 => *c == b'T',
            13 | 16 => *c == b':',
            19 => *c == b'Z',
            _ => c.is_ascii_digit(),
        });
    if !shape {
        return Err(DateError::Shape(text.to_string()));
    }
    let num = |r: std::ops::Range<usize>| -> i64 { text[r].parse().expect("digits") };
    let (y, mo, d, h, mi, s) = (
        num(0..4),
        num(5..7),
        num(8..10),
        num(11..13),
        num(14..16),
        num(17..19),
    );
    if !(1..=12).contains(&mo) || d < 1 || d > days_in_month(y, mo) || h > 23 || mi > 59 || s > 59 {
        return Err(DateError::Invalid(text.to_string()));
    }
    Ok(days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + s)
}

/// Parses a date given on the command line: `YYYY-MM-DD` (midnight UTC) or the full form.
pub fn parse_arg(text: &str) -> Result<i64, DateError> {
    let not_a_date = |_| DateError::NotAnArgument(text.to_string());
    if text.len() == 10 {
        return parse(&format!("{text}T00:00:00Z")).map_err(not_a_date);
    }
    parse(text).map_err(not_a_date)
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Howard Hinnant's days_from_civil: days since 1970-01-01.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// "in 3 days", "2 days ago": how far `then` is from `now`, in whole days (hours under one).
pub fn distance(then: i64, now: i64) -> String {
    let d = then - now;
    let (n, unit) = if d.abs() >= 86_400 {
        (d.abs() / 86_400, "day")
    } else {
        (d.abs() / 3600, "hour")
    };
    let plural = if n == 1 { "" } else { "s" };
    if d >= 0 {
        format!("in {n} {unit}{plural}")
    } else {
        format!("{n} {unit}{plural} ago")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_round_trip_and_bad_ones_are_refused() {
        for secs in [
            0,
            951_782_400,
            1_700_000_000,
            4_102_444_800,
            253_402_300_799,
        ] {
            assert_eq!(parse(&format(secs)).unwrap(), secs, "{}", format(secs));
        }
        assert_eq!(parse("2000-02-29T00:00:00Z").unwrap(), 951_782_400);
        assert_eq!(parse_arg("2000-02-29").unwrap(), 951_782_400);
        for bad in [
            "2001-02-29T00:00:00Z",
            "2026-13-01T00:00:00Z",
            "2026-01-01T24:00:00Z",
            "2026-1-01T00:00:00Z",
            "2026-01-01T00:00:00",
            "2026-01-01 00:00:00Z",
            "2026-01-01T00:00:00+00:00",
            "+026-01-01T00:00:00Z",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        assert!(parse_arg("tomorrow").is_err());
    }

    #[test]
    fn distances_read_naturally() {
        assert_eq!(distance(3 * 86_400 + 5, 0), "in 3 days");
        assert_eq!(distance(0, 86_400), "1 day ago");
        assert_eq!(distance(7200, 0), "in 2 hours");
    }
}
