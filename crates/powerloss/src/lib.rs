//! A power-loss and I/O-fault simulator under SQLite, for fenceq's tests (never shipped).
//!
//! # Why this crate has `unsafe`
//!
//! fenceq forbids `unsafe`. Simulating a power loss needs two things no safe API offers:
//! a VFS (SQLite's C interface for files, `sqlite3_vfs` and `sqlite3_io_methods`) that
//! sees every write SQLite makes, and a view of every `fsync`/`fdatasync` the process makes,
//! SQLite's and fenceq's own (at `Synchronous::Full` fenceq syncs the `-wal` through its own
//! file handle, outside SQLite, so a VFS alone never sees that sync). This crate is the one
//! place that does both; it is `publish = false` and a dev-dependency only.
//!
//! # What it does
//!
//! [`install`] registers a VFS named `powerloss` as the process's default (every connection
//! fenceq opens afterwards uses it) that wraps the default `unix` VFS:
//!
//! - `xWrite` and `xTruncate` first save the 512-byte sectors they are about to change (their
//!   contents as of the file's last sync), then pass through;
//! - the crate defines the symbols `fsync` and `fdatasync`, which take precedence over libc's
//!   for every caller in the test binary (SQLite's C code and Rust's `File::sync_*` alike): a
//!   sync forgets its file's saved sectors (they are durable now), records the path (a
//!   directory's sync too), then makes the real system call;
//! - every write, truncate and sync is one numbered event; at the chosen crash event every
//!   tracked file is put back to what the disk would hold ([`Model::Drop`]: the last synced
//!   contents; [`Model::Torn`]: each dirty sector at random new or old, and the length at
//!   random old or new), and the process ends at once with [`CRASH_EXIT`] (no destructor, no
//!   close, no checkpoint). At a chosen fault event the call fails instead (`EIO`, `ENOSPC`).
//!
//! All tracked I/O runs under one lock, so a crash freezes every other thread's I/O. The
//! `-shm` file passes straight through: the first connection of the next process finds no
//! other one and rebuilds the WAL index from the WAL, so the check runs in another process.

#![allow(clippy::missing_safety_doc)]

use rusqlite::ffi;
use std::collections::{BTreeMap, HashMap};
use std::ffi::{c_char, c_int, c_void, CStr};
use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};

/// Exit status of a process that crashed at its chosen event.
pub const CRASH_EXIT: i32 = 77;
const SECTOR: u64 = 512;

/// What a crash leaves of the writes that were never synced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Model {
    /// Every file exactly as of its last sync.
    Drop,
    /// Every sector written since the last sync at random new or old, the length at random
    /// old or new (a disk that writes sectors in any order).
    Torn,
}

/// An I/O error to inject.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// `EIO` (`SQLITE_IOERR_*` for SQLite's calls).
    Eio,
    /// `ENOSPC` (`SQLITE_FULL` for SQLite's writes).
    Enospc,
}

/// What the simulator does in this process.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    /// Crash at this event (1 is the first): `None` never crashes.
    pub crash_at: Option<u64>,
    /// Fail this event with this error instead of doing it (once).
    pub fault_at: Option<(u64, Fault)>,
    /// What a crash leaves.
    pub model: Model,
    /// Syncs return success without making anything durable (the checker's negative control).
    pub fake_sync: bool,
    /// Seeds the torn model's choices.
    pub seed: u64,
}

impl Plan {
    /// Reads a plan from the text [`Plan::encode`] wrote.
    pub fn decode(text: &str) -> Plan {
        let field = |name: &str| text.split(',').find_map(|kv| kv.strip_prefix(name)).unwrap_or("");
        let crash_at = field("crash=").parse().ok();
        let fault_at = match field("fault=").split_once(':') {
            Some((at, "eio")) => at.parse().ok().map(|at| (at, Fault::Eio)),
            Some((at, "enospc")) => at.parse().ok().map(|at| (at, Fault::Enospc)),
            _ => None,
        };
        let model = if field("model=") == "torn" { Model::Torn } else { Model::Drop };
        Plan { crash_at, fault_at, model, fake_sync: field("fake=") == "1", seed: field("seed=").parse().unwrap_or(1) }
    }

