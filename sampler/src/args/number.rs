//! The number flags' parsers: a full scale (positive) and a fraction of it (between 0 and 1).
//! Every subcommand uses these, so `--full-scale 0` is refused the same way everywhere.

/// A number flag's value that is not one it takes; the message says what it takes.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum NumberError {
    #[error("`{text}` is not a number: give the value that means fully busy, e.g. 100")]
    FullScaleNotANumber { text: String },
    #[error(
        "{value} cannot be a full scale: give a positive number, e.g. 100 for a percentage or 1 for a ratio"
    )]
    FullScale { value: f64 },
    #[error("`{text}` is not a number: give a fraction of full scale, e.g. 0.05 for 5 %")]
    FractionNotANumber { text: String },
    #[error("{value} is not a fraction between 0 and 1: give e.g. 0.05 for 5 % of full scale")]
    Fraction { value: f64 },
}

/// `--full-scale`: the value at the top of the scale, a positive finite number.
pub fn parse_full_scale(s: &str) -> Result<f64, NumberError> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| NumberError::FullScaleNotANumber { text: s.into() })?;
    if v.is_finite() && v > 0.0 {
        Ok(v)
    } else {
        Err(NumberError::FullScale { value: v })
    }
}

/// `--idle-below`: a fraction of full scale, strictly between 0 and 1.
pub fn parse_fraction(s: &str) -> Result<f64, NumberError> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| NumberError::FractionNotANumber { text: s.into() })?;
    if v > 0.0 && v < 1.0 {
        Ok(v)
    } else {
        Err(NumberError::Fraction { value: v })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_scale_must_be_positive_and_finite() {
        assert_eq!(parse_full_scale("100"), Ok(100.0));
        assert_eq!(parse_full_scale(" 0.5 "), Ok(0.5));
        for bad in ["0", "-1", "inf", "NaN", "abc", ""] {
            assert!(parse_full_scale(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn fraction_is_strictly_between_zero_and_one() {
        assert_eq!(parse_fraction("0.05"), Ok(0.05));
        for bad in ["0", "1", "5", "-0.1", "x"] {
            assert!(parse_fraction(bad).is_err(), "{bad} accepted");
        }
    }
}
