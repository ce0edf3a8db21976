//! Short kernel names, as Nsight Systems' *base* names: the function's own name without its
//! namespaces, template arguments and parameter list.
//!
//! A demangled PyTorch kernel reads
//! `at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<…>(…)::{lambda(int)#1}>`
//! and fills several lines of a panel; in a table of a phase's kernels `elementwise_kernel` is
//! what tells the rows apart at a glance, and the full name stays in `--json` and on hover.
//! Namespaces are dropped too: they are mostly the library's (`at::native::`, `cutlass::`,
//! `(anonymous namespace)::`), which the name itself usually says again. Where the function's own
//! name says nothing alone (`operator()`, a lambda), the enclosing name is kept with it.
//! Names that are not C++ (`memcpy HtoD`, `memset`, `graph 3`, Triton's
//! `triton_poi_fused_add_0`, cuBLAS's `sm90_xmma_…`) come back unchanged.

use std::borrow::Cow;

/// The short form of a kernel name (see the module documentation); the name itself when it has
/// nothing to shorten.
pub fn short_kernel_name(name: &str) -> Cow<'_, str> {
    let name = name.trim();
    let body = name.strip_prefix("void ").unwrap_or(name).trim_start();
    // Nothing to shorten: a plain identifier, or a copy's `memcpy HtoD`.
    if !body.contains(['<', '(', ':', '{']) {
        return Cow::Borrowed(if body.len() == name.len() { name } else { body });
    }
    let top = top_level(body);
    let components: Vec<&str> = top
        .split("::")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    let Some(last) = components.last() else {
        return Cow::Borrowed(name);
    };
    // `operator()` or a lambda alone says nothing: keep what encloses it.
    let vague = last.starts_with("operator") || last.starts_with('{');
    let short = match components.len() {
        n if vague && n >= 2 => format!("{}::{last}", components[n - 2]),
        _ => (*last).to_string(),
    };
    Cow::Owned(short)
}

/// `s` without its template arguments and parameter lists (the text inside `<…>` and `(…)` at
/// any depth), keeping `operator` symbols, lambdas (`{lambda(int)#1}`) whole, and dropping
/// `(anonymous namespace)` and a trailing ` const`.
fn top_level(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let bytes = s.as_bytes();
    let mut depth = 0usize;
    let mut i = 0usize;
    while i < bytes.len() {
        let rest = &s[i..];
        if depth == 0 && rest.starts_with("operator") && word_starts_at(bytes, i) {
            let sym_len = operator_symbol_len(&rest["operator".len()..]);
            let end = i + "operator".len() + sym_len;
            out.push_str(&s[i..end]);
            i = end;
            continue;
        }
        if depth == 0 && rest.starts_with("(anonymous namespace)") {
            i += "(anonymous namespace)".len();
            continue;
        }
        match bytes[i] {
            b'{' if depth == 0 => {
                // A lambda or unnamed type: kept whole, with its own parentheses.
                let close = matching(bytes, i, b'{', b'}');
                out.push_str(&s[i..close]);
                i = close;
                continue;
            }
            b'<' | b'(' | b'[' => depth += 1,
            b'>' | b')' | b']' => depth = depth.saturating_sub(1),
            _ if depth == 0 => {
                out.push_str(&s[i..i + char_len(rest)]);
            }
            _ => {}
        }
        // Whole characters, inside brackets too: names may hold non-ASCII text anywhere.
        i += char_len(rest);
    }
    let out = out.trim_end();
    out.strip_suffix(" const").unwrap_or(out).trim().to_string()
}

/// Bytes of the character `rest` starts with (1 past its end, so that a loop always moves).
fn char_len(rest: &str) -> usize {
    rest.chars().next().map_or(1, char::len_utf8)
}

/// Whether an identifier starts at byte `i` (not in the middle of `my_operator`).
fn word_starts_at(bytes: &[u8], i: usize) -> bool {
    i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_')
}

