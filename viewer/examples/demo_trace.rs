//! Writes a synthetic trace (8 GPUs, 2 s, 10 µs interval; not a GPU recording) for trying the
//! viewer without a GPU: `cargo run -p cufall-viewer --example demo_trace -- /tmp/demo.cufall`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "demo.cufall".into());
    let gpus: u32 = std::env::args().nth(2).map_or(Ok(8), |s| s.parse())?;
    let t0 = 1_764_460_800_000_000_000; // 2025-11-30T00:00:00Z
    cufall_testkit::synth::write_demo_trace(
        std::path::Path::new(&path),
        gpus,
        t0,
        2_000_000_000,
        10_000,
    )?;
    println!("wrote {path}");
    Ok(())
}
