//! Swap files a scenario asks for (`swap SIZE`).
//!
//! ptlab creates a swap file on a local filesystem, formats it itself (the
//! version-1 swap header mkswap writes, with the volume label `ptlab`),
//! enables it with swapon(2) at the highest priority, and disables and
//! deletes it on every exit path through the THP knob journal and its
//! handlers (crate::knobs): the file's path is journaled before the file
//! is created, so after a crash or SIGKILL the next ptlab start (or
//! `ptlab restore`) finds it, swaps it off and deletes it.
//!
//! It never touches a swap area it did not create: a path is acted on only
//! if it is a regular file named `ptlab-*.swap` whose header carries the
//! `ptlab` label.
//!
//! Where: `$PTLAB_SWAP_DIR`, else `/var/tmp/ptlab-swap`. The filesystem
//! must support swap files (ext4, xfs, btrfs without COW...; not tmpfs or
//! overlayfs): swapon(2) says EINVAL otherwise, and the scenario fails with
//! that errno.
//!
//! `swap SIZE blockdev` puts the same file behind a loop device and swaps
//! on the device instead (`SWP_BLKDEV`: large folios go out whole). The
//! loop device is attached with `LO_FLAGS_AUTOCLEAR`, so it detaches by
//! itself once nothing holds it: when swapoff(2) releases it, or when the
//! process that attached it dies before swapon(2). The journal names the
//! file; the device is found again from the file through
//! `/sys/block/loop*/loop/backing_file`.

use std::ffi::CString;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

pub use ptlab_model::swap::SwapKind;

const PAGE: u64 = 4096;
/// `SWAP_FLAG_PREFER | 32767`: the highest priority, so pages go to our
/// file even if the machine has other swap areas.
const SWAP_FLAGS: libc::c_int = 0x8000 | 0x7fff;
/// The volume label written into (and required in) every ptlab swap header.
pub const LABEL: &[u8] = b"ptlab";

/// Where swap files go without `$PTLAB_SWAP_DIR`.
pub const DEFAULT_SWAP_DIR: &str = "/var/tmp/ptlab-swap";

/// Directory for swap files.
pub fn swap_dir() -> PathBuf {
    std::env::var_os("PTLAB_SWAP_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_SWAP_DIR))
}

/// The swap file path of process `pid`.
pub fn swap_path(pid: u32) -> PathBuf {
    swap_dir().join(format!("ptlab-{pid}.swap"))
}

/// The header page mkswap writes (`union swap_header` in
/// include/linux/swap.h): version 1, `last_page`, no bad pages, a volume
/// label, and the `SWAPSPACE2` magic in the page's last 10 bytes.
pub fn header(pages: u64) -> Vec<u8> {
    let mut h = vec![0u8; PAGE as usize];
    h[1024..1028].copy_from_slice(&1u32.to_le_bytes()); // version
    let last = pages.saturating_sub(1).min(u64::from(u32::MAX)) as u32;
    h[1028..1032].copy_from_slice(&last.to_le_bytes()); // last_page
                                                        // nr_badpages = 0; sws_uuid (16 bytes) left zero; sws_volume (16 bytes):
    h[1052..1052 + LABEL.len()].copy_from_slice(LABEL);
    h[PAGE as usize - 10..].copy_from_slice(b"SWAPSPACE2");
    h
}

fn cpath(p: &Path) -> std::io::Result<CString> {
    CString::new(p.as_os_str().as_encoded_bytes()).map_err(|_| std::io::Error::other("NUL in path"))
}

/// Create, format and enable a swap file of `bytes` at `path` (which must
/// not exist). On failure nothing is left behind. Returns the errno of a
/// failed swapon(2) as an `io::Error` with that raw code.
///
/// There is no minimum here: the kernel decides. A file of one page gets a
/// header with `last_page` 0, and one shorter than a page gets only that
/// many bytes of the header (no `SWAPSPACE2` signature); swapon(2) refuses
/// both with EINVAL (Linux: mm/swapfile.c read_swap_header(), "Empty
/// swap-file" / "Unable to find swap-space signature"), which is the rule
/// the model mirrors (ptlab_model::swap::MIN_SWAP_PAGES). mkswap(8)'s own
/// floor of 10 pages is not the kernel's and is not applied.
///
/// With [`SwapKind::BlockDev`], `on_device` is told the loop device's path
/// once it is attached and before swapon(2), so that a signal handler can
/// swap it off (crate::knobs).
pub fn create(
    path: &Path,
    bytes: u64,
    kind: SwapKind,
    on_device: &mut dyn FnMut(&Path),
) -> std::io::Result<()> {
    match kind {
        SwapKind::File => create_file(path, bytes),
        SwapKind::BlockDev => create_blockdev(path, bytes, on_device),
    }
}

fn create_file(path: &Path, bytes: u64) -> std::io::Result<()> {
    let pages = bytes / PAGE;
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir)?;
    }
    let res = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)?;
        if pages == 0 {
            // Shorter than the header page: what fits of it.
            f.write_all(&header(1)[..bytes as usize])?;
            f.sync_all()?;
            drop(f);
            return swapon(path);
        }
        // A swap file must have no holes. Allocated (unwritten) extents
        // are enough where the filesystem supports fallocate(2) (ext4,
        // xfs: swapon(2) maps the extents, and swap I/O goes to the blocks
        // directly); that takes milliseconds where writing 64 MiB of zeros
        // and syncing them took ~70 ms per `swap 64M` here. Elsewhere, or
        // if swapon(2) refuses the allocated file, it is written out.
        let len = pages * PAGE;
        // SAFETY: fallocate(2) on our descriptor.
        let allocated = unsafe { libc::fallocate(f.as_raw_fd(), 0, 0, len as libc::off_t) } == 0;
        if allocated {
            f.write_all(&header(pages))?;
            f.sync_all()?;
            drop(f);
            match swapon(path) {
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                    fs::remove_file(path)?;
                    f = OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .mode(0o600)
                        .open(path)?;
                }
                r => return r,
            }
        }
        f.write_all(&header(pages))?;
        let zeros = vec![0u8; 1 << 20];
        let mut left = (pages - 1) * PAGE;
        while left > 0 {
            let n = left.min(zeros.len() as u64) as usize;
            f.write_all(&zeros[..n])?;
            left -= n as u64;
        }
        f.sync_all()?;
        drop(f);
        swapon(path)
    })();
    if res.is_err() {
        let _ = fs::remove_file(path);
    }
    res
}