/// Length of the operator symbol after the word `operator`: `()`, `[]`, `<<=`, `->`, ...
fn operator_symbol_len(after: &str) -> usize {
    if after.starts_with("()") || after.starts_with("[]") {
        return 2;
    }
    after
        .bytes()
        .take_while(|b| b"<>=!+-*/%^&|~,".contains(b))
        .count()
        // `operator<<float>` is `operator<` with arguments: a symbol is at most 3 characters.
        .min(3)
}

/// The index just past the bracket closing the one opened at `open_at` (the end of `bytes` if
/// it is never closed).
fn matching(bytes: &[u8], open_at: usize, open: u8, close: u8) -> usize {
    let mut depth = 0usize;
    for (j, b) in bytes.iter().enumerate().skip(open_at) {
        if *b == open {
            depth += 1;
        } else if *b == close {
            depth -= 1;
            if depth == 0 {
                return j + 1;
            }
        }
    }
    bytes.len()
}

#[cfg(test)]
mod tests {
    use super::short_kernel_name as short;

    /// A PyTorch random-fill kernel of `examples/h200-torch-phases.cufall`, whole.
    const DISTRIBUTION: &str = "at::native::(anonymous namespace)::distribution_elementwise_grid_stride_kernel<float, 4, at::native::templates::cuda::normal_and_transform<c10::BFloat16, float, at::CUDAGeneratorImpl*, at::native::templates::cuda::normal_kernel<at::CUDAGeneratorImpl*>(at::TensorBase const&, double, double, at::CUDAGeneratorImpl*)::{lambda()#1}::operator()() const::{lambda()#4}::operator()() const::{lambda(float)#1}>(at::TensorIteratorBase&, at::CUDAGeneratorImpl*, at::native::templates::cuda::normal_kernel<at::CUDAGeneratorImpl*>(at::TensorBase const&, double, double, at::CUDAGeneratorImpl*)::{lambda()#1}::operator()() const::{lambda()#4}::operator()() const::{lambda(float)#1})::{lambda(curandStatePhilox4_32_10*)#2}, at::native::(anonymous namespace)::distribution_nullary_kernel<c10::BFloat16, float, float4, at::CUDAGeneratorImpl*, at::native::templates::cuda::normal_and_transform<c10::BFloat16, float, at::CUDAGeneratorImpl*, at::native::templates::cuda::normal_kernel<at::CUDAGeneratorImpl*>(at::TensorBase const&, double, double, at::CUDAGeneratorImpl*)::{lambda()#1}::operator()() const::{lambda()#4}::operator()() const::{lambda(float)#1}>(at::TensorIteratorBase&, at::CUDAGeneratorImpl*, at::native::templates::cuda::normal_kernel<at::CUDAGeneratorImpl*>(at::TensorBase const&, double, double, at::CUDAGeneratorImpl*)::{lambda()#1}::operator()() const::{lambda()#4}::operator()() const::{lambda(float)#1})::{lambda(curandStatePhilox4_32_10*)#2}, at::native::templates::cuda::normal_kernel<at::CUDAGeneratorImpl*>(at::TensorBase const&, double, double, at::CUDAGeneratorImpl*)::{lambda()#1}::operator()() const::{lambda()#4}::operator()() const::{lambda(float)#1}>(at::TensorIteratorBase&, at::CUDAGeneratorImpl*, at::native::templates::cuda::normal_and_transform<c10::BFloat16, float, at::CUDAGeneratorImpl*, at::native::templates::cuda::normal_kernel<at::CUDAGeneratorImpl*>(at::TensorBase const&, double, double, at::CUDAGeneratorImpl*)::{lambda()#1}::operator()() const::{lambda()#4}::operator()() const::{lambda(float)#1}>(at::TensorIteratorBase&, at::CUDAGeneratorImpl*, at::native::templates::cuda::normal_kernel<at::CUDAGeneratorImpl*>(at::TensorBase const&, double, double, at::CUDAGeneratorImpl*)::{lambda()#1}::operator()() const::{lambda()#4}::operator()() const::{lambda(float)#1})::{lambda(curandStatePhilox4_32_10*)#2} const&, at::native::templates::cuda::normal_kernel<at::CUDAGeneratorImpl*>(at::TensorBase const&, double, double, at::CUDAGeneratorImpl*)::{lambda()#1}::operator()() const::{lambda()#4}::operator()() const::{lambda(float)#1})::{lambda(int, float)#1}>";

