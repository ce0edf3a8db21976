//! The calibration process (`cufall calibrate-capture`, hidden): CUDA work of its own, timed
//! with the capture library's CUPTI tracing on and off.
//!
//! CUDA loads the capture library into this process as it does into the program
//! (`CUDA_INJECTION64_PATH`, the program's capture kinds, [`cufall_capture::ENV_CALIBRATE`]).
//! For each kind of launch: rounds of [`LAUNCHES`] launches, tracing off then on (the order
//! alternates between rounds, so a drift of the machine cancels), each block's time being the
//! launch calls plus the hand-over of their records (CUPTI's buffer flush and cufall's decoding
//! of every record), GPU waits not counted. The cost is the median over rounds of the
//! difference per launch. A block that traced nothing with tracing on, or something with it
//! off, is an error, never a figure.
#![allow(unsafe_code)]

use super::lines::{
    ChildLine, ENTRY_SET_TRACING, ENTRY_TAKE_RECORDS, Launch, Measured, cost_kinds,
};
use cudarc::driver::sys::{self, CUresult};
use cufall_capture::CostKind;
use cufall_capture::Kinds;
use std::ffi::c_void;
use std::time::{Duration, Instant};

/// Launches per timed block.
pub const LAUNCHES: u32 = 200;
/// Rounds of one block off and one on.
pub const ROUNDS: usize = 15;
/// Untimed launches before each block (after tracing was switched).
const WARM: u32 = 20;

/// Why the calibration process could not time a kind.
#[derive(Debug, thiserror::Error)]
pub enum ChildError {
    #[error("libcuda is not on this machine's library path")]
    NoDriver,
    #[error("{what} failed: {code:?}")]
    Cuda { what: &'static str, code: CUresult },
    #[error(
        "the capture library was not loaded into the calibration process (CUDA did not call it, or CUPTI could not trace): {0}"
    )]
    NoLibrary(String),
    #[error("the capture library refused to switch CUPTI's tracing {0}")]
    Switch(&'static str),
    #[error(
        "with tracing on, {got} record(s) came back for {launched} launch(es): CUPTI did not trace them"
    )]
    NotTraced { got: i64, launched: u64 },
    #[error("with tracing off, {0} record(s) came back: the switch did not turn tracing off")]
    StillTraced(i64),
    #[error("no PTX target this driver accepts: {0}")]
    NoKernel(String),
}

fn ck(code: CUresult, what: &'static str) -> Result<(), ChildError> {
    if code == CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(ChildError::Cuda { what, code })
    }
}

/// The capture library's two calibration entry points, from the copy CUDA loaded.
struct Switch {
    _lib: libloading::os::unix::Library,
    set_tracing: unsafe extern "C" fn(i32) -> i32,
    take_records: unsafe extern "C" fn() -> i64,
}

impl Switch {
    fn find(library: &std::path::Path) -> Result<Switch, ChildError> {
        use libloading::os::unix::{Library, RTLD_LAZY};
        // SAFETY: RTLD_NOLOAD only finds the copy CUDA already loaded (no initialiser runs).
        let lib = unsafe { Library::open(Some(library), RTLD_LAZY | libc::RTLD_NOLOAD) }
            .map_err(|e| ChildError::NoLibrary(e.to_string()))?;
        // SAFETY: the symbols' types are the library's `extern "C"` signatures (inject/src/lib.rs).
        let (set_tracing, take_records) = unsafe {
            (
                *lib.get::<unsafe extern "C" fn(i32) -> i32>(ENTRY_SET_TRACING.as_bytes())
                    .map_err(|e| ChildError::NoLibrary(e.to_string()))?,
                *lib.get::<unsafe extern "C" fn() -> i64>(ENTRY_TAKE_RECORDS.as_bytes())
                    .map_err(|e| ChildError::NoLibrary(e.to_string()))?,
            )
        };
        Ok(Switch {
            _lib: lib,
            set_tracing,
            take_records,
        })
    }

