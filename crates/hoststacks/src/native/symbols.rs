//! Addresses of a process → frames: the process's executable mappings (`/proc/PID/maps`), and
//! the function symbols (`.symtab` and `.dynsym`) of each mapped ELF file.
//!
//! ```text
//!  address ─▶ mapping [start, end) of FILE at file offset OFF   (/proc/PID/maps, x only)
//!          ─▶ file offset = address − start + OFF
//!          ─▶ ELF address = file offset − p_offset + p_vaddr    (the PT_LOAD holding it)
//!          ─▶ the function symbol whose [value, value + size) holds it, demangled
//! ```
//!
//! Symbol tables are loaded once per file (path and inode) and shared by every process of the
//! recording; their memory is bounded ([`MAX_SYMBOL_BYTES`], least recently used files are
//! dropped first). Only the symbol and section tables are read from the file, not the whole
//! file (a CUDA library is hundreds of megabytes).

use crate::source::Frame;
use cufall_model::FrameKind;
use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol, SymbolKind};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Bytes of symbol tables held for all processes before the least recently used are dropped.
pub const MAX_SYMBOL_BYTES: usize = 256 << 20;
/// Frames remembered per process by address; the table starts again past this.
const MAX_FRAMES_CACHED: usize = 1 << 16;
/// A process's maps are read again on an address they do not hold (a library loaded since),
/// at most this often.
const MAPS_REREAD: Duration = Duration::from_millis(100);

/// One line of `/proc/PID/maps`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    pub offset: u64,
    pub exec: bool,
    pub inode: u64,
    /// The file, `[vdso]`-style name, or empty (anonymous).
    pub path: String,
}

/// Reads `/proc/PID/maps` text: `start-end perms offset dev inode   path`. Lines that do not
/// parse are left out.
pub fn parse_maps(text: &str) -> Vec<Mapping> {
    text.lines().filter_map(parse_map_line).collect()
}

fn parse_map_line(line: &str) -> Option<Mapping> {
    // The first five fields are separated by one space; the path follows padding and may hold
    // spaces itself.
    let mut f = line.splitn(6, ' ');
    let (start, end) = f.next()?.split_once('-')?;
    let perms = f.next()?;
    let offset = f.next()?;
    let _dev = f.next()?;
    let inode = f.next()?;
    let path = f.next().unwrap_or("").trim_start();
    Some(Mapping {
        start: u64::from_str_radix(start, 16).ok()?,
        end: u64::from_str_radix(end, 16).ok()?,
        offset: u64::from_str_radix(offset, 16).ok()?,
        exec: perms.as_bytes().get(2) == Some(&b'x'),
        inode: inode.parse().ok()?,
        path: path.to_string(),
    })
}

/// `/usr/lib/libc.so.6` → `libc.so.6`.
pub fn base_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// A readable function name: Rust names without their hash, C++ names without parameter
/// lists (as the report shows kernels), anything else as it is.
pub fn demangle(raw: &str) -> String {
    if let Ok(d) = rustc_demangle::try_demangle(raw) {
        return format!("{d:#}");
    }
    if raw.starts_with("_Z") {
        let options = cpp_demangle::DemangleOptions::new()
            .no_params()
            .no_return_type();
        if let Some(s) = cpp_demangle::Symbol::new(raw)
            .ok()
            .and_then(|s| s.demangle_with_options(&options).ok())
        {
            return s;
        }
    }
    raw.to_string()
}

#[derive(Clone, Copy, Debug)]
struct Sym {
    addr: u64,
    size: u64,
    name_at: u32,
    name_len: u32,
}

/// The function symbols of one ELF file and where its loaded segments lie.
#[derive(Debug, Default)]
pub struct ElfSymbols {
    /// PT_LOAD segments: (file offset, file size, address).
    segments: Vec<(u64, u64, u64)>,
    /// Sorted by address.
    syms: Vec<Sym>,
    /// Every symbol's raw (mangled) name, one after another.
    names: String,
}