    /// A text for an environment variable.
    pub fn encode(&self) -> String {
        let crash = self.crash_at.map_or(String::new(), |n| n.to_string());
        let fault = match self.fault_at {
            Some((at, Fault::Eio)) => format!("{at}:eio"),
            Some((at, Fault::Enospc)) => format!("{at}:enospc"),
            None => String::new(),
        };
        let model = if self.model == Model::Torn { "torn" } else { "drop" };
        format!("crash={crash},fault={fault},model={model},fake={},seed={}", u8::from(self.fake_sync), self.seed)
    }
}

/// Counts of what the simulator saw.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Seen {
    /// Events so far (writes, truncates, syncs).
    pub events: u64,
    /// Writes and truncates.
    pub writes: u64,
    /// Syncs of regular files.
    pub syncs: u64,
    /// Syncs of files whose name ends in `-wal`.
    pub wal_syncs: u64,
    /// Every path synced, in order (directories too), without repeats.
    pub synced: Vec<PathBuf>,
}

/// A file's saved sectors: (sector index, contents as of the last sync).
type Saved = Vec<(u64, Vec<u8>)>;

struct FileState {
    /// The length as of the last sync.
    synced_len: u64,
    /// Sector index to its contents as of the last sync (shorter at the synced end, empty past it).
    saved: BTreeMap<u64, Vec<u8>>,
}

struct Sim {
    plan: Plan,
    seen: Seen,
    files: HashMap<PathBuf, FileState>,
    rng: u64,
}

static ARMED: AtomicBool = AtomicBool::new(false);
static SIM: Mutex<Option<Sim>> = Mutex::new(None);
static REAL_VFS: OnceLock<usize> = OnceLock::new();

fn sim() -> MutexGuard<'static, Option<Sim>> {
    SIM.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// What an event turned out to be.
enum Verdict {
    Proceed,
    Fail(Fault),
}

impl Sim {
    /// Numbers the next event: crashes here (never returns), fails it, or lets it proceed.
    fn event(&mut self) -> Verdict {
        self.seen.events += 1;
        let n = self.seen.events;
        if self.plan.crash_at == Some(n) {
            self.crash();
        }
        match self.plan.fault_at {
            Some((at, fault)) if at == n => Verdict::Fail(fault),
            _ => Verdict::Proceed,
        }
    }