    fn set(&self, on: bool) -> Result<(), ChildError> {
        // SAFETY: a plain call into the library.
        match unsafe { (self.set_tracing)(i32::from(on)) } {
            0 => Ok(()),
            _ => Err(ChildError::Switch(if on { "on" } else { "off" })),
        }
    }

    fn take(&self) -> Result<i64, ChildError> {
        // SAFETY: a plain call into the library.
        match unsafe { (self.take_records)() } {
            n if n >= 0 => Ok(n),
            _ => Err(ChildError::Switch("off and on (not a calibration process)")),
        }
    }
}

/// The CUDA objects the launches use, on device 0 of the process.
struct Gpu {
    stream: sys::CUstream,
    kernel: sys::CUfunction,
    host: *mut c_void,
    device: sys::CUdeviceptr,
    /// The graph instantiated with tracing off and with it on: CUPTI instruments a graph when
    /// it is instantiated, and an instrumented graph goes on making kernel records (graphs
    /// traced node by node) after tracing is switched off (seen on the H200).
    graphs: Option<[sys::CUgraphExec; 2]>,
}

impl Gpu {
    fn open() -> Result<Gpu, ChildError> {
        // SAFETY: probes for libcuda without calling into it.
        if !unsafe { sys::is_culib_present() } {
            return Err(ChildError::NoDriver);
        }
        // SAFETY: driver calls in their documented order, each checked; out-pointers are
        // locals.
        unsafe {
            ck(sys::cuInit(0), "cuInit")?;
            let mut dev = 0;
            ck(sys::cuDeviceGet(&mut dev, 0), "cuDeviceGet")?;
            let mut ctx = std::ptr::null_mut();
            ck(
                sys::cuDevicePrimaryCtxRetain(&mut ctx, dev),
                "cuDevicePrimaryCtxRetain",
            )?;
            ck(sys::cuCtxSetCurrent(ctx), "cuCtxSetCurrent")?;
            let mut stream = std::ptr::null_mut();
            ck(
                sys::cuStreamCreate(
                    &mut stream,
                    sys::CUstream_flags_enum::CU_STREAM_NON_BLOCKING as u32,
                ),
                "cuStreamCreate",
            )?;
            let kernel = null_kernel(dev)?;
            let mut host = std::ptr::null_mut();
            ck(sys::cuMemAllocHost_v2(&mut host, 64), "cuMemAllocHost")?;
            let mut device = 0;
            ck(sys::cuMemAlloc_v2(&mut device, 64), "cuMemAlloc")?;
            Ok(Gpu {
                stream,
                kernel,
                host,
                device,
                graphs: None,
            })
        }
    }

    /// A graph of `nodes` empty kernels in a chain, instantiated once untraced and once traced.
    fn build_graph(&mut self, nodes: u32, switch: &Switch) -> Result<(), ChildError> {
        // SAFETY: graph calls in their documented order, each checked; `params` outlives them.
        unsafe {
            let mut graph = std::ptr::null_mut();
            ck(sys::cuGraphCreate(&mut graph, 0), "cuGraphCreate")?;
            let params = sys::CUDA_KERNEL_NODE_PARAMS {
                func: self.kernel,
                gridDimX: 1,
                gridDimY: 1,
                gridDimZ: 1,
                blockDimX: 32,
                blockDimY: 1,
                blockDimZ: 1,
                sharedMemBytes: 0,
                kernelParams: std::ptr::null_mut(),
                extra: std::ptr::null_mut(),
                kern: std::ptr::null_mut(),
                ctx: std::ptr::null_mut(),
            };
            let mut prev: Option<sys::CUgraphNode> = None;
            for _ in 0..nodes.max(1) {
                let mut node = std::ptr::null_mut();
                let (deps, n) = match &prev {
                    Some(p) => (std::ptr::from_ref(p), 1),
                    None => (std::ptr::null(), 0),
                };
                ck(
                    sys::cuGraphAddKernelNode_v2(&mut node, graph, deps, n, &params),
                    "cuGraphAddKernelNode",
                )?;
                prev = Some(node);
            }
            let mut execs = [std::ptr::null_mut(); 2];
            for (on, exec) in [false, true].into_iter().zip(execs.iter_mut()) {
                switch.set(on)?;
                ck(
                    sys::cuGraphInstantiateWithFlags(exec, graph, 0),
                    "cuGraphInstantiate",
                )?;
            }
            self.graphs = Some(execs);
        }
        Ok(())
    }

