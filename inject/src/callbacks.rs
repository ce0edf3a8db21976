//! CUPTI callbacks (as opposed to activity records): the moments capture must see as they
//! happen.
//!
//! - `--capture-range cuda-profiler-api`: the driver's `cuProfilerStart` (its exit opens a
//!   window) and `cuProfilerStop` (its entry closes it); `cudaProfilerStart`/`Stop` and
//!   `torch.cuda.profiler.start()`/`stop()` go through them.
//! - CUDA graphs traced whole (`graphs`): when a graph is instantiated, its kernel nodes are
//!   read once (count and kernel names, child graphs included) and sent as a
//!   [`Frame::Graph`], so each one-record graph launch can say what it ran.
//!
//! Both need CUPTI's callback subscriber, of which CUPTI 13.0 allows one per process: a tool
//! started later in the program (`torch.profiler`) cannot subscribe while capture holds it
//! (its activity records are not affected). When capture cannot subscribe, a status row says so
//! and capture goes on without these.
//!
//! <https://docs.nvidia.com/cupti/api/group__CUPTI__CALLBACK__API.html>
#![allow(unsafe_code)]

use crate::cupti;
use crate::delivery::{hub, now_ns};
use cufall_capture::{CaptureEventKind, Frame, GraphKernel, Kinds, RangeTrigger};
use libloading::os::unix::{Library, RTLD_LAZY};
use std::collections::HashMap;
use std::ffi::{CStr, c_char, c_void};
use std::sync::OnceLock;

const DOMAIN_DRIVER_API: u32 = 1;
const DOMAIN_RESOURCE: u32 = 3;
const CBID_PROFILER_START: u32 = 308;
const CBID_PROFILER_STOP: u32 = 309;
const CBID_GRAPHEXEC_CREATED: u32 = 18;
/// Offset of `graphExec` in `CUpti_GraphData`.
const GRAPH_EXEC_OFFSET: usize = 48;
const SITE_ENTER: u32 = 0;
const SITE_EXIT: u32 = 1;
/// `CUgraphNodeType`: a kernel node, a child-graph node.
const NODE_KERNEL: u32 = 0;
const NODE_CHILD_GRAPH: u32 = 4;
/// Child graphs nest at most this deep here (CUDA allows deep nesting; real graphs are flat).
const MAX_DEPTH: u32 = 8;
/// Graphs larger than this are counted but their kernel names are not all read.
const MAX_NODES: usize = 1 << 20;

/// Subscribes for what `kinds` and the capture range need; `Ok(false)` when nothing does.
pub fn attach(kinds: Kinds, range: Option<&RangeTrigger>) -> Result<bool, cupti::CuptiError> {
    let mut wanted = Vec::new();
    if matches!(range, Some(RangeTrigger::ProfilerApi)) {
        wanted.push((DOMAIN_DRIVER_API, CBID_PROFILER_START));
        wanted.push((DOMAIN_DRIVER_API, CBID_PROFILER_STOP));
    }
    if kinds.contains(Kinds::GRAPHS) {
        wanted.push((DOMAIN_RESOURCE, CBID_GRAPHEXEC_CREATED));
    }
    if wanted.is_empty() {
        return Ok(false);
    }
    cupti::subscribe(on_callback, &wanted).map(|()| true)
}

unsafe extern "C" fn on_callback(
    _userdata: *mut c_void,
    domain: u32,
    cbid: u32,
    data: *const c_void,
) {
    let _ = std::panic::catch_unwind(|| {
        if data.is_null() || !hub().live() {
            return;
        }
        match (domain, cbid) {
            (DOMAIN_DRIVER_API, CBID_PROFILER_START | CBID_PROFILER_STOP) => {
                // SAFETY: for API domains CUPTI passes a `CUpti_CallbackData` whose first field
                // is the call site (`CUpti_ApiCallbackSite`, 32 bits).
                let site = unsafe { data.cast::<u32>().read_unaligned() };
                profiler_edge(cbid, site);
            }
            (DOMAIN_RESOURCE, CBID_GRAPHEXEC_CREATED) => {
                // SAFETY: for the resource domain CUPTI passes a `CUpti_ResourceData`: context,
                // resource handle (8 bytes), then `resourceDescriptor`, which for graph
                // callbacks points at a `CUpti_GraphData` (the graph first, the instantiated
                // graph at GRAPH_EXEC_OFFSET; checked against CUPTI 13's layout in a test).
                let (graph, exec) = unsafe {
                    let descriptor = data
                        .cast::<u8>()
                        .add(16)
                        .cast::<*const u8>()
                        .read_unaligned();
                    if descriptor.is_null() {
                        return;
                    }
                    (
                        descriptor.cast::<*mut c_void>().read_unaligned(),
                        descriptor
                            .add(GRAPH_EXEC_OFFSET)
                            .cast::<*mut c_void>()
                            .read_unaligned(),
                    )
                };
                graph_instantiated(graph, exec);
            }
            _ => {}
        }
    });
}

