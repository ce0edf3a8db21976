//! [`Nanos`], cufall's one type for a span of time in nanoseconds, and its one spelling.
//!
//! Every duration a person reads (a phase's total, a gap, the sampling interval, the width of a
//! selection) is a `Nanos` printed through [`Display`](std::fmt::Display): `850 ns`, `12.3 µs`,
//! `4.56 ms`, `1.234 s`. Where a terminal column is narrow, [`Nanos::compact`] gives the short
//! form `850ns`, `12.5µs`, `2m05s`. The trace's columns keep plain `i64` nanoseconds; this type is
//! what they become once code does arithmetic or prints them.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::time::Duration;

/// Whole nanoseconds of `d` as the trace's time columns hold them (`i64`), saturating at
/// `i64::MAX` (292 years): cufall's one conversion from a `Duration` to a timestamp or span.
pub fn nanos(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

/// Nanoseconds since the Unix epoch (CLOCK_REALTIME), the clock of every trace timestamp; 0
/// for a clock set before 1970.
pub fn now_unix_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(nanos)
        .unwrap_or(0)
}

/// [`nanos`] as an unsigned count, for counters of time spent (saturating at `u64::MAX`).
pub fn nanos_u64(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A signed span of time in whole nanoseconds (±292 years), serialized as the bare number.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Nanos(pub i64);

impl Nanos {
    pub const ZERO: Nanos = Nanos(0);

    /// `d` in whole nanoseconds, saturating at `i64::MAX` (see [`nanos`]).
    pub fn from_duration(d: Duration) -> Self {
        Nanos(nanos(d))
    }

    /// The count of nanoseconds.
    pub const fn get(self) -> i64 {
        self.0
    }

    /// The count of nanoseconds as a float, for ratios and plots.
    pub fn as_f64(self) -> f64 {
        self.0 as f64
    }

    /// The span as a `Duration`, `None` when negative.
    pub fn to_duration(self) -> Option<Duration> {
        u64::try_from(self.0).ok().map(Duration::from_nanos)
    }

    /// The narrow spelling for terminal columns: `850ns`, `12.5µs`, `16.8ms`, `2s`, `2m05s`,
    /// `0` for zero; at most three significant digits, trailing zeros dropped.
    pub fn compact(self) -> Compact {
        Compact(self)
    }
}

impl From<i64> for Nanos {
    fn from(ns: i64) -> Self {
        Nanos(ns)
    }
}

impl From<Nanos> for i64 {
    fn from(n: Nanos) -> Self {
        n.0
    }
}

impl std::ops::Add for Nanos {
    type Output = Nanos;
    fn add(self, rhs: Nanos) -> Nanos {
        Nanos(self.0.saturating_add(rhs.0))
    }
}

impl std::ops::Sub for Nanos {
    type Output = Nanos;
    fn sub(self, rhs: Nanos) -> Nanos {
        Nanos(self.0.saturating_sub(rhs.0))
    }
}

impl std::ops::AddAssign for Nanos {
    fn add_assign(&mut self, rhs: Nanos) {
        *self = *self + rhs;
    }
}

impl std::ops::SubAssign for Nanos {
    fn sub_assign(&mut self, rhs: Nanos) {
        *self = *self - rhs;
    }
}

/// Saturating, as `+` is.
impl std::iter::Sum for Nanos {
    fn sum<I: Iterator<Item = Nanos>>(iter: I) -> Nanos {
        iter.fold(Nanos::ZERO, |a, b| a + b)
    }
}

impl<'a> std::iter::Sum<&'a Nanos> for Nanos {
    fn sum<I: Iterator<Item = &'a Nanos>>(iter: I) -> Nanos {
        iter.copied().sum()
    }
}

/// `850 ns`, `12.3 µs`, `4.56 ms`, `1.234 s`, with a leading `-` when negative. Width and
/// alignment flags (`{:>10}`) apply to the whole text.
impl fmt::Display for Nanos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let a = self.0.unsigned_abs() as f64;
        let sign = if self.0 < 0 { "-" } else { "" };
        let s = if a < 1e3 {
            format!("{sign}{a:.0} ns")
        } else if a < 1e6 {
            format!("{sign}{:.1} µs", a / 1e3)
        } else if a < 1e9 {
            format!("{sign}{:.2} ms", a / 1e6)
        } else {
            format!("{sign}{:.3} s", a / 1e9)
        };
        f.pad(&s)
    }
}

/// [`Nanos::compact`]'s spelling.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Compact(Nanos);

impl fmt::Display for Compact {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ns = self.0.0;
        let abs = ns.unsigned_abs();
        let a = abs as f64;
        let sign = if ns < 0 { "-" } else { "" };
        let s = if ns == 0 {
            "0".to_string()
        } else if a < 1e3 {
            format!("{sign}{a:.0}ns")
        } else if a < 1e6 {
            format!("{sign}{}µs", three_digits(a / 1e3))
        } else if a < 1e9 {
            format!("{sign}{}ms", three_digits(a / 1e6))
        } else if a < 60e9 {
            format!("{sign}{}s", three_digits(a / 1e9))
        } else {
            let s = abs.saturating_add(500_000_000) / 1_000_000_000;
            format!("{sign}{}m{:02}s", s / 60, s % 60)
        };
        f.pad(&s)
    }
}

