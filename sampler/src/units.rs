//! Parsing the durations and device lists users type.

/// Parses `10us`, `10µs`, `2.5ms`, `500ns`, `3s`, `1m`, `1h` into nanoseconds.
pub fn parse_duration_ns(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value: f64 = num.parse().map_err(|_| {
        format!("`{s}` is not a duration: use a number and a unit, e.g. 10us, 5ms, 30s")
    })?;
    let scale = match unit.trim() {
        "ns" => 1.0,
        "us" | "µs" | "μs" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        "m" | "min" => 60e9,
        "h" => 3600e9,
        "" => {
            return Err(format!(
                "`{s}` has no unit: write e.g. {s}us, {s}ms or {s}s"
            ));
        }
        u => {
            return Err(format!(
                "unknown time unit `{u}` in `{s}`: use ns, us, ms, s, m or h"
            ));
        }
    };
    let ns = value * scale;
    if !ns.is_finite() || ns < 1.0 {
        return Err(format!("`{s}` is too short: the shortest duration is 1ns"));
    }
    Ok(ns.round() as u64)
}

/// Parses `all`, `0`, `0,2`, `0-3` into a sorted list of device indices.
pub fn parse_devices(s: &str) -> Result<Option<Vec<usize>>, String> {
    let t = s.trim();
    if t.eq_ignore_ascii_case("all") || t.is_empty() {
        return Ok(None);
    }
    let bad = || format!("`{s}` is not a device list: use e.g. 0, 0,1 or 0-3 (or all)");
    let mut out = Vec::new();
    for part in t.split(',') {
        let part = part.trim();
        if let Some((a, b)) = part.split_once('-') {
            let a: usize = a.trim().parse().map_err(|_| bad())?;
            let b: usize = b.trim().parse().map_err(|_| bad())?;
            if b < a {
                return Err(bad());
            }
            out.extend(a..=b);
        } else {
            out.push(part.parse().map_err(|_| bad())?);
        }
    }
    out.sort_unstable();
    out.dedup();
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration_ns("10us"), Ok(10_000));
        assert_eq!(parse_duration_ns("10µs"), Ok(10_000));
        assert_eq!(parse_duration_ns("2.5ms"), Ok(2_500_000));
        assert_eq!(parse_duration_ns("3s"), Ok(3_000_000_000));
        assert_eq!(parse_duration_ns("1m"), Ok(60_000_000_000));
        assert!(parse_duration_ns("10").unwrap_err().contains("no unit"));
        assert!(parse_duration_ns("10 parsecs").is_err());
        assert!(parse_duration_ns("0us").is_err());
    }

    #[test]
    fn devices() {
        assert_eq!(parse_devices("all"), Ok(None));
        assert_eq!(parse_devices("2,0,2"), Ok(Some(vec![0, 2])));
        assert_eq!(parse_devices("0-3"), Ok(Some(vec![0, 1, 2, 3])));
        assert!(parse_devices("x").is_err());
        assert!(parse_devices("3-1").is_err());
    }
}