    /// Launches one `what`; `traced`: the graph instantiated with tracing on.
    fn launch(&self, what: Launch, traced: bool) -> Result<(), ChildError> {
        // SAFETY: launches of objects `open` and `build_graph` made, on their stream.
        unsafe {
            match what {
                Launch::Kernel => ck(
                    sys::cuLaunchKernel(
                        self.kernel,
                        1,
                        1,
                        1,
                        32,
                        1,
                        1,
                        0,
                        self.stream,
                        std::ptr::null_mut(),
                        std::ptr::null_mut(),
                    ),
                    "cuLaunchKernel",
                ),
                Launch::Copy => ck(
                    sys::cuMemcpyHtoDAsync_v2(self.device, self.host, 4, self.stream),
                    "cuMemcpyHtoDAsync",
                ),
                Launch::Graph => match self.graphs {
                    Some(g) => ck(
                        sys::cuGraphLaunch(g[usize::from(traced)], self.stream),
                        "cuGraphLaunch",
                    ),
                    None => Err(ChildError::Cuda {
                        what: "cuGraphLaunch (no graph)",
                        code: CUresult::CUDA_ERROR_INVALID_HANDLE,
                    }),
                },
            }
        }
    }

    fn sync(&self) -> Result<(), ChildError> {
        // SAFETY: the stream `open` made.
        ck(
            unsafe { sys::cuStreamSynchronize(self.stream) },
            "cuStreamSynchronize",
        )
    }
}

/// An empty kernel, from PTX the driver compiles for this GPU. The first target the driver
/// accepts is kept: this GPU's own architecture first, then older ones any newer GPU runs.
fn null_kernel(dev: sys::CUdevice) -> Result<sys::CUfunction, ChildError> {
    let attr = |a| {
        let mut v = 0;
        // SAFETY: writes one attribute of a valid device.
        unsafe { sys::cuDeviceGetAttribute(&mut v, a, dev) };
        v
    };
    let (major, minor) = (
        attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
        attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR),
    );
    let own = format!("sm_{major}{minor}");
    let mut tried = Vec::new();
    for (version, target) in [
        ("8.0", "sm_75"),
        ("8.0", own.as_str()),
        ("8.7", own.as_str()),
        ("7.0", "sm_52"),
    ] {
        let ptx = format!(
            ".version {version}\n.target {target}\n.address_size 64\n\
             .visible .entry cufall_calibration_empty()\n{{\n\tret;\n}}\n\0"
        );
        let mut module = std::ptr::null_mut();
        // SAFETY: `ptx` is a NUL-terminated PTX text that lives across the call.
        let r = unsafe { sys::cuModuleLoadData(&mut module, ptx.as_ptr().cast()) };
        if r != CUresult::CUDA_SUCCESS {
            tried.push(format!("{target} (PTX {version}): {r:?}"));
            continue;
        }
        let mut f = std::ptr::null_mut();
        // SAFETY: the module just loaded defines this entry.
        let r = unsafe {
            sys::cuModuleGetFunction(&mut f, module, c"cufall_calibration_empty".as_ptr())
        };
        ck(r, "cuModuleGetFunction")?;
        return Ok(f);
    }
    Err(ChildError::NoKernel(tried.join("; ")))
}

