//! Which NVTX ranges are *phases*: by default the program's own ranges (the default domain and
//! every domain not known as a library's), chosen otherwise with a [`PhaseSelect`], the value of
//! `--phases`.
//!
//! Libraries annotate their own work with NVTX ranges in domains of their own: CUB's algorithms
//! (`CCCL`), XLA's compiler passes (`TSL`), NCCL's collectives (`NCCL`). Taken as phases they
//! bury the program's phases under thousands of library calls and take over the places of its
//! gaps, so [`LIBRARY_DOMAINS`], the one list of them, keeps them out unless asked for. They
//! stay in the trace and on lanes of their own in the timelines.
//!
//! The syntax of `--phases`: comma-separated terms.
//!
//! | term | ranges |
//! |---|---|
//! | `program` | of the program's own domains (the default without domain terms) |
//! | `all` | of every domain |
//! | `domain:NAME` | of domain NAME; `domain:default` is the unnamed default domain |
//! | `name:PATTERN` | whose own name matches PATTERN (`*` matches any run of characters) |
//! | `depth:N` | nested at most N deep among the chosen ranges (0: outermost only) |
//!
//! Domain terms add up (`program,domain:CCCL`); name terms add up among themselves and narrow the
//! domains' ranges; one depth term at most.

use cufall_trace::model::{NvtxRange, RangeKind};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

/// An NVTX domain that a library, not the program, writes its ranges in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LibraryDomain {
    /// The domain's name as the library registers it (`nvtxDomainCreateA`).
    pub domain: &'static str,
    /// Which library writes it, for people.
    pub library: &'static str,
}

/// The NVTX domains known as libraries', with the library that writes each; found in the
/// libraries' sources and documentation. cuDNN, cuBLAS, PyTorch and Triton register none:
/// PyTorch's `torch.cuda.nvtx` and `emit_nvtx` write the default domain, the program's own.
pub const LIBRARY_DOMAINS: &[LibraryDomain] = &[
    // cub/detail/nvtx.cuh, `NVTXCCCLDomain`: every device-wide CUB algorithm, Thrust's through it.
    LibraryDomain {
        domain: "CCCL",
        library: "CUB and Thrust",
    },
    // tsl/profiler/lib/nvtx_utils: XLA's compiler passes, thunks and profiler annotations
    // (TensorFlow's and JAX's XLA).
    LibraryDomain {
        domain: "TSL",
        library: "XLA, JAX and TensorFlow's TSL profiler",
    },
    // XLA's newer profiler library.
    LibraryDomain {
        domain: "xprof",
        library: "XLA (xprof)",
    },
    // src/include/nvtx.h, `nccl_domain`: NCCL's collectives and communicator calls.
    LibraryDomain {
        domain: "NCCL",
        library: "NCCL",
    },
    // NCCL's proxy thread, when its NVTX tracing is turned on.
    LibraryDomain {
        domain: "com.nvidia.nccl.proxy",
        library: "NCCL (proxy thread)",
    },
    // RAPIDS: cudf/detail/nvtx/ranges.hpp `libcudf_domain`, raft/core/nvtx.hpp, cuvs.
    LibraryDomain {
        domain: "libcudf",
        library: "RAPIDS cuDF",
    },
    LibraryDomain {
        domain: "raft",
        library: "RAPIDS RAFT",
    },
    LibraryDomain {
        domain: "cuvs",
        library: "RAPIDS cuVS",
    },
];

/// The library that writes ranges of `domain`, if it is one of [`LIBRARY_DOMAINS`].
pub fn library_of(domain: &str) -> Option<&'static LibraryDomain> {
    LIBRARY_DOMAINS.iter().find(|l| l.domain == domain)
}

/// How the unnamed default domain is spelled in `domain:` terms.
pub const DEFAULT_DOMAIN_SPELLING: &str = "default";

/// A domain for people: its name, or `(default)` for the unnamed one.
pub fn domain_label(domain: &str) -> &str {
    if domain.is_empty() {
        "(default)"
    } else {
        domain
    }
}