/// Why [`ElfSymbols::load`] read no table: the file's own error, as the system or the ELF
/// reader words it.
#[derive(Debug, thiserror::Error)]
pub enum SymbolsError {
    /// The file could not be opened.
    #[error("{0}")]
    Open(#[source] std::io::Error),
    /// The file is not an object file `object` can read.
    #[error("{0}")]
    Parse(#[source] object::Error),
}

/// What an address of a file is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved {
    /// The function holding it, demangled; None when no symbol does.
    pub function: Option<String>,
    /// Its address in the ELF file (what `addr2line -e FILE` takes).
    pub elf_addr: u64,
}

impl ElfSymbols {
    /// Reads the symbol tables of `path`; an object file that is not ELF, or has no symbols,
    /// gives an empty table; a file that cannot be opened or read as an object file, a
    /// [`SymbolsError`].
    pub fn load(path: &Path) -> Result<ElfSymbols, SymbolsError> {
        let file = std::fs::File::open(path).map_err(SymbolsError::Open)?;
        let cache = object::ReadCache::new(file);
        let elf = object::File::parse(&cache).map_err(SymbolsError::Parse)?;
        let segments = elf
            .segments()
            .map(|s| {
                let (offset, size) = s.file_range();
                (offset, size, s.address())
            })
            .collect();
        let mut out = ElfSymbols {
            segments,
            ..ElfSymbols::default()
        };
        if elf.is_64() && elf.is_little_endian() {
            // The tables and their strings are read whole, each with one read: through the
            // cache, every name would be a read of its own (a large library has a million).
            let range = |name: &str| elf.section_by_name(name).and_then(|s| s.file_range());
            let tables = [(".symtab", ".strtab"), (".dynsym", ".dynstr")]
                .map(|(t, s)| range(t).zip(range(s)));
            drop(elf);
            let file = cache.into_inner();
            for (syms, strs) in tables.into_iter().flatten() {
                let (Ok(syms), Ok(strs)) = (read_at(&file, syms), read_at(&file, strs)) else {
                    continue;
                };
                out.add_elf64_le(&syms, &strs);
            }
        } else {
            for sym in elf.symbols().chain(elf.dynamic_symbols()) {
                if sym.kind() != SymbolKind::Text || !sym.is_definition() || sym.address() == 0 {
                    continue;
                }
                if let Ok(name) = sym.name() {
                    out.push(name, sym.address(), sym.size());
                }
            }
        }
        // Largest first at one address, so the lookup's last candidate is the smallest.
        out.syms
            .sort_unstable_by(|a, b| a.addr.cmp(&b.addr).then(b.size.cmp(&a.size)));
        Ok(out)
    }

    fn push(&mut self, name: &str, addr: u64, size: u64) {
        let (Ok(name_at), Ok(name_len)) =
            (u32::try_from(self.names.len()), u32::try_from(name.len()))
        else {
            return;
        };
        self.names.push_str(name);
        self.syms.push(Sym {
            addr,
            size,
            name_at,
            name_len,
        });
    }

    /// The function symbols of a 64-bit little-endian symbol table (`Elf64_Sym`, 24 bytes:
    /// name u32, info u8, other u8, shndx u16, value u64, size u64) and its string table.
    fn add_elf64_le(&mut self, syms: &[u8], strs: &[u8]) {
        const STT_FUNC: u8 = 2;
        const STT_GNU_IFUNC: u8 = 10;
        for s in syms.chunks_exact(24) {
            let word = |at: usize| -> u64 {
                let mut b = [0u8; 8];
                b.copy_from_slice(&s[at..at + 8]);
                u64::from_le_bytes(b)
            };
            let name_at = u32::from_le_bytes([s[0], s[1], s[2], s[3]]);
            let kind = s[4] & 0xf;
            let shndx = u16::from_le_bytes([s[6], s[7]]);
            let (addr, size) = (word(8), word(16));
            if !(kind == STT_FUNC || kind == STT_GNU_IFUNC) || shndx == 0 || addr == 0 {
                continue;
            }
            let Some(rest) = usize::try_from(name_at).ok().and_then(|at| strs.get(at..)) else {
                continue;
            };
            let end = rest.iter().position(|b| *b == 0).unwrap_or(rest.len());
            if let Ok(name) = std::str::from_utf8(&rest[..end]) {
                self.push(name, addr, size);
            }
        }
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.names.len() + self.syms.len() * std::mem::size_of::<Sym>() + 64
    }

    /// The ELF address of a file offset: through the PT_LOAD segment holding it (a file with
    /// none maps offsets one to one).
    fn elf_addr(&self, file_offset: u64) -> u64 {
        self.segments
            .iter()
            // The segments come from the file: saturate rather than overflow on a crafted one.
            .find(|(off, size, _)| file_offset >= *off && file_offset < off.saturating_add(*size))
            .map(|(off, _, vaddr)| (file_offset - off).wrapping_add(*vaddr))
            .unwrap_or(file_offset)
    }