    fn next_random(&mut self) -> u64 {
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        self.rng.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Saves, once per sync interval, the sectors of `path` that `[from, to)` will change.
    fn save(&mut self, path: &Path, from: u64, to: u64) {
        let Ok(file) = OpenOptions::new().read(true).open(path) else { return };
        let len = file.metadata().map(|m| m.len()).unwrap_or(0);
        let state = self
            .files
            .entry(path.to_path_buf())
            .or_insert_with(|| FileState { synced_len: len, saved: BTreeMap::new() });
        for sector in from / SECTOR..to.div_ceil(SECTOR) {
            state.saved.entry(sector).or_insert_with(|| {
                let start = sector * SECTOR;
                let end = (start + SECTOR).min(len).max(start);
                let mut bytes = vec![0; (end - start) as usize];
                let _ = file.read_exact_at(&mut bytes, start);
                bytes
            });
        }
    }

    fn synced(&mut self, path: &Path) {
        if let Some(state) = self.files.get_mut(path) {
            state.saved.clear();
            state.synced_len = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        }
    }

    /// Puts every tracked file back to what the disk holds after a power loss, and ends the
    /// process at once.
    fn crash(&mut self) -> ! {
        let model = self.plan.model;
        let files: Vec<(PathBuf, u64, Saved)> = self
            .files
            .iter()
            .map(|(path, state)| {
                (path.clone(), state.synced_len, state.saved.iter().map(|(s, b)| (*s, b.clone())).collect())
            })
            .collect();
        for (path, synced_len, saved) in files {
            let Ok(file) = OpenOptions::new().read(true).write(true).open(&path) else { continue };
            let len = file.metadata().map(|m| m.len()).unwrap_or(0);
            for (sector, old) in saved {
                let keep_new = model == Model::Torn && self.next_random().is_multiple_of(2);
                if keep_new {
                    continue;
                }
                let start = sector * SECTOR;
                // An empty old sector lay past the synced end: its old contents are nothing
                // (zeros, if the file keeps its new length).
                let old = if old.is_empty() && start < len { vec![0; SECTOR as usize] } else { old };
                let _ = file.write_all_at(&old, start);
            }
            let final_len = match model {
                Model::Torn if self.next_random().is_multiple_of(2) => len,
                _ => synced_len,
            };
            let _ = file.set_len(final_len);
            let _ = file.sync_all_real();
        }
        // SAFETY: ends the process without running anything more of it, as a power loss does.
        unsafe { libc::_exit(CRASH_EXIT) }
    }
}

/// A real sync of a std file that bypasses the interposed symbols.
trait SyncReal {
    fn sync_all_real(&self) -> std::io::Result<()>;
}

impl SyncReal for std::fs::File {
    fn sync_all_real(&self) -> std::io::Result<()> {
        use std::os::fd::AsRawFd;
        // SAFETY: a plain system call on a file descriptor this `File` owns.
        let rc = unsafe { libc::syscall(libc::SYS_fsync, self.as_raw_fd()) };
        if rc == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    }
}

/// Installs the simulator in this process with `plan`: registers the VFS as the default and
/// arms the sync interposer. Call it before the first connection is opened. A second call
/// replaces the plan and forgets what was seen.
pub fn install(plan: Plan) {
    register_vfs();
    *sim() = Some(Sim {
        plan,
        seen: Seen::default(),
        files: HashMap::new(),
        rng: plan.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1,
    });
    ARMED.store(true, Ordering::SeqCst);
}

/// What the simulator has seen so far (zeros when it is not installed).
pub fn seen() -> Seen {
    sim().as_ref().map(|s| s.seen.clone()).unwrap_or_default()
}

// ------------------------------------------------------------------------------- the VFS

#[repr(C)]
struct SimFile {
    base: ffi::sqlite3_file,
    /// The `unix` VFS's file, in the bytes after this header.
    real: *mut ffi::sqlite3_file,
    /// The file's canonical path (`None` for SQLite's nameless temporary files).
    path: *mut PathBuf,
}

const HEADER: usize = std::mem::size_of::<SimFile>().div_ceil(16) * 16;

fn real_vfs() -> *mut ffi::sqlite3_vfs {
    *REAL_VFS.get().expect("the VFS is registered") as *mut ffi::sqlite3_vfs
}

fn register_vfs() {
    REAL_VFS.get_or_init(|| {
        // SAFETY: SQLite's documented registration sequence; the new VFS is leaked on purpose
        // (SQLite keeps a pointer to it for the life of the process).
        unsafe {
            let real = ffi::sqlite3_vfs_find(std::ptr::null());
            assert!(!real.is_null(), "sqlite has a default VFS");
            let mut vfs: ffi::sqlite3_vfs = std::ptr::read(real);
            vfs.szOsFile = (HEADER + (*real).szOsFile as usize) as c_int;
            vfs.zName = c"powerloss".as_ptr();
            vfs.pAppData = real.cast();
            vfs.pNext = std::ptr::null_mut();
            vfs.xOpen = Some(sim_open);
            vfs.xDelete = Some(sim_delete);
            let vfs = Box::leak(Box::new(vfs));
            let rc = ffi::sqlite3_vfs_register(vfs, 1);
            assert_eq!(rc, ffi::SQLITE_OK, "registering the powerloss VFS");
            real as usize
        }
    });
}

unsafe fn path_of(name: *const c_char) -> Option<PathBuf> {
    if name.is_null() {
        return None;
    }
    let path = PathBuf::from(CStr::from_ptr(name).to_string_lossy().into_owned());
    Some(std::fs::canonicalize(&path).unwrap_or(path))
}

unsafe extern "C" fn sim_open(
    _vfs: *mut ffi::sqlite3_vfs,
    name: *const c_char,
    file: *mut ffi::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    let sim = file.cast::<SimFile>();
    let real = file.cast::<u8>().add(HEADER).cast::<ffi::sqlite3_file>();
    (*sim).base.pMethods = std::ptr::null();
    (*sim).real = real;
    (*sim).path = std::ptr::null_mut();
    let vfs = real_vfs();
    let rc = ((*vfs).xOpen.expect("unix xOpen"))(vfs, name, real, flags, out_flags);
    if rc != ffi::SQLITE_OK {
        return rc;
    }
    if let Some(path) = path_of(name) {
        (*sim).path = Box::into_raw(Box::new(path));
    }
    (*sim).base.pMethods = &SIM_METHODS;
    ffi::SQLITE_OK
}

unsafe extern "C" fn sim_delete(_vfs: *mut ffi::sqlite3_vfs, name: *const c_char, sync_dir: c_int) -> c_int {
    if let (Some(path), Some(sim)) = (path_of(name), sim().as_mut()) {
        sim.files.remove(&path);
    }
    let vfs = real_vfs();
    ((*vfs).xDelete.expect("unix xDelete"))(vfs, name, sync_dir)
}

unsafe fn real(file: *mut ffi::sqlite3_file) -> (*mut ffi::sqlite3_file, &'static ffi::sqlite3_io_methods) {
    let real = (*file.cast::<SimFile>()).real;
    (real, &*(*real).pMethods)
}

unsafe fn tracked_path(file: *mut ffi::sqlite3_file) -> Option<&'static Path> {
    let path = (*file.cast::<SimFile>()).path;
    (!path.is_null() && ARMED.load(Ordering::SeqCst)).then(|| (*path).as_path())
}