/// Ranges of one domain in a trace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DomainCount {
    /// The domain's name; empty for the default domain.
    pub domain: String,
    /// NVTX rows of the domain (ranges and marks).
    pub ranges: u64,
    /// The library that writes it, where it is a library's domain.
    pub library: Option<&'static str>,
}

/// Ranges per domain: the default domain first, then the program's other domains, then the
/// libraries', each group by count, largest first.
pub fn domain_counts(ranges: &[NvtxRange]) -> Vec<DomainCount> {
    let mut by: BTreeMap<&str, u64> = BTreeMap::new();
    for r in ranges {
        *by.entry(r.domain.as_str()).or_default() += 1;
    }
    let mut out: Vec<DomainCount> = by
        .into_iter()
        .map(|(d, n)| DomainCount {
            domain: d.to_string(),
            ranges: n,
            library: library_of(d).map(|l| l.library),
        })
        .collect();
    out.sort_by(|a, b| {
        (
            !a.domain.is_empty(),
            a.library.is_some(),
            std::cmp::Reverse(a.ranges),
        )
            .cmp(&(
                !b.domain.is_empty(),
                b.library.is_some(),
                std::cmp::Reverse(b.ranges),
            ))
            .then_with(|| a.domain.cmp(&b.domain))
    });
    out
}

/// A bad `--phases` value, one per mistake; the message says what to write instead.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PhaseSelectError {
    #[error("an empty term: write terms separated by single commas, e.g. `program,domain:CCCL`")]
    EmptyTerm,
    #[error(
        "`{0}` is not a phase selection: use `program`, `all`, `domain:NAME`, `name:PATTERN` or \
         `depth:N`, separated by commas"
    )]
    UnknownTerm(String),
    #[error(
        "`domain:` needs a domain name (`domain:{DEFAULT_DOMAIN_SPELLING}` is the unnamed default domain)"
    )]
    NoDomainName,
    #[error("`name:` needs a pattern, e.g. `name:step*`")]
    NoNamePattern,
    #[error("`depth:{0}` is not a depth: write a whole number, 0 for outermost ranges only")]
    BadDepth(String),
    #[error("more than one `depth:` term: give one")]
    DepthTwice,
}

/// Which NVTX ranges become phases (see the module docs for the syntax).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PhaseSelect {
    /// Every domain not in [`LIBRARY_DOMAINS`].
    program: bool,
    /// Every domain.
    all: bool,
    /// Domains named with `domain:` (empty: the default domain), in the order given.
    domains: Vec<String>,
    /// Name patterns; none: every name.
    names: Vec<String>,
    max_depth: Option<usize>,
}

impl Default for PhaseSelect {
    /// The program's own ranges.
    fn default() -> Self {
        PhaseSelect {
            program: true,
            all: false,
            domains: Vec::new(),
            names: Vec::new(),
            max_depth: None,
        }
    }
}

impl FromStr for PhaseSelect {
    type Err = PhaseSelectError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut sel = PhaseSelect {
            program: false,
            ..PhaseSelect::default()
        };
        let mut any_domain = false;
        for term in s.split(',').map(str::trim) {
            if term.is_empty() {
                return Err(PhaseSelectError::EmptyTerm);
            }
            if let Some(d) = term.strip_prefix("domain:") {
                let d = match d {
                    "" => return Err(PhaseSelectError::NoDomainName),
                    DEFAULT_DOMAIN_SPELLING => "",
                    d => d,
                };
                if !sel.domains.iter().any(|x| x == d) {
                    sel.domains.push(d.to_string());
                }
                any_domain = true;
            } else if let Some(p) = term.strip_prefix("name:") {
                if p.is_empty() {
                    return Err(PhaseSelectError::NoNamePattern);
                }
                sel.names.push(p.to_string());
            } else if let Some(n) = term.strip_prefix("depth:") {
                if sel.max_depth.is_some() {
                    return Err(PhaseSelectError::DepthTwice);
                }
                let depth = n
                    .parse::<usize>()
                    .map_err(|_| PhaseSelectError::BadDepth(n.to_string()))?;
                sel.max_depth = Some(depth);
            } else if term == "program" {
                sel.program = true;
                any_domain = true;
            } else if term == "all" {
                sel.all = true;
                any_domain = true;
            } else {
                return Err(PhaseSelectError::UnknownTerm(term.to_string()));
            }
        }
        if !any_domain {
            sel.program = true;
        }
        Ok(sel)
    }
}

