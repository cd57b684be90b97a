//! Output paths are checked before any work starts.
//!
//! Every subcommand that writes files (`reproduce --out DIR`, `bench --out
//! FILE`, `fuzz --out DIR`, `calibrate --out FILE`, `show -o FILE`) calls
//! [`check_file`] or [`check_dir`] first, so a bad path costs a second, not
//! a three-minute measurement that then cannot be saved. The rule, the same
//! for every option:
//!
//! * Missing directories are created (the output directory itself, or a
//!   file's parent directories), and ptlab says so on stderr.
//! * A directory output must be a directory where ptlab can create files
//!   (a probe file is created, written and removed); the files it will
//!   write there, if they exist, must be writable regular files.
//! * A file output must not be a directory; if it exists it must be a
//!   regular file (or a pipe, or `/dev/null`) that opens for writing — it is
//!   opened without truncating, so a failed run leaves the old file intact;
//!   if it does not exist, a probe file is created there and removed.
//! * Nothing is written under kernel interface filesystems (procfs, sysfs,
//!   cgroupfs, debugfs, tracefs, ...): `-o /proc/version` or a THP knob is a
//!   typo, not an output.
//!
//! Errors name the option, the path and the OS error; `main` exits with
//! status 2.

use anyhow::{bail, Result};
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

/// Filesystems that are kernel interfaces, never a place for output files
/// (statfs f_type; include/uapi/linux/magic.h).
const PSEUDO_FS: &[(i64, &str)] = &[
    (0x9fa0, "procfs"),
    (0x6265_6572, "sysfs"),
    (0x6367_7270, "cgroup2"),
    (0x0027_e0eb, "cgroup"),
    (0x6462_6720, "debugfs"),
    (0x7472_6163, "tracefs"),
    (0x7363_6673, "securityfs"),
    (0x6265_6570, "configfs"),
    (0xcafe_4a11, "bpf"),
    (0xde5e_81e4, "efivarfs"),
    (0x6165_676c, "pstore"),
];

/// The kernel-interface filesystem `path` (which must exist) is on, if any.
fn pseudo_fs(path: &Path) -> Option<&'static str> {
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: statfs fills the zeroed struct we pass; `c` is NUL-terminated.
    let t = unsafe {
        let mut s: libc::statfs = std::mem::zeroed();
        if libc::statfs(c.as_ptr(), &mut s) != 0 {
            return None;
        }
        s.f_type as i64
    };
    PSEUDO_FS.iter().find(|(m, _)| *m == t).map(|(_, n)| *n)
}

fn refuse_pseudo(option: &str, path: &Path, shown: &Path) -> Result<()> {
    if let Some(fs) = pseudo_fs(path) {
        bail!(
            "{option} {}: cannot write there: it is on {fs}, a kernel interface, not a place \
             for output files",
            shown.display()
        );
    }
    Ok(())
}

/// Creates `dir` and its missing parents, saying so.
fn create_dirs(option: &str, dir: &Path, shown: &Path) -> Result<()> {
    if let Err(e) = fs::create_dir_all(dir) {
        bail!(
            "{option} {}: cannot create the directory {}: {e}",
            shown.display(),
            dir.display()
        );
    }
    crate::errln!("ptlab: created directory {} for {option}", dir.display());
    Ok(())
}

/// An existing file ptlab will replace: a writable regular file (or pipe,
/// or /dev/null), opened without truncating.
fn check_existing_file(option: &str, path: &Path, shown: &Path, meta: &fs::Metadata) -> Result<()> {
    let ft = meta.file_type();
    if ft.is_dir() {
        bail!(
            "{option} {}: is a directory; give a file name",
            shown.display()
        );
    }
    let devnull = fs::canonicalize(path).is_ok_and(|p| p == Path::new("/dev/null"));
    if !(ft.is_file() || ft.is_fifo() || devnull) {
        bail!(
            "{option} {}: exists and is not a regular file (a device or socket); give a file name",
            shown.display()
        );
    }
    refuse_pseudo(option, path, shown)?;
    let open = OpenOptions::new().write(true).open(path).and_then(|mut f| {
        // A zero-length write reaches the filesystem's write method (procfs
        // files that open for root fail it with EIO) and changes nothing.
        f.write(&[]).map(|_| ())
    });
    if let Err(e) = open {
        bail!("{option} {}: cannot write there: {e}", shown.display());
    }
    Ok(())
}

