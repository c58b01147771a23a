//! Times as the Queue service writes and reads them: RFC 1123 in headers
//! and message times (`Fri, 09 Oct 2009 21:04:30 GMT`), ISO 8601 in SAS
//! tokens and stored access policies (`2009-10-09T21:04:30Z`, with up to
//! seven digits of fraction in a policy). Milliseconds since the Unix
//! epoch, UTC, within the years 1970 to 9999.

const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];
/// The last millisecond of 9999, the latest time written.
pub const MS_MAX: u64 = 253_402_300_799_999;

/// (year, month 1-12, day 1-31) of a day counted from 1970-01-01.
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// The day counted from 1970-01-01 of a civil date.
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn split(ms: u64) -> (i64, u32, u32, u64) {
    let ms = ms.min(MS_MAX);
    let secs = ms / 1000;
    let (y, m, d) = civil((secs / 86_400) as i64);
    (y, m, d, secs % 86_400)
}

/// `ms` as RFC 1123 (`Fri, 09 Oct 2009 21:04:30 GMT`).
pub fn rfc1123(ms: u64) -> String {
    let mut out = String::with_capacity(29);
    push_rfc1123(ms, &mut out);
    out
}

/// [`rfc1123`], appended to `out` (digits written by hand: every answer
/// writes a few, and `format!` was a measured share of their cost).
pub fn push_rfc1123(ms: u64, out: &mut String) {
    let (y, m, d, s) = split(ms);
    let weekday = DAYS[((ms.min(MS_MAX) / 1000 / 86_400) % 7) as usize];
    out.push_str(weekday);
    out.push_str(", ");
    push2(out, d as u64);
    out.push(' ');
    out.push_str(MONTHS[m as usize - 1]);
    out.push(' ');
    push2(out, y as u64 / 100);
    push2(out, y as u64 % 100);
    out.push(' ');
    push2(out, s / 3600);
    out.push(':');
    push2(out, s / 60 % 60);
    out.push(':');
    push2(out, s % 60);
    out.push_str(" GMT");
}

/// Two decimal digits of `n` (0–99).
fn push2(out: &mut String, n: u64) {
    out.push(char::from(b'0' + (n / 10 % 10) as u8));
    out.push(char::from(b'0' + (n % 10) as u8));
}

/// `ms` as ISO 8601 with seven digits of fraction, as the service writes
/// a stored access policy's times.
pub fn iso8601(ms: u64) -> String {
    let (y, m, d, s) = split(ms);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}0000Z",
        s / 3600,
        s / 60 % 60,
        s % 60,
        ms.min(MS_MAX) % 1000
    )
}

fn number(s: &str) -> Option<u32> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

fn to_ms(y: i64, m: u32, d: u32, h: u32, min: u32, s: u32, frac_ms: u64) -> Option<u64> {
    let month_days = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let days_in = if m == 2 && leap {
        29
    } else {
        *month_days.get(m as usize - 1)?
    };
    if !(1970..=9999).contains(&y) || d == 0 || d > days_in || h > 23 || min > 59 || s > 59 {
        return None;
    }
    let days = days_from_civil(y, m, d) as u64;
    Some(
        ((days * 86_400 + u64::from(h) * 3600 + u64::from(min) * 60 + u64::from(s)) * 1000)
            + frac_ms,
    )
}

/// Reads ISO 8601 as SAS tokens and policies carry it: `YYYY-MM-DD`,
/// `YYYY-MM-DDThh:mmZ`, `YYYY-MM-DDThh:mm:ssZ` or with a fraction of up
/// to seven digits; UTC only.
pub fn parse_iso8601(s: &str) -> Option<u64> {
    let (date, time) = match s.split_once('T') {
        Some((d, t)) => (d, Some(t)),
        None => (s, None),
    };
    let mut parts = date.split('-');
    let (y, m, d) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || y.len() != 4 || m.len() != 2 || d.len() != 2 {
        return None;
    }
    let (y, m, d) = (i64::from(number(y)?), number(m)?, number(d)?);
    let Some(time) = time else {
        return to_ms(y, m, d, 0, 0, 0, 0);
    };
    let time = time.strip_suffix('Z')?;
    let (hms, frac) = match time.split_once('.') {
        Some((a, f)) => (a, Some(f)),
        None => (time, None),
    };
    let mut parts = hms.split(':');
    let (h, min) = (parts.next()?, parts.next()?);
    let sec = parts.next();
    if parts.next().is_some() || h.len() != 2 || min.len() != 2 {
        return None;
    }
    let sec = match sec {
        Some(s) if s.len() == 2 => number(s)?,
        Some(_) => return None,
        None if frac.is_some() => return None,
        None => 0,
    };
    let frac_ms = match frac {
        Some(f) if (1..=7).contains(&f.len()) => {
            let digits = format!("{f:0<3}");
            u64::from(number(&digits[..3])?)
        }
        Some(_) => return None,
        None => 0,
    };
    to_ms(y, m, d, number(h)?, number(min)?, sec, frac_ms)
}

/// Reads RFC 1123 (`Fri, 09 Oct 2009 21:04:30 GMT`), as `x-ms-date` and
/// `Date` carry it.
pub fn parse_rfc1123(s: &str) -> Option<u64> {
    let rest = s.split_once(", ")?.1;
    let mut parts = rest.split(' ');
    let (d, mon, y, hms, zone) = (
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
    );
    if parts.next().is_some() || zone != "GMT" || y.len() != 4 {
        return None;
    }
    let m = MONTHS.iter().position(|x| *x == mon)? as u32 + 1;
    let mut t = hms.split(':');
    let (h, min, sec) = (t.next()?, t.next()?, t.next()?);
    if t.next().is_some() {
        return None;
    }
    to_ms(
        i64::from(number(y)?),
        m,
        number(d)?,
        number(h)?,
        number(min)?,
        number(sec)?,
        0,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_written_as_the_service_writes_them() {
        assert_eq!(rfc1123(0), "Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(rfc1123(1_255_122_270_000), "Fri, 09 Oct 2009 21:04:30 GMT");
        assert_eq!(rfc1123(u64::MAX), "Fri, 31 Dec 9999 23:59:59 GMT");
        assert_eq!(iso8601(1_255_122_270_123), "2009-10-09T21:04:30.1230000Z");
    }

    #[test]
    fn times_read_back() {
        for ms in [0, 1_255_122_270_000, 951_782_400_000, 4_107_542_399_000] {
            assert_eq!(parse_rfc1123(&rfc1123(ms)), Some(ms));
            assert_eq!(parse_iso8601(&iso8601(ms)), Some(ms));
        }
        assert_eq!(
            parse_iso8601("2009-10-09T21:04:30Z"),
            Some(1_255_122_270_000)
        );
        assert_eq!(parse_iso8601("2009-10-09T21:04Z"), Some(1_255_122_240_000));
        assert_eq!(parse_iso8601("2009-10-09"), Some(1_255_046_400_000));
        for bad in [
            "2009-10-09T21:04:30",
            "2009-13-09T21:04:30Z",
            "2009-02-30",
            "2009-10-09T21:04:30.12345678Z",
            "1969-12-31",
            "x",
            "2009-10-09T21:04:3Z",
        ] {
            assert_eq!(parse_iso8601(bad), None, "{bad}");
        }
        assert_eq!(parse_rfc1123("Fri, 09 Oct 2009 21:04:30 UTC"), None);
    }
}