/// The canonical spelling, which parses back to the same selection.
impl fmt::Display for PhaseSelect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut terms: Vec<String> = Vec::new();
        if self.all {
            terms.push("all".into());
        } else if self.program {
            terms.push("program".into());
        }
        for d in &self.domains {
            let d = if d.is_empty() {
                DEFAULT_DOMAIN_SPELLING
            } else {
                d
            };
            terms.push(format!("domain:{d}"));
        }
        terms.extend(self.names.iter().map(|p| format!("name:{p}")));
        if let Some(d) = self.max_depth {
            terms.push(format!("depth:{d}"));
        }
        f.write_str(&terms.join(","))
    }
}

/// `--phases` names domains the trace does not record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownDomains {
    /// The domains asked for and not recorded (empty: the default domain).
    pub asked: Vec<String>,
    /// What the trace records.
    pub recorded: Vec<DomainCount>,
}

impl fmt::Display for UnknownDomains {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let asked: Vec<&str> = self.asked.iter().map(|d| domain_label(d)).collect();
        let word = if asked.len() == 1 {
            "domain"
        } else {
            "domains"
        };
        write!(
            f,
            "no NVTX range of {word} {} in this trace; ",
            asked.join(", ")
        )?;
        if self.recorded.is_empty() {
            return f.write_str("it records no NVTX ranges at all");
        }
        let listed: Vec<String> = self
            .recorded
            .iter()
            .map(|d| {
                let spelled = if d.domain.is_empty() {
                    DEFAULT_DOMAIN_SPELLING
                } else {
                    d.domain.as_str()
                };
                let lib = d.library.map_or(String::new(), |l| format!(", {l}"));
                format!("domain:{spelled} ({}{lib})", ranges_text(d.ranges))
            })
            .collect();
        write!(f, "it records {}", listed.join(", "))
    }
}

impl PhaseSelect {
    /// Every range of every domain.
    pub fn all() -> PhaseSelect {
        PhaseSelect {
            program: false,
            all: true,
            ..PhaseSelect::default()
        }
    }

    /// Whether ranges of `domain` can be phases (names and depth aside).
    pub fn keeps_domain(&self, domain: &str) -> bool {
        self.all
            || (self.program && library_of(domain).is_none())
            || self.domains.iter().any(|d| d == domain)
    }

    /// Whether a range of this domain and name can be a phase (depth aside).
    pub fn keeps(&self, domain: &str, name: &str) -> bool {
        self.keeps_domain(domain)
            && (self.names.is_empty() || self.names.iter().any(|p| glob_match(p, name)))
    }