/// Checks a file output (see the module docs), creating missing parent
/// directories. Call before doing any work.
pub fn check_file(option: &str, path: &Path) -> Result<()> {
    if path.as_os_str().is_empty() {
        bail!("{option}: the path is empty");
    }
    match fs::metadata(path) {
        Ok(meta) => return check_existing_file(option, path, path, &meta),
        // Missing, or a parent is a file: the parent check below says which.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => {}
        Err(e) => bail!("{option} {}: {e}", path.display()),
    }
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    match fs::metadata(&parent) {
        Ok(m) if !m.is_dir() => bail!(
            "{option} {}: {} is not a directory",
            path.display(),
            parent.display()
        ),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => create_dirs(option, &parent, path)?,
        Err(e) => bail!("{option} {}: {}: {e}", path.display(), parent.display()),
    }
    refuse_pseudo(option, &parent, path)?;
    probe_new_file(option, path, path)
}

/// Creates `probe`, writes a byte, removes it.
fn probe_new_file(option: &str, probe: &Path, shown: &Path) -> Result<()> {
    let r = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(probe)
        .and_then(|mut f| f.write_all(b"\n"));
    let removed = fs::remove_file(probe);
    if let Err(e) = r {
        bail!(
            "{option} {}: cannot create a file there: {e}",
            shown.display()
        );
    }
    if let Err(e) = removed {
        bail!(
            "{option} {}: cannot remove the test file {}: {e}",
            shown.display(),
            probe.display()
        );
    }
    Ok(())
}

/// Checks a directory output and the `files` ptlab will write in it (see
/// the module docs), creating the directory if missing. Call before doing
/// any work.
pub fn check_dir(option: &str, dir: &Path, files: &[&str]) -> Result<()> {
    if dir.as_os_str().is_empty() {
        bail!("{option}: the path is empty");
    }
    match fs::metadata(dir) {
        Ok(m) if !m.is_dir() => bail!(
            "{option} {}: exists and is not a directory; give a directory (it is created if \
             missing)",
            dir.display()
        ),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => create_dirs(option, dir, dir)?,
        Err(e) => bail!("{option} {}: {e}", dir.display()),
    }
    refuse_pseudo(option, dir, dir)?;
    let probe = dir.join(format!(".ptlab-write-test-{}", std::process::id()));
    probe_new_file(option, &probe, dir)?;
    for f in files {
        let p = dir.join(f);
        if let Ok(meta) = fs::metadata(&p) {
            check_existing_file(option, &p, &p, &meta)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("ptlab-outpath-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    fn err(r: Result<()>) -> String {
        format!("{:#}", r.unwrap_err())
    }

    #[test]
    fn file_outputs() {
        let d = scratch("file");
        // Missing parents are created; the probe leaves nothing behind.
        let f = d.join("a/b/out.json");
        check_file("--out", &f).unwrap();
        assert!(d.join("a/b").is_dir());
        assert!(!f.exists());
        // An existing file is kept as it is.
        fs::write(&f, "old").unwrap();
        check_file("--out", &f).unwrap();
        assert_eq!(fs::read_to_string(&f).unwrap(), "old");
        let e = err(check_file("--out", &d));
        assert!(
            e.starts_with(&format!("--out {}: is a directory", d.display())),
            "{e}"
        );
        let e = err(check_file("-o", &f.join("x.html")));
        assert!(e.contains("is not a directory"), "{e}");
        let e = err(check_file("-o", Path::new("/proc/version")));
        assert!(e.starts_with("-o /proc/version: cannot write there"), "{e}");
        let e = err(check_file("-o", Path::new("/proc/ptlab-new.html")));
        assert!(e.starts_with("-o /proc/ptlab-new.html: cannot"), "{e}");
        let e = err(check_file(
            "-o",
            Path::new("/sys/kernel/mm/transparent_hugepage/enabled"),
        ));
        assert!(e.contains("sysfs"), "{e}");
        check_file("--out", Path::new("/dev/null")).unwrap();
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn dir_outputs() {
        let d = scratch("dir");
        let out = d.join("new/out");
        check_dir("--out", &out, &["report.html"]).unwrap();
        assert!(out.is_dir());
        assert_eq!(fs::read_dir(&out).unwrap().count(), 0, "probe left behind");
        fs::create_dir(out.join("report.html")).unwrap();
        let e = err(check_dir("--out", &out, &["report.html"]));
        assert!(e.contains("report.html: is a directory"), "{e}");
        let file = d.join("file");
        fs::write(&file, "x").unwrap();
        let e = err(check_dir("--out", &file, &[]));
        assert!(e.contains("exists and is not a directory"), "{e}");
        let e = err(check_dir("--out", Path::new("/proc/version"), &[]));
        assert!(e.contains("not a directory"), "{e}");
        let e = err(check_dir("--out", Path::new("/proc/self"), &[]));
        assert!(e.contains("procfs"), "{e}");
        let _ = fs::remove_dir_all(&d);
    }
}