    /// The function at `file_offset` of the file.
    pub fn resolve(&self, file_offset: u64) -> Resolved {
        let elf_addr = self.elf_addr(file_offset);
        let i = self.syms.partition_point(|s| s.addr <= elf_addr);
        let function = i
            .checked_sub(1)
            .and_then(|i| self.syms.get(i))
            .filter(|s| elf_addr < s.addr.saturating_add(s.size))
            .and_then(|s| {
                let at = usize::try_from(s.name_at).ok()?;
                let len = usize::try_from(s.name_len).ok()?;
                self.names.get(at..at + len)
            })
            .map(demangle);
        Resolved { function, elf_addr }
    }
}

/// The largest symbol or string table read (a bigger one is left out: its addresses are named
/// by offset).
const MAX_TABLE_BYTES: u64 = 512 << 20;

/// `size` bytes of `file` at `offset`, with one read.
fn read_at(file: &std::fs::File, (offset, size): (u64, u64)) -> std::io::Result<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    if size > MAX_TABLE_BYTES {
        return Err(std::io::Error::other("table too large"));
    }
    let mut b = vec![0u8; usize::try_from(size).map_err(std::io::Error::other)?];
    file.read_exact_at(&mut b, offset)?;
    Ok(b)
}

/// Symbol tables by file, shared by every process of a recording, memory bounded.
#[derive(Debug, Default)]
pub struct SymbolCache {
    files: HashMap<(String, u64), (Arc<ElfSymbols>, u64)>,
    bytes: usize,
    clock: u64,
}

