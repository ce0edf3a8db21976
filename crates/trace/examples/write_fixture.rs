//! Writes a small trace with known contents, for the test that reads it with pyarrow and
//! polars from Python (`scripts/interop_test.py`). Synthetic data.
//!
//! Run: `cargo run -p cufall-trace --example write_fixture -- OUT.cufall`

use cufall_testkit::tables as common;

fn main() {
    let Some(out) = std::env::args().nth(1) else {
        eprintln!("usage: write_fixture OUT.cufall");
        std::process::exit(2);
    };
    let _ = std::fs::remove_dir_all(&out);
    let stats = common::write_full(std::path::Path::new(&out), 3);
    println!("{} samples in {} segments", stats.samples, stats.segments);
}
