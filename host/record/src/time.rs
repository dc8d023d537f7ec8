//! The `time` member: when the host wrote a line, by its own clock.
//!
//! One form only, so two readers never disagree about a time and a line has one
//! canonical spelling: RFC 3339 in UTC with exactly six fractional digits and a `Z`,
//! `2026-12-04T06:10:00.123456Z` (27 characters). Being fixed-width, two times compare
//! as their text does.
//!
//! # Non-guarantees
//! - The time is the writing host's clock, not a trusted timestamp: a host can be set to
//!   any time, and a clock stepped by NTP or a resumed VM can go backwards. The chain's
//!   order is `seq`, never the time; the verifier only reports a time that goes back
//!   within a session.

use std::time::{SystemTime, UNIX_EPOCH};

/// The length of every valid time.
pub const TIME_LEN: usize = 27;

/// Now, by the system clock, in the one form (a clock before 1970 reads as 1970).
pub fn now() -> String {
    let micros = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
    format_micros(micros)
}

/// Microseconds since the Unix epoch, in the one form. Years past 9999 are written as
/// 9999-12-31T23:59:59.999999Z, the last time the form can hold.
pub fn format_micros(micros: u64) -> String {
    const LAST: u64 = 253_402_300_799_999_999; // 9999-12-31T23:59:59.999999Z
    let micros = micros.min(LAST);
    let secs = micros / 1_000_000;
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:06}Z",
        rest / 3600,
        rest / 60 % 60,
        rest % 60,
        micros % 1_000_000
    )
}

/// Whether `text` is a time in the one form: the right length and separators, digits
/// elsewhere, a real calendar date, hours below 24, minutes below 60, seconds up to 60
/// (a leap second).
pub fn is_valid(text: &str) -> bool {
    let b = text.as_bytes();
    if b.len() != TIME_LEN {
        return false;
    }
    let separators = [
        (4, b'-'),
        (7, b'-'),
        (10, b'T'),
        (13, b':'),
        (16, b':'),
        (19, b'.'),
        (26, b'Z'),
    ];
    if separators.iter().any(|&(i, c)| b[i] != c) {
        return false;
    }
    let digits = |from: usize, to: usize| -> Option<u64> {
        b[from..to].iter().try_fold(0u64, |n, &c| {
            c.is_ascii_digit().then(|| n * 10 + u64::from(c - b'0'))
        })
    };
    let (Some(year), Some(month), Some(day), Some(hour), Some(minute), Some(second), Some(_)) = (
        digits(0, 4),
        digits(5, 7),
        digits(8, 10),
        digits(11, 13),
        digits(14, 16),
        digits(17, 19),
        digits(20, 26),
    ) else {
        return false;
    };
    (1..=12).contains(&month)
        && (1..=days_in_month(year, month)).contains(&day)
        && hour < 24
        && minute < 60
        && second <= 60
}

fn days_in_month(year: u64, month: u64) -> u64 {
    match month {
        2 if year.is_multiple_of(4) && (!year.is_multiple_of(100) || year.is_multiple_of(400)) => {
            29
        }
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// The proleptic Gregorian date of a count of days since 1970-01-01 (H. Hinnant's
/// `civil_from_days`, for non-negative days).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_written_in_one_form_and_read_strictly() {
        assert_eq!(format_micros(0), "1970-01-01T00:00:00.000000Z");
        // 2000-02-29 (a leap day of a year divisible by 400), 12:34:56.789012.
        assert_eq!(
            format_micros(951_827_696_789_012),
            "2000-02-29T12:34:56.789012Z"
        );
        assert_eq!(format_micros(u64::MAX), "9999-12-31T23:59:59.999999Z");
        for micros in [0, 951_827_696_789_012, 1_796_364_000_123_456, u64::MAX] {
            assert!(is_valid(&format_micros(micros)));
        }
        assert!(is_valid(&now()));
        for bad in [
            "2026-12-04T06:10:00.123456", // no Z
            "2026-12-04T06:10:00.123456+00:00",
            "2026-12-04t06:10:00.123456Z", // lowercase t
            "2026-12-04T06:10:00.12345Z",  // five digits
            "2026-12-04 06:10:00.123456Z",
            "2026-13-04T06:10:00.123456Z", // month 13
            "2026-02-29T06:10:00.123456Z", // not a leap year
            "1900-02-29T06:10:00.123456Z", // nor is 1900
            "2026-12-04T24:00:00.000000Z",
            "2026-12-04T06:60:00.000000Z",
            "2026-12-04T06:10:61.000000Z",
            "२०२६-12-04T06:10:00.123456Z", // other digits
            "",
        ] {
            assert!(!is_valid(bad), "{bad}");
        }
        assert!(is_valid("2024-02-29T23:59:60.000000Z"));
        // Fixed width: text order is time order.
        assert!(format_micros(999_999) < format_micros(1_000_000));
    }
}