impl SymbolCache {
    /// The table of a mapped file, loaded on first use; `open_at` is where to read it (the
    /// path as mapped, or the process's view of it).
    pub fn get(&mut self, path: &str, inode: u64, open_at: &[PathBuf]) -> Arc<ElfSymbols> {
        self.clock += 1;
        let key = (path.to_string(), inode);
        if let Some((t, used)) = self.files.get_mut(&key) {
            *used = self.clock;
            return Arc::clone(t);
        }
        // The first of the places that is the mapped file itself (the inode the maps name: a
        // path in cufall's own mount namespace can be another file); a file that cannot be
        // read gets an empty table, its addresses then offsets.
        let table = open_at
            .iter()
            .filter(|p| {
                use std::os::unix::fs::MetadataExt;
                inode == 0 || std::fs::metadata(p).is_ok_and(|m| m.ino() == inode)
            })
            .find_map(|p| ElfSymbols::load(p).ok())
            .unwrap_or_default();
        let table = if table.bytes() > MAX_SYMBOL_BYTES {
            ElfSymbols {
                segments: table.segments,
                ..ElfSymbols::default()
            }
        } else {
            table
        };
        let size = table.bytes();
        while self.bytes + size > MAX_SYMBOL_BYTES {
            let Some(oldest) = self
                .files
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            if let Some((t, _)) = self.files.remove(&oldest) {
                self.bytes = self.bytes.saturating_sub(t.bytes());
            }
        }
        let table = Arc::new(table);
        self.bytes += size;
        self.files.insert(key, (Arc::clone(&table), self.clock));
        table
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

/// One process's addresses → frames.
pub struct ProcessSymbols {
    proc_dir: PathBuf,
    maps: Vec<Mapping>,
    read_at: Option<Instant>,
    cache: Arc<Mutex<SymbolCache>>,
    frames: HashMap<u64, Option<Frame>>,
}

impl ProcessSymbols {
    pub fn new(proc_dir: PathBuf, cache: Arc<Mutex<SymbolCache>>) -> ProcessSymbols {
        let mut s = ProcessSymbols {
            proc_dir,
            maps: Vec::new(),
            read_at: None,
            cache,
            frames: HashMap::new(),
        };
        s.reread_maps();
        s
    }

    fn reread_maps(&mut self) {
        let text = std::fs::read_to_string(self.proc_dir.join("maps")).unwrap_or_default();
        self.maps = parse_maps(&text).into_iter().filter(|m| m.exec).collect();
        self.maps.sort_unstable_by_key(|m| m.start);
        self.read_at = Some(Instant::now());
        self.frames.clear();
    }

    fn mapping(&self, addr: u64) -> Option<&Mapping> {
        let i = self.maps.partition_point(|m| m.start <= addr);
        self.maps.get(i.checked_sub(1)?).filter(|m| addr < m.end)
    }

    /// The frame of `addr`; `after_call` for a return address (looked up one byte back, in
    /// the call instruction, so a call that ends its function names that function). None when
    /// no executable mapping holds it: the call chain ends there.
    pub fn frame(&mut self, addr: u64, after_call: bool) -> Option<Frame> {
        let addr = if after_call {
            addr.saturating_sub(1)
        } else {
            addr
        };
        if let Some(f) = self.frames.get(&addr) {
            return f.clone();
        }
        if self.mapping(addr).is_none() && self.read_at.is_none_or(|t| t.elapsed() >= MAPS_REREAD) {
            self.reread_maps();
        }
        let frame = self.mapping(addr).cloned().map(|m| self.frame_in(&m, addr));
        if self.frames.len() >= MAX_FRAMES_CACHED {
            self.frames.clear();
        }
        // A miss is not kept: a library loaded since the maps were read resolves once they are
        // read again.
        if frame.is_some() {
            self.frames.insert(addr, frame.clone());
        }
        frame
    }

    /// The file a mapping is of, and its base name (the mapping's own name when it is not a
    /// file: `[vdso]`).
    pub fn file_of(&mut self, addr: u64) -> Option<(String, String)> {
        if self.mapping(addr).is_none() && self.read_at.is_none_or(|t| t.elapsed() >= MAPS_REREAD) {
            self.reread_maps();
        }
        self.mapping(addr)
            .map(|m| (m.path.clone(), base_name(&m.path).to_string()))
    }

    fn frame_in(&self, m: &Mapping, addr: u64) -> Frame {
        let module = base_name(&m.path).to_string();
        let file_offset = addr - m.start + m.offset;
        let function = if m.path.starts_with('/') {
            // The path as mapped, else the process's own view of it: through its root (another
            // mount namespace), or its mapping (a file deleted since; opening that needs
            // CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE).
            let open_at = [
                PathBuf::from(&m.path),
                self.proc_dir
                    .join("root")
                    .join(m.path.trim_start_matches('/')),
                self.proc_dir
                    .join("map_files")
                    .join(format!("{:x}-{:x}", m.start, m.end)),
            ];
            let table = match self.cache.lock() {
                Ok(mut c) => c.get(&m.path, m.inode, &open_at),
                Err(_) => Arc::default(),
            };
            let r = table.resolve(file_offset);
            r.function.unwrap_or_else(|| format!("0x{:x}", r.elf_addr))
        } else {
            format!("0x{file_offset:x}")
        };
        Frame {
            function,
            file: m.path.clone(),
            line: None,
            module,
            kind: FrameKind::Native,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[inline(never)]
    fn cufall_symbol_test_target(x: u64) -> u64 {
        std::hint::black_box(x).wrapping_mul(31).rotate_left(7)
    }

    #[inline(never)]
    fn a_rust_function_to_find(x: u64) -> u64 {
        std::hint::black_box(x).wrapping_add(17).rotate_right(3)
    }

    /// A file that cannot be opened, or that no object reader knows, is an error with the
    /// system's or the reader's own words (the caller then tries the next path of the file).
    #[test]
    fn a_missing_or_unreadable_file_is_an_error_saying_why() {
        let missing = Path::new("/nonexistent/cufall/libnothing.so");
        let io = std::fs::File::open(missing).expect_err("no such file");
        match ElfSymbols::load(missing) {
            Err(e @ SymbolsError::Open(_)) => assert_eq!(e.to_string(), io.to_string()),
            other => panic!("{other:?}"),
        }
        let dir = tempfile::tempdir().unwrap();
        let junk = dir.path().join("junk.so");
        std::fs::write(&junk, b"not an object file at all").unwrap();
        match ElfSymbols::load(&junk) {
            Err(e @ SymbolsError::Parse(_)) => {
                assert!(std::error::Error::source(&e).is_some());
                assert!(!e.to_string().is_empty());
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn maps_lines_are_read_with_paths_holding_spaces() {
        let text = "\
55d0c1a2b000-55d0c1a2d000 r--p 00000000 08:01 1234                       /usr/bin/cat
55d0c1a2d000-55d0c1a32000 r-xp 00002000 08:01 1234                       /usr/bin/cat
7f00a0000000-7f00a0021000 rw-p 00000000 00:00 0 
7f00a1000000-7f00a1100000 r-xp 00028000 fd:00 99   /opt/my lib/libx.so (deleted)
7ffd5e7f2000-7ffd5e7f4000 r-xp 00000000 00:00 0                          [vdso]
garbage
";
        let m = parse_maps(text);
        assert_eq!(m.len(), 5);
        assert_eq!(
            m[1],
            Mapping {
                start: 0x55d0c1a2d000,
                end: 0x55d0c1a32000,
                offset: 0x2000,
                exec: true,
                inode: 1234,
                path: "/usr/bin/cat".into(),
            }
        );
        assert!(!m[0].exec && !m[2].exec);
        assert_eq!(m[2].path, "");
        assert_eq!(m[3].path, "/opt/my lib/libx.so (deleted)");
        assert_eq!(m[4].path, "[vdso]");
        assert_eq!(base_name(&m[1].path), "cat");
    }

    #[test]
    fn a_path_that_is_another_file_than_the_mapped_one_gives_no_symbols() {
        use std::os::unix::fs::MetadataExt;
        let exe = std::fs::read_link("/proc/self/exe").expect("exe");
        let ino = std::fs::metadata(&exe).expect("metadata").ino();
        let mut cache = SymbolCache::default();
        let right = cache.get("right", ino, std::slice::from_ref(&exe));
        let wrong = cache.get("wrong", ino + 1, std::slice::from_ref(&exe));
        assert!(right.bytes() > wrong.bytes());
        assert_eq!(wrong.bytes(), ElfSymbols::default().bytes());
    }

    #[test]
    fn names_are_demangled_without_hashes_or_parameters() {
        assert_eq!(
            demangle("_ZN4core3ptr13drop_in_place17h0123456789abcdefE"),
            "core::ptr::drop_in_place"
        );
        assert_eq!(demangle("_ZN2ns3fooEi"), "ns::foo");
        assert_eq!(demangle("spin_here"), "spin_here");
    }

    #[test]
    fn a_function_of_this_test_binary_resolves_to_its_name() {
        let cache = Arc::new(Mutex::new(SymbolCache::default()));
        let mut syms = ProcessSymbols::new(PathBuf::from("/proc/self"), Arc::clone(&cache));
        let exe = std::fs::read_link("/proc/self/exe").expect("exe");
        for (addr, name) in [
            (
                cufall_symbol_test_target as fn(u64) -> u64 as usize,
                "cufall_symbol_test_target",
            ),
            (
                a_rust_function_to_find as fn(u64) -> u64 as usize,
                "a_rust_function_to_find",
            ),
        ] {
            let addr = addr as u64;
            // The entry, a few bytes in, and as a return address into it.
            for (at, after_call) in [(addr, false), (addr + 4, false), (addr + 5, true)] {
                let f = syms
                    .frame(at, after_call)
                    .expect("in an executable mapping");
                assert!(
                    f.function.ends_with(name),
                    "{at:#x}: {} is not {name}",
                    f.function
                );
                assert_eq!(f.file, exe.display().to_string());
                assert_eq!(f.line, None);
                assert_eq!(f.kind, FrameKind::Native);
                assert_eq!(f.module, base_name(&f.file));
            }
        }
        // libc's functions, through its dynamic symbols at least.
        let getpid = libc::getpid as unsafe extern "C" fn() -> libc::pid_t as usize as u64;
        let f = syms.frame(getpid, false).expect("libc is mapped");
        assert!(f.module.starts_with("libc"), "{f:?}");
        assert!(f.function.contains("getpid"), "{f:?}");
        // Nothing is mapped at page 0: the chain ends.
        assert_eq!(syms.frame(0x10, false), None);
        assert!(cache.lock().expect("cache").bytes() > 0);
    }

    #[test]
    fn addresses_outside_every_symbol_give_the_elf_address() {
        let t = ElfSymbols {
            segments: vec![(0x1000, 0x2000, 0x401000)],
            syms: vec![Sym {
                addr: 0x401100,
                size: 0x10,
                name_at: 0,
                name_len: 3,
            }],
            names: "foo".into(),
        };
        assert_eq!(
            t.resolve(0x1108),
            Resolved {
                function: Some("foo".into()),
                elf_addr: 0x401108
            }
        );
        // Past the symbol's size: no name, even though it is the nearest.
        assert_eq!(
            t.resolve(0x1110),
            Resolved {
                function: None,
                elf_addr: 0x401110
            }
        );
        assert_eq!(t.resolve(0x10).function, None);
    }
}