unsafe extern "C" fn sim_close(file: *mut ffi::sqlite3_file) -> c_int {
    let (real, methods) = real(file);
    let rc = (methods.xClose.expect("xClose"))(real);
    let sim = file.cast::<SimFile>();
    if !(*sim).path.is_null() {
        drop(Box::from_raw((*sim).path));
        (*sim).path = std::ptr::null_mut();
    }
    rc
}

unsafe extern "C" fn sim_read(file: *mut ffi::sqlite3_file, buf: *mut c_void, amount: c_int, offset: i64) -> c_int {
    let (real, methods) = real(file);
    (methods.xRead.expect("xRead"))(real, buf, amount, offset)
}

unsafe extern "C" fn sim_write(file: *mut ffi::sqlite3_file, buf: *const c_void, amount: c_int, offset: i64) -> c_int {
    let (real, methods) = real(file);
    let Some(path) = tracked_path(file) else { return (methods.xWrite.expect("xWrite"))(real, buf, amount, offset) };
    let mut guard = sim();
    let Some(sim) = guard.as_mut() else { return (methods.xWrite.expect("xWrite"))(real, buf, amount, offset) };
    sim.seen.writes += 1;
    match sim.event() {
        Verdict::Fail(Fault::Eio) => return ffi::SQLITE_IOERR_WRITE,
        Verdict::Fail(Fault::Enospc) => return ffi::SQLITE_FULL,
        Verdict::Proceed => {}
    }
    sim.save(path, offset as u64, offset as u64 + amount as u64);
    (methods.xWrite.expect("xWrite"))(real, buf, amount, offset)
}

unsafe extern "C" fn sim_truncate(file: *mut ffi::sqlite3_file, size: i64) -> c_int {
    let (real, methods) = real(file);
    let Some(path) = tracked_path(file) else { return (methods.xTruncate.expect("xTruncate"))(real, size) };
    let mut guard = sim();
    let Some(sim) = guard.as_mut() else { return (methods.xTruncate.expect("xTruncate"))(real, size) };
    sim.seen.writes += 1;
    if let Verdict::Fail(_) = sim.event() {
        return ffi::SQLITE_IOERR_TRUNCATE;
    }
    let len = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    if (size as u64) < len {
        sim.save(path, size as u64, len);
    }
    (methods.xTruncate.expect("xTruncate"))(real, size)
}

macro_rules! forward {
    ($name:ident, $method:ident, ($($arg:ident: $ty:ty),*)) => {
        unsafe extern "C" fn $name(file: *mut ffi::sqlite3_file $(, $arg: $ty)*) -> c_int {
            let (real, methods) = real(file);
            (methods.$method.expect(stringify!($method)))(real $(, $arg)*)
        }
    };
}

// The sync itself is seen by the interposed `fsync`/`fdatasync` below, as every sync is.
forward!(sim_sync, xSync, (flags: c_int));
forward!(sim_file_size, xFileSize, (size: *mut i64));
forward!(sim_lock, xLock, (level: c_int));
forward!(sim_unlock, xUnlock, (level: c_int));
forward!(sim_check_reserved, xCheckReservedLock, (out: *mut c_int));
forward!(sim_file_control, xFileControl, (op: c_int, arg: *mut c_void));
forward!(sim_shm_lock, xShmLock, (offset: c_int, n: c_int, flags: c_int));
forward!(sim_shm_unmap, xShmUnmap, (delete: c_int));