fn profiler_edge(cbid: u32, site: u32) {
    let h = hub();
    if !matches!(h.range, Some(RangeTrigger::ProfilerApi)) {
        return;
    }
    let t_ns = now_ns();
    match (cbid, site) {
        (CBID_PROFILER_START, SITE_EXIT) => h.send_urgent(&Frame::Window { t_ns, open: true }),
        (CBID_PROFILER_STOP, SITE_ENTER) => h.send_urgent(&Frame::Window { t_ns, open: false }),
        _ => {}
    }
}

/// The driver entry points that read a graph, from the process's own libcuda.
struct Driver {
    _lib: Library,
    get_nodes: unsafe extern "C" fn(*mut c_void, *mut *mut c_void, *mut usize) -> u32,
    node_type: unsafe extern "C" fn(*mut c_void, *mut u32) -> u32,
    kernel_params: unsafe extern "C" fn(*mut c_void, *mut KernelNodeParams) -> u32,
    child_graph: unsafe extern "C" fn(*mut c_void, *mut *mut c_void) -> u32,
    func_name: Option<unsafe extern "C" fn(*mut *const c_char, *mut c_void) -> u32>,
    kernel_name: Option<unsafe extern "C" fn(*mut *const c_char, *mut c_void) -> u32>,
}

/// `CUDA_KERNEL_NODE_PARAMS_v2` (`cuda.h`, CUDA 12 and 13).
#[repr(C)]
struct KernelNodeParams {
    func: *mut c_void,
    grid: [u32; 3],
    block: [u32; 3],
    shared_mem_bytes: u32,
    kernel_params: *mut *mut c_void,
    extra: *mut *mut c_void,
    kern: *mut c_void,
    ctx: *mut c_void,
}

fn driver() -> Option<&'static Driver> {
    static DRIVER: OnceLock<Option<Driver>> = OnceLock::new();
    DRIVER
        .get_or_init(|| {
            // SAFETY: the process has libcuda loaded (CUDA called our InitializeInjection);
            // RTLD_NOLOAD only finds that copy.
            let lib = unsafe { Library::open(Some("libcuda.so.1"), RTLD_LAZY | libc::RTLD_NOLOAD) }.ok()?;
            macro_rules! sym {
                ($($name:literal),+) => {{
                    let mut found = None;
                    // SAFETY: each symbol's type is its C signature in cuda.h, written out in
                    // `Driver`; `_v2` is the same function with the v2 parameter struct.
                    $( if found.is_none() { found = unsafe { lib.get(concat!($name, "\0").as_bytes()) }.ok().map(|s| *s); } )+
                    found
                }};
            }
            Some(Driver {
                get_nodes: sym!("cuGraphGetNodes")?,
                node_type: sym!("cuGraphNodeGetType")?,
                kernel_params: sym!("cuGraphKernelNodeGetParams_v2", "cuGraphKernelNodeGetParams")?,
                child_graph: sym!("cuGraphChildGraphNodeGetGraph")?,
                func_name: sym!("cuFuncGetName"),
                kernel_name: sym!("cuKernelGetName"),
                _lib: lib,
            })
        })
        .as_ref()
}

/// Kernel nodes of a graph, by raw kernel name, and every node counted.
#[derive(Default)]
struct Contents {
    nodes: u64,
    kernels: HashMap<String, u32>,
}

