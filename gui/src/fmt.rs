//! Number and time formatting for labels and tooltips.

pub use cufall_trace::model::Nanos;

/// A span on the axis (fractional nanoseconds) rounded to whole ones for printing, so that every
/// duration reads in `Nanos`' one spelling: `12.3 µs`, `4.56 ms`, `1.234 s`.
pub fn round_ns(ns: f64) -> Nanos {
    // `as` saturates: a span past ±292 years prints as that bound.
    Nanos(ns.round() as i64)
}

/// A time since the start of the run (`offset_ns` after it), with enough digits to tell ticks
/// `step_ns` apart.
pub fn fmt_offset(offset_ns: f64, step_ns: f64) -> String {
    let s = offset_ns / 1e9;
    let digits = if step_ns >= 1e9 {
        0
    } else {
        ((1e9 / step_ns.max(1.0)).log10().ceil() as usize).min(9)
    };
    format!("{s:.digits$} s")
}

/// A metric value with about four significant digits: the same spelling as `cufall report`'s
/// tables, so a number reads alike in the window and in the terminal.
pub fn fmt_value(v: f64) -> String {
    cufall_analysis::render::fmt_num(Some(v))
}

/// A fraction as a percentage.
pub fn fmt_pct(f: f64) -> String {
    format!("{:.1} %", f * 100.0)
}

/// The analysis' place labels with arrows the default fonts lack spelled in ASCII.
pub fn plain(s: &str) -> String {
    s.replace('→', "->")
}

/// A metric name short enough for a label: the counter without its unit prefix and rollup,
/// `%` for a percentage of peak (`sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed`
/// becomes `sm pipe_tensor_cycles_active %`); the full name is in the tooltip.
pub fn short_metric(name: &str) -> String {
    let base = name.split('.').next().unwrap_or(name);
    let base = base.replace("__", " ");
    let rollup = name.split('.').nth(1).filter(|r| *r != "avg");
    let mut s = base;
    if let Some(r) = rollup {
        s.push('.');
        s.push_str(r);
    }
    if name.contains("pct") {
        s.push_str(" %");
    }
    if s.chars().count() > 30 {
        s = s.chars().take(29).collect::<String>() + "…";
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_offsets() {
        assert_eq!(round_ns(950.0).to_string(), "950 ns");
        assert_eq!(round_ns(12_345.0).to_string(), "12.3 µs");
        assert_eq!(round_ns(4_560_000.0).to_string(), "4.56 ms");
        assert_eq!(round_ns(1_234_000_000.0).to_string(), "1.234 s");
        assert_eq!(fmt_offset(1_500_000_000.0, 1e8), "1.5 s");
        assert_eq!(fmt_offset(1_250_000.0, 1e5), "0.0013 s");
        assert_eq!(fmt_value(93.456), "93.46");
    }
}
