//! Times on the trace's clock as people read them.

/// A time on the trace's clock (nanoseconds since the Unix epoch) as a UTC date and time to
/// the millisecond: `2026-12-02 20:15:03.123 UTC`.
pub fn fmt_utc(unix_ns: i64) -> String {
    let secs = unix_ns.div_euclid(1_000_000_000);
    let ms = unix_ns.rem_euclid(1_000_000_000) / 1_000_000;
    let (days, sod) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Days since 1970-01-01 to a civil date (the proleptic Gregorian calendar).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}.{ms:03} UTC",
        sod / 3_600,
        sod % 3_600 / 60,
        sod % 60
    )
}