unsafe extern "C" fn sim_sector_size(file: *mut ffi::sqlite3_file) -> c_int {
    let (real, methods) = real(file);
    (methods.xSectorSize.expect("xSectorSize"))(real)
}

unsafe extern "C" fn sim_device_characteristics(file: *mut ffi::sqlite3_file) -> c_int {
    let (real, methods) = real(file);
    (methods.xDeviceCharacteristics.expect("xDeviceCharacteristics"))(real)
}

unsafe extern "C" fn sim_shm_map(
    file: *mut ffi::sqlite3_file,
    page: c_int,
    size: c_int,
    extend: c_int,
    out: *mut *mut c_void,
) -> c_int {
    let (real, methods) = real(file);
    (methods.xShmMap.expect("xShmMap"))(real, page, size, extend, out)
}

unsafe extern "C" fn sim_shm_barrier(file: *mut ffi::sqlite3_file) {
    let (real, methods) = real(file);
    (methods.xShmBarrier.expect("xShmBarrier"))(real)
}

/// Version 2: no memory-mapped I/O (`xFetch`), so every change of the file is an `xWrite`.
static SIM_METHODS: ffi::sqlite3_io_methods = ffi::sqlite3_io_methods {
    iVersion: 2,
    xClose: Some(sim_close),
    xRead: Some(sim_read),
    xWrite: Some(sim_write),
    xTruncate: Some(sim_truncate),
    xSync: Some(sim_sync),
    xFileSize: Some(sim_file_size),
    xLock: Some(sim_lock),
    xUnlock: Some(sim_unlock),
    xCheckReservedLock: Some(sim_check_reserved),
    xFileControl: Some(sim_file_control),
    xSectorSize: Some(sim_sector_size),
    xDeviceCharacteristics: Some(sim_device_characteristics),
    xShmMap: Some(sim_shm_map),
    xShmLock: Some(sim_shm_lock),
    xShmBarrier: Some(sim_shm_barrier),
    xShmUnmap: Some(sim_shm_unmap),
    xFetch: None,
    xUnfetch: None,
};

// ------------------------------------------------------------------------------- every sync

/// The path behind a file descriptor.
fn fd_path(fd: c_int) -> Option<PathBuf> {
    std::fs::read_link(format!("/proc/self/fd/{fd}")).ok()
}

unsafe fn on_sync(fd: c_int, call: libc::c_long) -> c_int {
    if !ARMED.load(Ordering::SeqCst) {
        return libc::syscall(call, fd) as c_int;
    }
    let path = fd_path(fd);
    let mut guard = sim();
    let Some(sim) = guard.as_mut() else { return libc::syscall(call, fd) as c_int };
    let is_dir = path.as_deref().is_some_and(Path::is_dir);
    if let Some(path) = &path {
        if !sim.seen.synced.contains(path) {
            sim.seen.synced.push(path.clone());
        }
    }
    if is_dir {
        return libc::syscall(call, fd) as c_int;
    }
    sim.seen.syncs += 1;
    if path.as_deref().is_some_and(|p| p.to_string_lossy().ends_with("-wal")) {
        sim.seen.wal_syncs += 1;
    }
    if let Verdict::Fail(fault) = sim.event() {
        *libc::__errno_location() = if fault == Fault::Enospc { libc::ENOSPC } else { libc::EIO };
        return -1;
    }
    if sim.plan.fake_sync {
        return 0;
    }
    let rc = libc::syscall(call, fd) as c_int;
    if rc == 0 {
        if let Some(path) = &path {
            sim.synced(path);
        }
    }
    rc
}

/// Every `fsync` of the test process (SQLite's, Rust's `File::sync_all`) comes here.
#[no_mangle]
pub unsafe extern "C" fn fsync(fd: c_int) -> c_int {
    on_sync(fd, libc::SYS_fsync)
}

/// Every `fdatasync` of the test process (Rust's `File::sync_data`, fenceq's WAL sync) comes here.
#[no_mangle]
pub unsafe extern "C" fn fdatasync(fd: c_int) -> c_int {
    on_sync(fd, libc::SYS_fdatasync)
}