    /// This selection with the ranges of `domains` added.
    pub fn with_domains<'a>(&self, domains: impl IntoIterator<Item = &'a str>) -> PhaseSelect {
        let mut out = self.clone();
        for d in domains {
            if !out.domains.iter().any(|x| x == d) {
                out.domains.push(d.to_string());
            }
        }
        out
    }

    /// Checks the domains named with `domain:` against those the trace records.
    pub fn check_domains(&self, recorded: &[DomainCount]) -> Result<(), UnknownDomains> {
        let asked: Vec<String> = self
            .domains
            .iter()
            .filter(|d| !recorded.iter().any(|r| &r.domain == *d))
            .cloned()
            .collect();
        if asked.is_empty() {
            Ok(())
        } else {
            Err(UnknownDomains {
                asked,
                recorded: recorded.to_vec(),
            })
        }
    }

    /// The ranges this selection keeps, each with its `depth` counted among the kept push/pop
    /// ranges of its thread (a range whose enclosing ranges were left out moves up), and those
    /// nested deeper than the maximum depth left out.
    pub fn apply(&self, ranges: &[NvtxRange]) -> Vec<NvtxRange> {
        let mut kept: Vec<NvtxRange> = ranges
            .iter()
            .filter(|r| self.keeps(&r.domain, &r.name))
            .cloned()
            .collect();
        let mut threads: BTreeMap<(u32, u32), Vec<usize>> = BTreeMap::new();
        for (i, r) in kept.iter_mut().enumerate() {
            match r.kind {
                RangeKind::PushPop => threads.entry((r.pid, r.tid)).or_default().push(i),
                RangeKind::StartEnd | RangeKind::Mark => r.depth = 0,
            }
        }
        let mut too_deep = vec![false; kept.len()];
        for list in threads.values_mut() {
            list.sort_by(|a, b| {
                let (a, b) = (&kept[*a], &kept[*b]);
                a.start_ns.cmp(&b.start_ns).then(b.end_ns.cmp(&a.end_ns))
            });
            // Ends of the open ranges enclosing the current one (as `Phases::build` nests).
            let mut stack: Vec<i64> = Vec::new();
            for i in list.iter() {
                let (start, end) = (kept[*i].start_ns, kept[*i].end_ns);
                while stack.last().is_some_and(|e| *e < end || *e <= start) {
                    stack.pop();
                }
                let depth = stack.len();
                kept[*i].depth = u32::try_from(depth).unwrap_or(u32::MAX);
                too_deep[*i] = self.max_depth.is_some_and(|m| depth > m);
                if !too_deep[*i] {
                    stack.push(end);
                }
            }
        }
        let mut deep = too_deep.into_iter();
        kept.retain(|_| !deep.next().unwrap_or(false));
        kept
    }

    /// Whether this is the default selection, the program's own ranges.
    pub fn is_default(&self) -> bool {
        *self == PhaseSelect::default()
    }
}

/// `1 range`, `66 ranges`.
pub fn ranges_text(n: u64) -> String {
    if n == 1 {
        "1 range".into()
    } else {
        format!("{n} ranges")
    }
}

