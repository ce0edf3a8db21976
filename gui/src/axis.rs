//! [`AxisTime`], a time on the window's shared axis.
//!
//! The shared axis counts nanoseconds on the clock of the first recording; a second recording is
//! shifted onto it by its alignment offset ([`crate::loaded::TraceSlot::disp`] and
//! [`crate::loaded::TraceSlot::local`] convert). Axis times are fractional (`f64`) because the
//! window zooms to less than a nanosecond per point and pixels fall between nanoseconds; a
//! recording's own times stay whole `i64` nanoseconds. The difference of two axis times is a
//! span in nanoseconds, a plain `f64` whose name ends in `_ns`.

use std::ops::{Add, AddAssign, Sub, SubAssign};

/// A time on the shared axis, in (fractional) nanoseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, PartialOrd)]
pub struct AxisTime {
    pub ns: f64,
}

impl AxisTime {
    pub const fn new(ns: f64) -> AxisTime {
        AxisTime { ns }
    }

    /// The earlier of two times (`f64::min`'s rule for NaN).
    pub fn min(self, other: AxisTime) -> AxisTime {
        AxisTime::new(self.ns.min(other.ns))
    }

    /// The later of two times (`f64::max`'s rule for NaN).
    pub fn max(self, other: AxisTime) -> AxisTime {
        AxisTime::new(self.ns.max(other.ns))
    }

    /// Halfway between `a` and `b`.
    pub fn mid(a: AxisTime, b: AxisTime) -> AxisTime {
        AxisTime::new((a.ns + b.ns) / 2.0)
    }

    /// The whole nanosecond at or before this time.
    pub fn floor(self) -> AxisTime {
        AxisTime::new(self.ns.floor())
    }

    /// The whole nanosecond at or after this time.
    pub fn ceil(self) -> AxisTime {
        AxisTime::new(self.ns.ceil())
    }

    pub fn is_finite(self) -> bool {
        self.ns.is_finite()
    }
}

/// The span from `rhs` to `self` in nanoseconds.
impl Sub for AxisTime {
    type Output = f64;
    fn sub(self, rhs: AxisTime) -> f64 {
        self.ns - rhs.ns
    }
}

/// The time `rhs` nanoseconds later.
impl Add<f64> for AxisTime {
    type Output = AxisTime;
    fn add(self, rhs: f64) -> AxisTime {
        AxisTime::new(self.ns + rhs)
    }
}

/// The time `rhs` nanoseconds earlier.
impl Sub<f64> for AxisTime {
    type Output = AxisTime;
    fn sub(self, rhs: f64) -> AxisTime {
        AxisTime::new(self.ns - rhs)
    }
}

impl AddAssign<f64> for AxisTime {
    fn add_assign(&mut self, rhs: f64) {
        self.ns += rhs;
    }
}

impl SubAssign<f64> for AxisTime {
    fn sub_assign(&mut self, rhs: f64) {
        self.ns -= rhs;
    }
}

/// The unit a time axis with ticks `step_ns` apart is labelled in: the largest of s, ms, µs
/// and ns of which the step is at least a tenth, so labels read `0.5 ms`, `50 µs`.
pub fn axis_unit(step_ns: f64) -> (f64, &'static str) {
    [(1e9, "s"), (1e6, "ms"), (1e3, "µs")]
        .into_iter()
        .find(|(u, _)| step_ns >= 0.1 * u)
        .unwrap_or((1.0, "ns"))
}

/// `offset_ns` in the unit of a step of `step_ns` ([`axis_unit`]), with the decimals that tell
/// ticks apart: `12.5 ms`, `250 µs`, `1.2 s`.
pub fn fmt_axis(offset_ns: f64, step_ns: f64) -> String {
    let (unit, name) = axis_unit(step_ns);
    let step = step_ns / unit;
    let digits = if step >= 1.0 {
        0
    } else {
        ((-step.log10()).ceil().max(0.0) as usize).min(9)
    };
    let v = offset_ns / unit;
    // No `-0` for a tick a rounding error before the start.
    let v = if v.abs() < 0.5 * 10f64.powi(-(digits as i32)) {
        0.0
    } else {
        v
    };
    format!("{v:.digits$} {name}")
}

/// One tick of the time axis.
#[derive(Clone, Debug, PartialEq)]
pub struct Tick {
    pub t: AxisTime,
    pub label: String,
}

/// The ticks of an axis showing `[t0, t1)` on `width_px` points, times counted from `origin`
/// (the recording's start): steps of 1, 2 or 5 × 10ⁿ ns, as close as possible to one per 110
/// points but wider than any label (`label_w` measures one, in points, with room between), so
/// that labels never overlap. Deep into a long run, where offsets from the start need many
/// digits, the first tick has its full offset and the others read `+50 µs` from it.
pub fn ticks(
    (t0, t1): (AxisTime, AxisTime),
    origin: AxisTime,
    width_px: f32,
    label_w: &dyn Fn(&str) -> f32,
) -> Vec<Tick> {
    let span = t1 - t0;
    if !(span > 0.0 && width_px > 0.0 && span.is_finite()) {
        return Vec::new();
    }
    let px_per_ns = f64::from(width_px) / span;
    let target = span / f64::from((width_px / 110.0).max(1.0));
    let mut step = 1.0f64;
    while step * 10.0 <= target {
        step *= 10.0;
    }
    if step * 5.0 <= target {
        step *= 5.0;
    } else if step * 2.0 <= target {
        step *= 2.0;
    }
    let mut before: Option<Tick> = None;
    for _ in 0..24 {
        let mut out = ticks_at(t0, t1, origin, step);
        if out.is_empty() {
            // Steps too wide for two labels left none in view: one of the last ones.
            return before.into_iter().collect();
        }
        let widest = out.iter().map(|t| label_w(&t.label)).fold(0.0f32, f32::max);
        if out.len() == 1 || f64::from(widest + 14.0) <= step * px_per_ns {
            return out;
        }
        out.truncate(1);
        before = out.pop();
        // The next of 1, 2, 5 × 10ⁿ.
        let mantissa = step / 10f64.powf(step.log10().floor());
        step *= if (mantissa - 2.0).abs() < 0.5 {
            2.5
        } else {
            2.0
        };
    }
    Vec::new()
}

