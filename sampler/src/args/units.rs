//! Parsing the device lists users type (durations: [`super::duration`]).

/// A `--devices` value that is no device list.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{text}` is not a device list: use e.g. 0, 0,1 or 0-3 (or all)")]
pub struct DevicesError {
    pub text: String,
}

/// Parses `all`, `0`, `0,2`, `0-3` into a sorted list of device indices.
pub fn parse_devices(s: &str) -> Result<Option<Vec<usize>>, DevicesError> {
    let t = s.trim();
    if t.eq_ignore_ascii_case("all") || t.is_empty() {
        return Ok(None);
    }
    let bad = || DevicesError { text: s.into() };
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
    fn devices() {
        assert_eq!(parse_devices("all"), Ok(None));
        assert_eq!(parse_devices("2,0,2"), Ok(Some(vec![0, 2])));
        assert_eq!(parse_devices("0-3"), Ok(Some(vec![0, 1, 2, 3])));
        assert!(parse_devices("x").is_err());
        assert!(parse_devices("3-1").is_err());
    }
}