/// The block-device kind: the file (allocated, with the header; a size
/// under one page gets what fits of the header, as for a swap file), a
/// loop device over it, swapon(2) on the device. On failure nothing is
/// left behind.
fn create_blockdev(
    path: &Path,
    bytes: u64,
    on_device: &mut dyn FnMut(&Path),
) -> std::io::Result<()> {
    let pages = bytes / PAGE;
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir)?;
    }
    let res = (|| {
        let mut f = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)?;
        if pages == 0 {
            f.write_all(&header(1)[..bytes as usize])?;
        } else {
            let len = pages * PAGE;
            // SAFETY: fallocate(2) on our descriptor.
            if unsafe { libc::fallocate(f.as_raw_fd(), 0, 0, len as libc::off_t) } != 0 {
                f.set_len(len)?;
            }
            f.write_all(&header(pages))?;
        }
        f.sync_all()?;
        let dev = attach_loop(&f)?;
        drop(f);
        on_device(&dev.path);
        // The device stays attached while `dev` is open; swapon(2) opens it
        // itself, and from then on holds it.
        let r = swapon(&dev.path);
        drop(dev);
        r
    })();
    if res.is_err() {
        let _ = fs::remove_file(path);
    }
    res
}

/// An attached loop device, open (closing it detaches an autoclear device
/// nobody else holds).
struct LoopDev {
    path: PathBuf,
    _fd: File,
}

/// `struct loop_info64` (include/uapi/linux/loop.h).
#[repr(C)]
struct LoopInfo64 {
    lo_device: u64,
    lo_inode: u64,
    lo_rdevice: u64,
    lo_offset: u64,
    lo_sizelimit: u64,
    lo_number: u32,
    lo_encrypt_type: u32,
    lo_encrypt_key_size: u32,
    lo_flags: u32,
    lo_file_name: [u8; 64],
    lo_crypt_name: [u8; 64],
    lo_encrypt_key: [u8; 32],
    lo_init: [u64; 2],
}

/// `struct loop_config` (include/uapi/linux/loop.h).
#[repr(C)]
struct LoopConfig {
    fd: u32,
    block_size: u32,
    info: LoopInfo64,
    reserved: [u64; 8],
}

const LOOP_CTL_GET_FREE: libc::c_ulong = 0x4C82;
const LOOP_CONFIGURE: libc::c_ulong = 0x4C0A;
const LO_FLAGS_AUTOCLEAR: u32 = 4;