    /// Names as recorded in `examples/*.cufall` (PyTorch, cuBLAS, the bundled engine).
    #[test]
    fn names_from_the_example_recordings() {
        for (full, want) in [
            (DISTRIBUTION, "distribution_elementwise_grid_stride_kernel"),
            (
                "at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> >, std::array<char*, (unsigned long)2> >",
                "vectorized_elementwise_kernel",
            ),
            (
                "cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float, __nv_bfloat16, false, float, __nv_bfloat16, __nv_bfloat16, true, false, false, false>",
                "splitKreduce_kernel",
            ),
            (
                "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT",
                "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT",
            ),
            ("attn_split_64_5", "attn_split_64_5"),
            ("memcpy HtoD", "memcpy HtoD"),
            ("memcpy DtoH", "memcpy DtoH"),
            ("memset", "memset"),
            ("graph 17", "graph 17"),
        ] {
            assert_eq!(short(full), want, "{full}");
        }
    }

    /// Forms the examples do not hold: older demanglers' `void ` and parameter lists, Triton,
    /// cuBLAS's xmma and CUTLASS kernels, lambdas in template arguments.
    #[test]
    fn other_common_forms() {
        for (full, want) in [
            (
                "at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::CUDAFunctor_add<float> >(at::TensorIteratorBase&, at::native::CUDAFunctor_add<float> const&)::{lambda(int)#1}>",
                "elementwise_kernel",
            ),
            (
                "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)",
                "vectorized_elementwise_kernel",
            ),
            (
                "void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, false, false>(float*, float const*, int, int, int, bool const*, int, bool)",
                "softmax_warp_forward",
            ),
            (
                "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
                "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
            ),
            (
                "cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_16x16_128x2_tn_align8>",
                "Kernel2",
            ),
            ("triton_poi_fused_add_mul_0", "triton_poi_fused_add_mul_0"),
            ("triton_red_fused__softmax_1", "triton_red_fused__softmax_1"),
            (
                "at::native::elementwise_kernel<128, 2>",
                "elementwise_kernel",
            ),
            ("_Z12empty_kernelv", "_Z12empty_kernelv"),
        ] {
            assert_eq!(short(full), want, "{full}");
        }
    }

    #[test]
    fn odd_names_stay_readable() {
        assert_eq!(short("  void my_kernel  "), "my_kernel");
        assert_eq!(short(""), "");
        assert_eq!(short("<unnamed>"), "<unnamed>");
        assert_eq!(short("(anonymous namespace)::k"), "k");
    }

    #[test]
    fn operators_and_lambdas_keep_what_encloses_them() {
        assert_eq!(
            short("void cub::detail::for_each::Functor<int>::operator()(int) const"),
            "Functor::operator()"
        );
        assert_eq!(short("ns::Cmp::operator<(int)"), "Cmp::operator<");
        assert_eq!(short("my_operator_kernel<float>"), "my_operator_kernel");
        assert_eq!(
            short("at::native::launch(int)::{lambda(int)#1}"),
            "launch::{lambda(int)#1}"
        );
        // Non-ASCII text inside brackets is stepped over whole characters at a time.
        assert_eq!(short("k‹é>"), "k‹é>");
        assert_eq!(short("k<é>"), "k");
        assert_eq!(short("ns::k(é, [ü])::{λ(é)#1}"), "k::{λ(é)#1}");
        assert_eq!(short("解码<ü>::核(é)"), "核");
        // Unbalanced brackets still end.
        assert_eq!(short("a<b"), "a");
        assert_eq!(short("f{lambda("), "f{lambda(");
    }
}
