//! GPU checks (run on the H200 by scripts/gpu/engine.sh): logits against the CPU reference and
//! speculative == greedy on the GPU, for several knob settings.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn gpu_matches_cpu_reference_and_greedy() {
    let results = specdec::check::run_cases().unwrap();
    for r in &results {
        println!("{r:?}");
    }
    for r in &results {
        assert!(r.prefill_rel_err < specdec::check::TOLERANCE, "{r:?}");
        assert!(r.verify_rel_err < specdec::check::TOLERANCE, "{r:?}");
        assert!(r.spec_equals_greedy, "{r:?}");
    }
}

/// Without a driver the backend reports a clear error instead of panicking.
#[test]
fn no_gpu_is_an_error_not_a_panic() {
    // SAFETY-free probe: on a GPU machine this succeeds, elsewhere it must be an Err.
    match specdec::gpu::probe() {
        Ok(()) => {}
        Err(e) => assert!(
            e.to_string().contains("NVIDIA") || e.to_string().contains("CUDA"),
            "{e}"
        ),
    }
}

/// The split-KV chunk rule reads the SM count from the device (132 on an H200).
#[test]
#[ignore = "needs an NVIDIA GPU"]
fn device_reports_its_sm_count() {
    let dev = specdec::gpu::Dev::new().unwrap();
    println!("{}: {} SMs", dev.name, dev.sm_count);
    assert!(dev.sm_count >= 1);
    if dev.name.contains("H200") {
        assert_eq!(dev.sm_count, 132);
    }
}