/// Attach a free loop device to `backing` with LOOP_CONFIGURE
/// (autoclear). A device another process takes between LOOP_CTL_GET_FREE
/// and LOOP_CONFIGURE answers EBUSY; the next free one is tried.
fn attach_loop(backing: &File) -> std::io::Result<LoopDev> {
    let ctl = OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/loop-control")
        .map_err(|e| std::io::Error::new(e.kind(), format!("/dev/loop-control: {e}")))?;
    let mut last = std::io::Error::other("no free loop device");
    for _ in 0..8 {
        // SAFETY: an ioctl without arguments on our descriptor.
        let n = unsafe { libc::ioctl(ctl.as_raw_fd(), LOOP_CTL_GET_FREE as _) };
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let path = PathBuf::from(format!("/dev/loop{n}"));
        let dev = OpenOptions::new().read(true).write(true).open(&path)?;
        // SAFETY: an all-zero loop_config is valid (no offset, no limit).
        let mut cfg: LoopConfig = unsafe { std::mem::zeroed() };
        cfg.fd = backing.as_raw_fd() as u32;
        cfg.block_size = PAGE as u32;
        cfg.info.lo_flags = LO_FLAGS_AUTOCLEAR;
        // SAFETY: LOOP_CONFIGURE reads one loop_config.
        if unsafe { libc::ioctl(dev.as_raw_fd(), LOOP_CONFIGURE as _, &cfg) } == 0 {
            return Ok(LoopDev { path, _fd: dev });
        }
        last = std::io::Error::last_os_error();
        if last.raw_os_error() != Some(libc::EBUSY) {
            return Err(last);
        }
    }
    Err(last)
}

/// The loop device whose backing file is `path`, if one is attached
/// (`/sys/block/loop*/loop/backing_file`).
pub fn loop_device_of(path: &Path) -> Option<PathBuf> {
    let want = fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    for e in fs::read_dir("/sys/block").ok()?.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.starts_with("loop") {
            continue;
        }
        let Ok(b) = fs::read_to_string(e.path().join("loop/backing_file")) else {
            continue;
        };
        if Path::new(b.trim_end()) == want {
            return Some(PathBuf::from("/dev").join(name));
        }
    }
    None
}

/// The swap area /proc/swaps lists for the ptlab file at `path`: the file
/// itself, or the loop device over it.
fn swap_area(path: &Path) -> Option<PathBuf> {
    let text = fs::read_to_string("/proc/swaps").ok()?;
    let listed = |p: &Path| {
        let want = p.to_string_lossy();
        text.lines()
            .skip(1)
            .any(|l| l.split_whitespace().next() == Some(want.as_ref()))
    };
    if listed(path) {
        return Some(path.to_path_buf());
    }
    loop_device_of(path).filter(|d| listed(d))
}

/// swapon(2) at the highest priority.
fn swapon(path: &Path) -> std::io::Result<()> {
    let c = cpath(path)?;
    // SAFETY: a NUL-terminated path.
    if unsafe { libc::swapon(c.as_ptr(), SWAP_FLAGS) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Whether `path` looks like a swap file ptlab made: a regular file named
/// `ptlab-*.swap` with our header label, or one [`create`] had not finished
/// writing when its process died (shorter than a page, holding nothing but
/// the start of a ptlab header: possibly nothing at all). Anything else is
/// never touched.
pub fn is_ours(path: &Path) -> Result<(), String> {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or("no file name")?;
    if !name.starts_with("ptlab-") || !name.ends_with(".swap") {
        return Err("not a ptlab swap file name".into());
    }
    let meta = fs::symlink_metadata(path).map_err(|e| e.to_string())?;
    if !meta.file_type().is_file() {
        return Err("not a regular file".into());
    }
    let mut h = Vec::with_capacity(PAGE as usize);
    File::open(path)
        .and_then(|f| f.take(PAGE).read_to_end(&mut h))
        .map_err(|e| e.to_string())?;
    if h.len() < PAGE as usize {
        // Every byte but `last_page` (1028..1032) is the same in every
        // ptlab header.
        let model = header(1);
        let same = h
            .iter()
            .zip(&model)
            .enumerate()
            .all(|(i, (a, b))| (1028..1032).contains(&i) || a == b);
        return if same && meta.len() < PAGE {
            Ok(())
        } else {
            Err("no ptlab swap header".into())
        };
    }
    if &h[PAGE as usize - 10..] != b"SWAPSPACE2" || &h[1052..1052 + LABEL.len()] != LABEL {
        return Err("no ptlab swap header".into());
    }
    Ok(())
}

/// Whether the ptlab file at `path` is an active swap area (listed in
/// /proc/swaps, itself or the loop device over it).
pub fn is_active(path: &Path) -> bool {
    swap_area(path).is_some()
}

/// Pages in use in the swap area of the ptlab file at `path` (/proc/swaps
/// `Used`, KiB / 4).
pub fn used_pages(path: &Path) -> Option<u64> {
    let area = swap_area(path)?;
    let text = fs::read_to_string("/proc/swaps").ok()?;
    let want = area.to_string_lossy();
    text.lines().skip(1).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.first() == Some(&want.as_ref()))
            .then(|| {
                f.get(3)
                    .and_then(|v| v.parse::<u64>().ok())
                    .map(|kb| kb / 4)
            })
            .flatten()
    })
}

