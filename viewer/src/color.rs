//! Colour: what the terminal can show, and the colour map.
//!
//! The map is Google's Turbo (a perceptually smoothed rainbow) from dark blue at 0 through
//! green and yellow to red at full scale, so saturation reads as red. Terminals with 256 or 16
//! colours get the nearest palette entries; without colour (no `--color`, `NO_COLOR`, or a dumb
//! terminal) values are drawn with shade glyphs that every terminal font has.

use ratatui::style::Color;

/// What the heatmap may use to show a value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Palette {
    /// 24-bit colour.
    Truecolor,
    /// The xterm 256-colour palette.
    #[cfg_attr(feature = "clap", value(name = "256"))]
    Ansi256,
    /// The 16 basic colours.
    #[cfg_attr(feature = "clap", value(name = "16"))]
    Ansi16,
    /// No colour: shade glyphs ` ░▒▓█`.
    Mono,
}

impl Palette {
    /// The palette for this terminal: `want_color` is the `--color` flag, `forced` an explicit
    /// `--palette`, and `env` looks up an environment variable (`NO_COLOR`, `COLORTERM`, `TERM`).
    pub fn detect(
        want_color: bool,
        forced: Option<Palette>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Palette {
        if let Some(p) = forced {
            return p;
        }
        let no_color = env("NO_COLOR").is_some_and(|v| !v.is_empty());
        if !want_color || no_color {
            return Palette::Mono;
        }
        let colorterm = env("COLORTERM").unwrap_or_default().to_ascii_lowercase();
        if colorterm == "truecolor" || colorterm == "24bit" {
            return Palette::Truecolor;
        }
        let term = env("TERM").unwrap_or_default().to_ascii_lowercase();
        if term == "dumb" {
            Palette::Mono
        } else if term.contains("truecolor") || term.contains("direct") {
            Palette::Truecolor
        } else if term.contains("256") {
            Palette::Ansi256
        } else {
            Palette::Ansi16
        }
    }

    /// Detects from the process environment.
    pub fn from_env(want_color: bool, forced: Option<Palette>) -> Palette {
        Self::detect(want_color, forced, |k| std::env::var(k).ok())
    }

    pub fn is_color(self) -> bool {
        self != Palette::Mono
    }

    pub fn name(self) -> &'static str {
        match self {
            Palette::Truecolor => "truecolor",
            Palette::Ansi256 => "256",
            Palette::Ansi16 => "16",
            Palette::Mono => "mono",
        }
    }

    /// Colour of a value that is `f` of full scale (clamped to 0..=1).
    pub fn color(self, f: f64) -> Color {
        let f = if f.is_finite() {
            f.clamp(0.0, 1.0)
        } else {
            0.0
        };
        match self {
            Palette::Truecolor => {
                let (r, g, b) = turbo(f);
                Color::Rgb(r, g, b)
            }
            Palette::Ansi256 => {
                let (r, g, b) = turbo(f);
                let q = |c: u8| ((u16::from(c) * 5 + 127) / 255) as u8;
                Color::Indexed(16 + 36 * q(r) + 6 * q(g) + q(b))
            }
            Palette::Ansi16 => {
                const RAMP: [Color; 6] = [
                    Color::Blue,
                    Color::Cyan,
                    Color::Green,
                    Color::Yellow,
                    Color::LightRed,
                    Color::Red,
                ];
                RAMP[((f * RAMP.len() as f64) as usize).min(RAMP.len() - 1)]
            }
            Palette::Mono => Color::Reset,
        }
    }
}

/// Shade glyphs from idle to full, for terminals without colour.
pub const SHADES: [char; 5] = [' ', '░', '▒', '▓', '█'];
/// A bucket without samples (no data yet, or between recordings) in mono.
pub const NO_DATA: char = '·';
/// A bucket whose samples were lost (a drop record covers it).
pub const DROP_MONO: char = 'x';
pub const DROP_COLOR: char = '×';

/// The shade glyph of `f` of full scale.
pub fn shade(f: f64) -> char {
    let f = if f.is_finite() {
        f.clamp(0.0, 1.0)
    } else {
        0.0
    };
    SHADES[((f * 4.0).round() as usize).min(SHADES.len() - 1)]
}

/// Turbo, restricted to its blue-to-red part so that 0 is dark blue and 1 a clear red.
fn turbo(f: f64) -> (u8, u8, u8) {
    let t = 0.05 + 0.85 * f;
    let r = 0.135_721_38
        + t * (4.615_392_60
            + t * (-42.660_322_58
                + t * (132.131_082_34 + t * (-152.942_393_96 + t * 59.286_379_43))));
    let g = 0.091_402_61
        + t * (2.194_188_39
            + t * (4.842_966_58 + t * (-14.185_033_33 + t * (4.277_298_57 + t * 2.829_566_04))));
    let b = 0.106_673_30
        + t * (12.641_946_08
            + t * (-60.582_048_36
                + t * (110.362_767_71 + t * (-89.903_109_12 + t * 27.348_249_73))));
    let c = |x: f64| (x.clamp(0.0, 1.0) * 255.0).round() as u8;
    (c(r), c(g), c(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn detection_follows_flag_no_color_colorterm_and_term() {
        let d = Palette::detect;
        assert_eq!(
            d(false, None, env(&[("COLORTERM", "truecolor")])),
            Palette::Mono
        );
        assert_eq!(
            d(
                true,
                None,
                env(&[("NO_COLOR", "1"), ("COLORTERM", "truecolor")])
            ),
            Palette::Mono
        );
        assert_eq!(
            d(true, None, env(&[("COLORTERM", "24bit")])),
            Palette::Truecolor
        );
        assert_eq!(
            d(true, None, env(&[("TERM", "xterm-256color")])),
            Palette::Ansi256
        );
        assert_eq!(d(true, None, env(&[("TERM", "xterm")])), Palette::Ansi16);
        assert_eq!(d(true, None, env(&[("TERM", "dumb")])), Palette::Mono);
        assert_eq!(d(false, Some(Palette::Ansi16), env(&[])), Palette::Ansi16);
    }

    #[test]
    fn full_scale_is_red_and_idle_is_dark_blue() {
        let Color::Rgb(r, g, b) = Palette::Truecolor.color(1.0) else {
            panic!("not rgb")
        };
        assert!(r > 150 && g < 80 && b < 40, "{r} {g} {b}");
        let Color::Rgb(r, g, b) = Palette::Truecolor.color(0.0) else {
            panic!("not rgb")
        };
        assert!(b > r && b > g && r < 120, "{r} {g} {b}");
        assert_eq!(Palette::Ansi16.color(1.0), Color::Red);
        assert_eq!(shade(0.0), ' ');
        assert_eq!(shade(1.0), '█');
        assert_eq!(shade(7.0), '█');
    }
}