fn read_graph(d: &Driver, graph: *mut c_void, depth: u32, out: &mut Contents) {
    let mut n = 0usize;
    // SAFETY: a null array asks for the count only.
    if unsafe { (d.get_nodes)(graph, std::ptr::null_mut(), &mut n) } != 0 || n == 0 {
        return;
    }
    let n = n.min(MAX_NODES);
    let mut nodes = vec![std::ptr::null_mut::<c_void>(); n];
    let mut got = n;
    // SAFETY: `nodes` holds `got` slots; the driver writes at most that many.
    if unsafe { (d.get_nodes)(graph, nodes.as_mut_ptr(), &mut got) } != 0 {
        return;
    }
    for node in nodes.into_iter().take(got.min(n)) {
        out.nodes += 1;
        let mut ty = u32::MAX;
        // SAFETY: `node` is a node of `graph`; the driver writes its type.
        if unsafe { (d.node_type)(node, &mut ty) } != 0 {
            continue;
        }
        if ty == NODE_KERNEL {
            let name = kernel_node_name(d, node).unwrap_or_else(|| "<unnamed kernel>".into());
            *out.kernels.entry(name).or_default() += 1;
        } else if ty == NODE_CHILD_GRAPH && depth < MAX_DEPTH {
            let mut child = std::ptr::null_mut();
            // SAFETY: `node` is a child-graph node; the driver writes its graph.
            if unsafe { (d.child_graph)(node, &mut child) } == 0 && !child.is_null() {
                read_graph(d, child, depth + 1, out);
            }
        }
    }
}

fn kernel_node_name(d: &Driver, node: *mut c_void) -> Option<String> {
    // SAFETY: a zeroed parameter struct is valid to write into.
    let mut p: KernelNodeParams = unsafe { std::mem::zeroed() };
    // SAFETY: `node` is a kernel node; the driver fills `p`.
    if unsafe { (d.kernel_params)(node, &mut p) } != 0 {
        return None;
    }
    let mut name: *const c_char = std::ptr::null();
    let ok = if !p.func.is_null() {
        // SAFETY: `p.func` is the node's CUfunction; the driver writes a pointer to its name.
        d.func_name
            .is_some_and(|f| unsafe { f(&mut name, p.func) } == 0)
    } else if !p.kern.is_null() {
        // SAFETY: `p.kern` is the node's CUkernel; the driver writes a pointer to its name.
        d.kernel_name
            .is_some_and(|f| unsafe { f(&mut name, p.kern) } == 0)
    } else {
        false
    };
    if !ok || name.is_null() {
        return None;
    }
    // SAFETY: the driver's function names are NUL-terminated and live as long as the module.
    Some(
        unsafe { CStr::from_ptr(name) }
            .to_string_lossy()
            .into_owned(),
    )
}

fn graph_instantiated(graph: *mut c_void, exec: *mut c_void) {
    if graph.is_null() {
        return;
    }
    let h = hub();
    // SAFETY: CUPTI hands the callback the graph and the instantiated graph, alive during the
    // call.
    let Some(id) = (unsafe { cupti::graph_id(graph, false) }) else {
        return;
    };
    let exec_id = if exec.is_null() {
        0
    } else {
        // SAFETY: as above.
        unsafe { cupti::graph_id(exec, true) }.unwrap_or(0)
    };
    let Some(d) = driver() else {
        h.status(
            CaptureEventKind::GraphContentsUnavailable,
            0,
            "libcuda's graph functions could not be found: graph launches are recorded without their kernels' names",
        );
        return;
    };
    let mut c = Contents::default();
    read_graph(d, graph, 0, &mut c);
    let mut kernels: Vec<GraphKernel> = c
        .kernels
        .into_iter()
        .map(|(name, count)| GraphKernel {
            name: h.define(&name),
            count,
        })
        .collect();
    kernels.sort_by_key(|k| std::cmp::Reverse(k.count));
    kernels.truncate(cufall_capture::MAX_GRAPH_KERNELS);
    h.send(&Frame::Graph {
        graph_id: id,
        exec_id,
        nodes: u32::try_from(c.nodes).unwrap_or(u32::MAX),
        kernels,
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn graph_data_and_kernel_params_are_where_cuda_13_puts_them() {
        use cudarc::cupti::sys::{CUpti_GraphData, CUpti_ResourceData};
        assert_eq!(
            std::mem::offset_of!(CUpti_ResourceData, resourceDescriptor),
            16
        );
        assert_eq!(std::mem::offset_of!(CUpti_GraphData, graph), 0);
        assert_eq!(
            std::mem::offset_of!(CUpti_GraphData, graphExec),
            GRAPH_EXEC_OFFSET
        );
        assert_eq!(
            std::mem::size_of::<KernelNodeParams>(),
            std::mem::size_of::<cudarc::driver::sys::CUDA_KERNEL_NODE_PARAMS_v2_st>()
        );
        assert_eq!(
            std::mem::offset_of!(KernelNodeParams, kern),
            std::mem::offset_of!(cudarc::driver::sys::CUDA_KERNEL_NODE_PARAMS_v2_st, kern)
        );
    }
}