/// Swap off (if active) and delete a ptlab swap file. Missing file: Ok.
pub fn remove(path: &Path) -> Result<(), String> {
    if !path.exists() {
        return Ok(());
    }
    is_ours(path)?;
    if let Some(area) = swap_area(path) {
        let c = cpath(&area).map_err(|e| e.to_string())?;
        // SAFETY: a NUL-terminated path.
        if unsafe { libc::swapoff(c.as_ptr()) } != 0 {
            return Err(format!(
                "swapoff {}: {}",
                area.display(),
                std::io::Error::last_os_error()
            ));
        }
    }
    // An autoclear loop device detaches once swapoff(2) released it; one
    // still attached (its attacher alive somewhere, or not autoclear) is
    // detached here so that the file goes with it.
    if let Some(dev) = loop_device_of(path) {
        detach_loop(&dev)?;
    }
    fs::remove_file(path).map_err(|e| e.to_string())?;
    if let Some(dir) = path.parent() {
        // Only succeeds when the directory is empty (we created it).
        let _ = fs::remove_dir(dir);
    }
    Ok(())
}

/// LOOP_CLR_FD on `dev` (EBUSY-free: with autoclear the kernel may have
/// detached it already, which ENXIO reports).
fn detach_loop(dev: &Path) -> Result<(), String> {
    const LOOP_CLR_FD: libc::c_ulong = 0x4C01;
    let f = match OpenOptions::new().read(true).open(dev) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(format!("{}: {e}", dev.display())),
    };
    // SAFETY: an ioctl without arguments on our descriptor.
    if unsafe { libc::ioctl(f.as_raw_fd(), LOOP_CLR_FD as _) } != 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::ENXIO) {
            return Err(format!("detach {}: {e}", dev.display()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_layout() {
        let h = header(16384);
        assert_eq!(&h[4086..], b"SWAPSPACE2");
        assert_eq!(u32::from_le_bytes(h[1024..1028].try_into().unwrap()), 1);
        assert_eq!(u32::from_le_bytes(h[1028..1032].try_into().unwrap()), 16383);
        assert_eq!(&h[1052..1057], b"ptlab");
    }

    #[test]
    fn foreign_files_are_refused() {
        let dir = std::env::temp_dir().join(format!("ptlab-swt-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let p = dir.join("ptlab-1.swap");
        fs::write(&p, vec![0u8; 8192]).unwrap();
        assert!(is_ours(&p).is_err());
        assert!(remove(&p).is_err());
        assert!(p.exists());
        let q = dir.join("other.swap");
        fs::write(&q, header(2)).unwrap();
        assert!(is_ours(&q).is_err());
        fs::write(&p, header(2)).unwrap();
        assert!(is_ours(&p).is_ok());
        // A file whose creation was cut short: empty, or a header prefix.
        fs::write(&p, b"").unwrap();
        assert!(is_ours(&p).is_ok());
        fs::write(&p, &header(9)[..1100]).unwrap();
        assert!(is_ours(&p).is_ok());
        let mut other = header(9)[..1100].to_vec();
        other[5] = 1;
        fs::write(&p, &other).unwrap();
        assert!(is_ours(&p).is_err());
        fs::remove_dir_all(&dir).unwrap();
    }
}

/// Wait (at most `limit`) until the block device under the swap area of
/// the ptlab file at `path` has no request in flight: the loop device over
/// it, or the device holding the file. MADV_PAGEOUT only starts the
/// writes; until a folio's write completes it stays under writeback, and
/// then `folio_free_swap()` refuses to drop it from the swap cache, so a
/// later copy-on-write copies a page it would otherwise reuse (Linux:
/// mm/swapfile.c folio_free_swap(), mm/memory.c wp_can_reuse_anon_folio()).
/// The model completes a write at once, so the live side waits for the
/// same state. `inflight` counts a request until after its bios ended
/// (blk_mq_end_request(): blk_update_request() runs the bio completions,
/// which end the folios' writeback, before the accounting drops the
/// request). Returns whether the device drained in time (a device shared
/// with other I/O may not).
pub fn wait_writeback(path: &Path, limit: std::time::Duration) -> bool {
    let inflight = match loop_device_of(path) {
        Some(dev) => PathBuf::from("/sys/block")
            .join(dev.file_name().unwrap_or_default())
            .join("inflight"),
        None => {
            use std::os::unix::fs::MetadataExt;
            let Ok(m) = fs::metadata(path) else {
                return true;
            };
            let dev = m.dev();
            let (maj, min) = (libc::major(dev), libc::minor(dev));
            PathBuf::from(format!("/sys/dev/block/{maj}:{min}/inflight"))
        }
    };
    let start = std::time::Instant::now();
    loop {
        let Ok(text) = fs::read_to_string(&inflight) else {
            return true;
        };
        if text.split_whitespace().all(|n| n == "0") {
            return true;
        }
        if start.elapsed() >= limit {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
}
