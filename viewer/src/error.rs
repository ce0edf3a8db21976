//! What can keep a view from starting or running; the command line adds what to type next.

/// Everything the views can fail with. The `Display` text is the message shown to the user.
#[derive(Debug, thiserror::Error)]
pub enum ViewError {
    /// A heatmap names a metric the feed does not carry.
    #[error("unknown metric {missing}: this feed has {available}")]
    UnknownMetric { missing: String, available: String },

    /// A heatmap the recording lists (its manifest's `heatmaps`, not a flag) names a metric the
    /// recording does not hold.
    #[error(
        "the recording's heatmaps (manifest.json, `heatmaps`) name the metric {missing}, which it did not record; it records {available}"
    )]
    HeatmapNotRecorded { missing: String, available: String },

    /// The interactive view was asked for without a terminal to draw on.
    #[error(
        "the interactive view needs a terminal, and standard input or output is not one (a pipe, a file, or no terminal at all)"
    )]
    NoTerminal,

    /// A printed frame too low to hold the rows this view needs (see [`crate::draw::min_height`]).
    #[error(
        "a frame of {height} rows is too low for this view: it needs at least {min} (title, legend, one GPU row, phase lane if any, time axis, status, keys, and with several GPUs a line counting those not shown)"
    )]
    FrameTooLow { height: u16, min: u16 },

    /// Drawing on, or reading keys from, the terminal failed.
    #[error("the terminal failed: {0}")]
    Terminal(#[from] std::io::Error),
}

pub type Result<T, E = ViewError> = std::result::Result<T, E>;
