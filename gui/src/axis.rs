//! [`AxisTime`], a time on the window's shared axis.
//!
//! The shared axis counts nanoseconds on the clock of the first recording; a second recording is
//! shifted onto it by its alignment offset ([`crate::model::TraceSlot::disp`] and
//! [`crate::model::TraceSlot::local`] convert). Axis times are fractional (`f64`) because the
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

#[cfg(test)]
mod tests {
    use super::*;

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