/// `x` (at least 1) with three significant digits at most, trailing zeros dropped.
fn three_digits(x: f64) -> String {
    let s = if x >= 100.0 {
        format!("{x:.0}")
    } else if x >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    };
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `cufall_analysis::render::fmt_ns` as it reads today: `Nanos`' `Display` replaces it, so
    /// the two must agree on every value.
    fn render_fmt_ns(ns: i64) -> String {
        let a = ns.unsigned_abs() as f64;
        let sign = if ns < 0 { "-" } else { "" };
        if a < 1e3 {
            format!("{sign}{a:.0} ns")
        } else if a < 1e6 {
            format!("{sign}{:.1} µs", a / 1e3)
        } else if a < 1e9 {
            format!("{sign}{:.2} ms", a / 1e6)
        } else {
            format!("{sign}{:.3} s", a / 1e9)
        }
    }

    const TABLE: &[(i64, &str)] = &[
        (0, "0 ns"),
        (1, "1 ns"),
        (850, "850 ns"),
        (999, "999 ns"),
        (1_000, "1.0 µs"),
        (12_345, "12.3 µs"),
        (999_949, "999.9 µs"),
        (999_999, "1000.0 µs"),
        (1_000_000, "1.00 ms"),
        (4_560_000, "4.56 ms"),
        (16_777_216, "16.78 ms"),
        (999_999_999, "1000.00 ms"),
        (1_000_000_000, "1.000 s"),
        (1_234_000_000, "1.234 s"),
        (125_000_000_000, "125.000 s"),
        (-850, "-850 ns"),
        (-12_345, "-12.3 µs"),
        (-4_560_000, "-4.56 ms"),
        (-1_234_000_000, "-1.234 s"),
        (i64::MAX, "9223372036.855 s"),
        (i64::MIN, "-9223372036.855 s"),
    ];

    #[test]
    fn display_reads_like_the_report() {
        for &(ns, want) in TABLE {
            assert_eq!(Nanos(ns).to_string(), want, "{ns}");
            assert_eq!(Nanos(ns).to_string(), render_fmt_ns(ns), "{ns}");
        }
    }

    #[test]
    fn display_pads_the_whole_text() {
        assert_eq!(format!("{:>9}|", Nanos(850)), "   850 ns|");
        assert_eq!(format!("{:<9}|", Nanos(-4_560_000)), "-4.56 ms |");
    }

    #[test]
    fn compact_fits_narrow_columns() {
        let table: &[(i64, &str)] = &[
            (0, "0"),
            (850, "850ns"),
            (1_000, "1µs"),
            (12_500, "12.5µs"),
            (3_200_000, "3.2ms"),
            (16_777_216, "16.8ms"),
            (1_250_000_000, "1.25s"),
            (2_000_000_000, "2s"),
            (-4_000_000_000, "-4s"),
            (59_000_000_000, "59s"),
            (125_000_000_000, "2m05s"),
            (125_499_999_999, "2m05s"),
            (125_500_000_000, "2m06s"),
            (-125_000_000_000, "-2m05s"),
        ];
        for &(ns, want) in table {
            assert_eq!(Nanos(ns).compact().to_string(), want, "{ns}");
        }
    }

    #[test]
    fn arithmetic_saturates_and_sums() {
        let mut n = Nanos(5);
        n += Nanos(7);
        assert_eq!(n, Nanos(12));
        n -= Nanos(2);
        assert_eq!(n, Nanos(10));
        assert_eq!(Nanos(i64::MAX) + Nanos(1), Nanos(i64::MAX));
        assert_eq!(Nanos(i64::MIN) - Nanos(1), Nanos(i64::MIN));
        let v = [Nanos(1), Nanos(2), Nanos(i64::MAX)];
        assert_eq!(v.iter().sum::<Nanos>(), Nanos(i64::MAX));
        assert_eq!(v[..2].iter().copied().sum::<Nanos>(), Nanos(3));
    }

    #[test]
    fn floats_and_durations() {
        assert_eq!(Nanos(250).as_f64(), 250.0);
        assert_eq!(
            Nanos::from_duration(Duration::from_millis(3)).to_duration(),
            Some(Duration::from_millis(3))
        );
        assert_eq!(Nanos(-1).to_duration(), None);
    }

    #[test]
    fn serializes_as_the_bare_number() {
        assert_eq!(
            serde_json::to_string(&Nanos(-42)).ok().as_deref(),
            Some("-42")
        );
        assert_eq!(serde_json::from_str::<Nanos>("7").ok(), Some(Nanos(7)));
    }
}