/// Per-launch time of one block: the launch calls and the hand-over of their records.
fn block(
    gpu: &Gpu,
    switch: &Switch,
    what: Launch,
    on: bool,
    expect_per_launch: u64,
) -> Result<Duration, ChildError> {
    switch.set(on)?;
    for _ in 0..WARM {
        gpu.launch(what, on)?;
    }
    gpu.sync()?;
    switch.take()?;
    let t0 = Instant::now();
    for _ in 0..LAUNCHES {
        gpu.launch(what, on)?;
    }
    let launched = t0.elapsed();
    gpu.sync()?;
    let t1 = Instant::now();
    let records = switch.take()?;
    let handed = t1.elapsed();
    let want = u64::from(LAUNCHES) * expect_per_launch;
    match (on, u64::try_from(records).unwrap_or(0)) {
        (true, got) if got < want => {
            return Err(ChildError::NotTraced {
                got: records,
                launched: u64::from(LAUNCHES),
            });
        }
        (false, got) if got > 0 => return Err(ChildError::StillTraced(records)),
        _ => {}
    }
    Ok((launched + handed) / LAUNCHES)
}

/// Times one kind of launch: `records_per_launch` records are expected of each with tracing on.
fn measure(
    gpu: &Gpu,
    switch: &Switch,
    what: Launch,
    records_per_launch: u64,
) -> Result<Measured, ChildError> {
    let mut diffs = Vec::with_capacity(ROUNDS);
    let mut bare = Vec::with_capacity(ROUNDS);
    for round in 0..ROUNDS {
        let order = if round % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        let (mut off, mut on) = (Duration::ZERO, Duration::ZERO);
        for tracing in order {
            let t = block(gpu, switch, what, tracing, records_per_launch)?;
            if tracing {
                on = t;
            } else {
                off = t;
            }
        }
        diffs.push(on.as_nanos() as f64 - off.as_nanos() as f64);
        bare.push(off.as_nanos() as f64);
    }
    // Leave tracing as the library set it up.
    switch.set(true)?;
    Ok(Measured::from_rounds(&diffs, &bare, LAUNCHES))
}

/// What to time for each cost kind `kinds` needs: the launch, the records each launch makes
/// when traced, and the graph's kernel nodes (1 for the other launches).
fn plan(kinds: Kinds, graph_nodes: u32) -> Vec<(CostKind, Launch, u64, u32)> {
    cost_kinds(kinds)
        .into_iter()
        .filter_map(|k| match k {
            CostKind::Kernel => Some((k, Launch::Kernel, 1, 1)),
            CostKind::Memcpy => Some((k, Launch::Copy, 1, 1)),
            CostKind::Graph => Some((k, Launch::Graph, 1, graph_nodes)),
            CostKind::GraphNode => Some((k, Launch::Graph, u64::from(graph_nodes), graph_nodes)),
            CostKind::Nvtx => None,
        })
        .collect()
}

/// Runs the calibration for `kinds` and returns one line per kind (an error line for each
/// when nothing could be timed).
pub fn run(kinds: Kinds, graph_nodes: u32) -> Vec<ChildLine> {
    let planned = plan(kinds, graph_nodes.max(1));
    let library = std::env::var_os("CUDA_INJECTION64_PATH").map(std::path::PathBuf::from);
    let setup = Gpu::open().and_then(|gpu| {
        let lib = library
            .ok_or_else(|| ChildError::NoLibrary("CUDA_INJECTION64_PATH is not set".into()))?;
        Ok((gpu, Switch::find(&lib)?))
    });
    let (mut gpu, switch) = match setup {
        Ok(s) => s,
        Err(e) => {
            return planned
                .iter()
                .map(|(kind, ..)| ChildLine::failed(kind.as_str(), &e.to_string()))
                .collect();
        }
    };
    planned
        .into_iter()
        .map(|(kind, what, records, nodes)| {
            let timed = (|| {
                if matches!(what, Launch::Graph) {
                    gpu.build_graph(nodes, &switch)?;
                }
                let mut m = measure(&gpu, &switch, what, records)?;
                if kind == CostKind::GraphNode {
                    m = m.per_node(nodes);
                }
                m.graph_nodes = matches!(what, Launch::Graph).then_some(nodes);
                Ok::<_, ChildError>(m)
            })();
            match timed {
                Ok(m) => ChildLine::measured(kind.as_str(), m),
                Err(e) => ChildLine::failed(kind.as_str(), &e.to_string()),
            }
        })
        .collect()
}