/// Ticks every `step` ns from `origin`, labelled.
fn ticks_at(t0: AxisTime, t1: AxisTime, origin: AxisTime, step: f64) -> Vec<Tick> {
    let first = origin + ((t0 - origin) / step).ceil() * step;
    // Offsets that need more than 5 significant digits at this step read from the first tick.
    let relative = ((first - origin).abs() / step) >= 1e4;
    let mut out = Vec::new();
    let mut t = first;
    while t <= t1 && out.len() < 200 {
        let label = if relative && !out.is_empty() {
            format!("+{}", fmt_axis(t - first, step))
        } else if relative {
            // The full offset in seconds, to the step.
            crate::fmt::fmt_offset(t - origin, step)
        } else {
            fmt_axis(t - origin, step)
        };
        out.push(Tick { t, label });
        t = first + step * out.len() as f64;
    }
    out
}

/// A Unix time as the wall clock reads it, `14:20:55.146157127 UTC`.
pub fn fmt_wall_clock(unix_ns: i64) -> String {
    let secs = unix_ns.div_euclid(1_000_000_000);
    let ns = unix_ns.rem_euclid(1_000_000_000);
    let day = secs.rem_euclid(86_400);
    format!(
        "{:02}:{:02}:{:02}.{ns:09} UTC",
        day / 3600,
        day / 60 % 60,
        day % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 7 points per character, as a monospace font of 11 points is about.
    fn width(s: &str) -> f32 {
        s.chars().count() as f32 * 7.0
    }

    fn labels(t0: f64, t1: f64, w: f32) -> Vec<String> {
        ticks(
            (AxisTime::new(t0), AxisTime::new(t1)),
            AxisTime::new(0.0),
            w,
            &width,
        )
        .into_iter()
        .map(|t| t.label)
        .collect()
    }

    #[test]
    fn axis_units_adapt_to_the_zoom() {
        for (t1, want) in [
            (30e9, ["0 s", "2 s", "4 s"]),
            (30e6, ["0 ms", "2 ms", "4 ms"]),
            (3e6, ["0.0 ms", "0.2 ms", "0.4 ms"]),
            (300e3, ["0 µs", "20 µs", "40 µs"]),
            (2000.0, ["0.0 µs", "0.2 µs", "0.4 µs"]),
            (200.0, ["0 ns", "20 ns", "40 ns"]),
        ] {
            assert_eq!(labels(0.0, t1, 1000.0)[..3], want);
        }
        assert_eq!(fmt_axis(1_500_000.0, 5e5), "1.5 ms");
        assert_eq!(fmt_axis(-1.0, 1e6), "0 ms");
    }

    #[test]
    fn deep_in_a_long_run_ticks_read_from_the_first() {
        // 100 µs of a run at 20 s: the first tick in full, the others from it.
        let l = labels(20e9 + 3e3, 20e9 + 103e3, 1000.0);
        assert_eq!(l[0], "20.00001 s", "{l:?}");
        assert_eq!(l[1], "+10 µs", "{l:?}");
    }

    #[test]
    fn labels_never_overlap_at_any_zoom_or_width() {
        for &w in &[120.0f32, 400.0, 1187.0, 1700.0] {
            for k in 0..60 {
                let span = 300.0 * 1.6f64.powi(k);
                for &start in &[0.0, 1.7e9, 3.6e12] {
                    let ts = ticks(
                        (AxisTime::new(start), AxisTime::new(start + span)),
                        AxisTime::new(0.0),
                        w,
                        &width,
                    );
                    let x = |t: AxisTime| (t - AxisTime::new(start)) / span * f64::from(w);
                    for pair in ts.windows(2) {
                        let gap = x(pair[1].t) - x(pair[0].t);
                        assert!(
                            gap >= f64::from(width(&pair[0].label) + 14.0) - 1e-6,
                            "{w} {span} {start}: {:?} {:?}",
                            pair[0],
                            pair[1]
                        );
                    }
                    assert!(!ts.is_empty() || w < 50.0, "{w} {span} {start}");
                }
            }
        }
    }

    #[test]
    fn wall_clock() {
        assert_eq!(
            fmt_wall_clock(1_796_253_655_146_157_127),
            "23:20:55.146157127 UTC"
        );
        assert_eq!(fmt_wall_clock(0), "00:00:00.000000000 UTC");
    }

    #[test]
    fn spans_and_shifts() {
        let a = AxisTime::new(100.0);
        let b = a + 250.0;
        assert_eq!(b - a, 250.0);
        assert_eq!(b - 50.0, AxisTime::new(300.0));
        assert_eq!(AxisTime::mid(a, b), AxisTime::new(225.0));
        assert!(a < b && a.max(b) == b && a.min(b) == a);
        assert_eq!(AxisTime::new(1.5).floor(), AxisTime::new(1.0));
        assert_eq!(AxisTime::new(1.5).ceil(), AxisTime::new(2.0));
    }
}