/// Whether `name` matches `pattern`, where `*` matches any run of characters (none included)
/// and every other character itself.
pub fn glob_match(pattern: &str, name: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    // Greedy with backtracking to the last star: linear in practice.
    let (mut pi, mut ni) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ni));
            pi += 1;
        } else if pi < p.len() && p[pi] == n[ni] {
            pi += 1;
            ni += 1;
        } else if let Some((sp, sn)) = star {
            pi = sp + 1;
            ni = sn + 1;
            star = Some((sp, sn + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(start: i64, end: i64, name: &str, domain: &str) -> NvtxRange {
        NvtxRange {
            start_ns: start,
            end_ns: end,
            name: name.into(),
            domain: domain.into(),
            kind: RangeKind::PushPop,
            pid: 1,
            tid: 1,
            ..Default::default()
        }
    }

    fn sel(s: &str) -> PhaseSelect {
        s.parse().expect("a valid selection")
    }

    #[test]
    fn parses_terms_and_spells_them_back() {
        assert_eq!(sel("program"), PhaseSelect::default());
        assert!(PhaseSelect::default().is_default());
        assert_eq!(sel("all"), PhaseSelect::all());
        for s in [
            "program,domain:CCCL",
            "domain:default",
            "all,name:step*,depth:1",
            "program,name:a,name:b*c",
            "domain:TSL,domain:NCCL",
        ] {
            assert_eq!(sel(s).to_string(), s);
        }
        // Without a domain term: the program's domains, narrowed.
        assert_eq!(sel("depth:0").to_string(), "program,depth:0");
        assert_eq!(
            sel(" program , domain:CCCL ").to_string(),
            "program,domain:CCCL"
        );
        assert_eq!(sel("domain:CCCL,domain:CCCL").to_string(), "domain:CCCL");
    }

    #[test]
    fn one_typed_error_per_bad_value() {
        let err = |s: &str| s.parse::<PhaseSelect>().expect_err(s);
        assert_eq!(err(""), PhaseSelectError::EmptyTerm);
        assert_eq!(err("program,"), PhaseSelectError::EmptyTerm);
        assert_eq!(err("cccl"), PhaseSelectError::UnknownTerm("cccl".into()));
        assert_eq!(err("domain:"), PhaseSelectError::NoDomainName);
        assert_eq!(err("name:"), PhaseSelectError::NoNamePattern);
        assert_eq!(err("depth:x"), PhaseSelectError::BadDepth("x".into()));
        assert_eq!(err("depth:-1"), PhaseSelectError::BadDepth("-1".into()));
        assert_eq!(err("depth:1,depth:2"), PhaseSelectError::DepthTwice);
        assert!(err("cccl").to_string().contains("domain:NAME"));
    }

    #[test]
    fn library_domains_are_left_out_by_default() {
        let d = PhaseSelect::default();
        assert!(d.keeps_domain(""));
        assert!(d.keeps_domain("specdec"));
        assert!(!d.keeps_domain("CCCL"));
        assert!(!d.keeps_domain("TSL"));
        assert!(!d.keeps_domain("NCCL"));
        assert!(sel("program,domain:CCCL").keeps_domain("CCCL"));
        assert!(!sel("program,domain:CCCL").keeps_domain("TSL"));
        assert!(!sel("domain:CCCL").keeps_domain(""));
        assert!(sel("domain:default").keeps_domain(""));
        assert!(!sel("domain:default").keeps_domain("specdec"));
        assert!(sel("all").keeps_domain("TSL"));
        assert_eq!(
            library_of("CCCL").map(|l| l.library),
            Some("CUB and Thrust")
        );
        assert!(library_of("").is_none());
    }

    #[test]
    fn glob_patterns() {
        assert!(glob_match("step", "step"));
        assert!(!glob_match("step", "steps"));
        assert!(glob_match("step*", "step 3"));
        assert!(glob_match("*verify", "draft/verify"));
        assert!(glob_match("a*b*c", "aXbYbZc"));
        assert!(!glob_match("a*b*c", "aXbYbZ"));
        assert!(glob_match("*", ""));
        assert!(glob_match("cub::*Scan*", "cub::DeviceScan::InclusiveScan"));
    }

    #[test]
    fn apply_renests_and_cuts_at_depth() {
        // step { cub::Scan { inner } } : without CCCL, `inner` sits right under `step`.
        let ranges = vec![
            r(0, 100, "step", ""),
            r(10, 50, "cub::Scan", "CCCL"),
            r(20, 30, "inner", ""),
            r(60, 90, "verify", ""),
            r(70, 80, "deep", ""),
        ];
        let kept = PhaseSelect::default().apply(&ranges);
        let got: Vec<(&str, u32)> = kept.iter().map(|r| (r.name.as_str(), r.depth)).collect();
        assert_eq!(got, [("step", 0), ("inner", 1), ("verify", 1), ("deep", 2)]);
        let kept = sel("depth:1").apply(&ranges);
        let names: Vec<&str> = kept.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["step", "inner", "verify"]);
        let kept = sel("domain:CCCL").apply(&ranges);
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0].depth, 0);
        let kept = sel("all,name:*e*").apply(&ranges);
        let names: Vec<&str> = kept.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["step", "inner", "verify", "deep"]);
    }

    #[test]
    fn unknown_domains_list_what_the_trace_records() {
        let ranges = vec![
            r(0, 1, "a", ""),
            r(0, 1, "b", ""),
            r(0, 1, "c", "CCCL"),
            r(0, 1, "d", "mine"),
        ];
        let counts = domain_counts(&ranges);
        let order: Vec<&str> = counts.iter().map(|c| c.domain.as_str()).collect();
        assert_eq!(order, ["", "mine", "CCCL"]);
        assert!(
            sel("domain:CCCL,domain:default")
                .check_domains(&counts)
                .is_ok()
        );
        let e = sel("domain:NCCL,domain:TSL")
            .check_domains(&counts)
            .expect_err("not recorded");
        assert_eq!(e.asked, ["NCCL", "TSL"]);
        assert_eq!(
            e.to_string(),
            "no NVTX range of domains NCCL, TSL in this trace; it records domain:default \
             (2 ranges), domain:mine (1 range), domain:CCCL (1 range, CUB and Thrust)"
        );
    }
}
