//! The one duration syntax of every flag that takes a time (`--interval`, `--duration`,
//! `--nvml-interval`, `--capture-wait`, `--print-after`, `--from`, `--to`, `--min-gap`).
//!
//! Printed back the same way: [`flag_text`] and [`interval_text`] write a duration as these
//! flags take it (`5m`, `1m 30s`; `50us`, `2500ns`), for messages that quote a flag's value. A
//! duration in a report or a view is written by `cufall_trace::model::Nanos` (`4.56 ms`).
//!
//! A number with a unit in humantime's syntax (`10us`, `10µs`, `2.5ms`, `30s`, `5m`, `1h`,
//! `1m30s`), or a bare number, read as seconds as `nsys --duration` and `timeout` read it.

use std::time::Duration;

/// A duration flag's value that is not one; the message gives the syntax.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DurationError {
    #[error("an empty duration: write e.g. 30s, 10us or 2.5ms")]
    Empty,
    /// A bare number that is no number of seconds (negative, or too large).
    #[error(
        "`{text}` is not a duration: give a positive number of seconds, or a number with a unit (10us, 2.5ms, 30s)"
    )]
    Seconds { text: String },
    #[error(
        "`{text}` is not a duration ({source}): write a number with a unit (ns, us, ms, s, m, h), e.g. 10us, 2.5ms, 30s, or a bare number of seconds"
    )]
    Syntax {
        text: String,
        #[source]
        source: humantime::DurationError,
    },
    #[error("`{text}` is zero: give a duration longer than 0, e.g. 10us or 30s")]
    Zero { text: String },
    /// Past what a trace's nanoseconds count; `text` is the flag's value, trimmed.
    #[error(
        "`{text}` is longer than a recording can be (a trace counts nanoseconds up to about 292 years): give a shorter one, e.g. 1.5s"
    )]
    PastTraceClock { text: String },
}

/// Parses a duration flag; zero is allowed (`--from 0`).
pub fn parse_duration(s: &str) -> Result<Duration, DurationError> {
    let t = s.trim();
    if t.is_empty() {
        return Err(DurationError::Empty);
    }
    if let Ok(secs) = t.parse::<f64>() {
        return Duration::try_from_secs_f64(secs)
            .map_err(|_| DurationError::Seconds { text: s.into() });
    }
    // The Greek small letter mu looks like the micro sign that humantime reads.
    let t = t.replace('\u{3bc}', "\u{b5}");
    humantime::parse_duration(&t).map_err(|source| DurationError::Syntax {
        text: s.into(),
        source,
    })
}

/// Parses a duration that must be longer than zero (`--interval`, `--duration`, `--min-gap`).
pub fn parse_positive_duration(s: &str) -> Result<Duration, DurationError> {
    let d = parse_duration(s)?;
    if d.is_zero() {
        return Err(DurationError::Zero { text: s.into() });
    }
    Ok(d)
}

/// An offset into a recording (`--from`, `--to`), in the trace's nanoseconds. An offset past
/// what the trace's clock can count (about 292 years) is refused as typed, rather than cut to
/// that limit and shown back to the user as a number they never wrote.
pub fn parse_offset_ns(s: &str) -> Result<i64, DurationError> {
    parse_duration(s).and_then(|d| within_trace_clock(s, d))
}

/// A duration that must be longer than zero, in the trace's nanoseconds (`--min-gap`).
pub fn parse_positive_ns(s: &str) -> Result<i64, DurationError> {
    parse_positive_duration(s).and_then(|d| within_trace_clock(s, d))
}

fn within_trace_clock(s: &str, d: Duration) -> Result<i64, DurationError> {
    i64::try_from(d.as_nanos()).map_err(|_| DurationError::PastTraceClock {
        text: s.trim().into(),
    })
}

/// A duration as the duration flags take it back (`5m`, `1m 30s`, `10h`): how messages quote
/// `--keep`, `--for` and `--delay`.
pub fn flag_text(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

/// A sampling interval as `--interval` takes it back, in its largest whole unit (`50us`,
/// `2500ns`, `1ms`, `1s`; CUPTI's spelling, `cufall_cupti::pm::format_ns`), with a sign for a
/// negative value.
pub fn interval_text(interval_ns: i64) -> String {
    let s = cufall_cupti::pm::format_ns(interval_ns.unsigned_abs());
    if interval_ns < 0 { format!("-{s}") } else { s }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns(s: &str) -> Result<u128, DurationError> {
        parse_duration(s).map(|d| d.as_nanos())
    }

    #[test]
    fn units_and_fractions() {
        assert_eq!(ns("250ns"), Ok(250));
        assert_eq!(ns("10us"), Ok(10_000));
        assert_eq!(ns("10µs"), Ok(10_000));
        assert_eq!(ns("10μs"), Ok(10_000));
        assert_eq!(ns("2.5ms"), Ok(2_500_000));
        assert_eq!(ns("1.5s"), Ok(1_500_000_000));
        assert_eq!(ns("3s"), Ok(3_000_000_000));
        assert_eq!(ns("1m"), Ok(60_000_000_000));
        assert_eq!(ns("1m30s"), Ok(90_000_000_000));
        assert_eq!(ns("1h"), Ok(3_600_000_000_000));
    }

    #[test]
    fn a_bare_number_is_seconds() {
        assert_eq!(ns("10"), Ok(10_000_000_000));
        assert_eq!(ns("2"), Ok(2_000_000_000));
        assert_eq!(ns("0.5"), Ok(500_000_000));
        assert_eq!(ns("0"), Ok(0));
    }

    #[test]
    fn nonsense_is_refused_with_the_syntax() {
        for bad in ["", "fast", "10 parsecs", "-3", "-3s", "1e999"] {
            let e = parse_duration(bad).expect_err(bad).to_string();
            assert!(e.contains("duration"), "{bad}: {e}");
        }
        assert!(parse_positive_duration("0us").is_err());
        let e = parse_offset_ns("100000000h")
            .expect_err("past i64 nanoseconds")
            .to_string();
        assert!(e.contains("292 years"), "{e}");
        assert_eq!(parse_offset_ns("292y"), Ok(9_214_819_200_000_000_000));
        assert!(parse_positive_duration("0").is_err());
        assert_eq!(parse_positive_duration("1ns"), Ok(Duration::from_nanos(1)));
    }

    #[test]
    fn an_offset_past_the_trace_clock_is_refused_as_typed() {
        let e = parse_offset_ns("99999999999999").unwrap_err().to_string();
        assert!(
            e.starts_with("`99999999999999` is longer than a recording can be"),
            "{e}"
        );
        assert!(parse_positive_ns("300y").is_err());
        // The largest offset the clock holds is still one.
        assert_eq!(
            parse_offset_ns("9223372036s"),
            Ok(9_223_372_036_000_000_000)
        );
    }
}
