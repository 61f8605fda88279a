//! What a device or image holds before mkfs writes over it: any
//! filesystem, swap, RAID or LVM member, LUKS header or partition table
//! that libblkid (util-linux) knows, as mkfs.btrfs asks it
//! (check_overwrite: a full probe of superblocks and partitions).
//!
//! libblkid knows some hundred signatures and keeps up with them; a list
//! of magics of our own would not. The binding is these six calls of its
//! stable C API, declared here: the Rust binding crates generate theirs
//! with bindgen, which needs libclang on every build machine.

use std::ffi::{CStr, CString};
use std::os::raw::{c_char, c_int, c_void};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

#[allow(non_camel_case_types)]
type blkid_probe = *mut c_void;

#[link(name = "blkid")]
extern "C" {
    fn blkid_new_probe_from_filename(filename: *const c_char) -> blkid_probe;
    fn blkid_free_probe(pr: blkid_probe);
    fn blkid_probe_enable_superblocks(pr: blkid_probe, enable: c_int) -> c_int;
    fn blkid_probe_enable_partitions(pr: blkid_probe, enable: c_int) -> c_int;
    fn blkid_do_fullprobe(pr: blkid_probe) -> c_int;
    fn blkid_probe_lookup_value(
        pr: blkid_probe,
        name: *const c_char,
        data: *mut *const c_char,
        len: *mut usize,
    ) -> c_int;
}

/// A probe, freed on drop.
struct Probe(blkid_probe);

impl Drop for Probe {
    fn drop(&mut self) {
        // SAFETY: a probe from blkid_new_probe_from_filename, freed once.
        unsafe { blkid_free_probe(self.0) }
    }
}

impl Probe {
    fn value(&self, name: &CStr) -> Option<String> {
        let mut data: *const c_char = std::ptr::null();
        let mut len = 0usize;
        // SAFETY: a live probe; the out pointers live for the call.
        let rc = unsafe { blkid_probe_lookup_value(self.0, name.as_ptr(), &mut data, &mut len) };
        if rc != 0 || data.is_null() {
            return None;
        }
        // SAFETY: libblkid returns a NUL-terminated string owned by the
        // probe, valid until it is freed (after this copy).
        Some(
            unsafe { CStr::from_ptr(data) }
                .to_string_lossy()
                .into_owned(),
        )
    }
}

/// What `path` holds, as mkfs.btrfs words it: "an existing filesystem
/// (ext4)", "a partition table (gpt)"; None when libblkid finds nothing.
/// A device it cannot probe is an error naming it.
pub fn signature(path: &Path) -> Result<Option<String>, String> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| format!("{}: NUL byte in the path", path.display()))?;
    // SAFETY: a NUL-terminated path that outlives the call.
    let pr = unsafe { blkid_new_probe_from_filename(c.as_ptr()) };
    if pr.is_null() {
        return Err(format!(
            "{}: cannot probe for existing signatures: {}",
            path.display(),
            std::io::Error::last_os_error()
        ));
    }
    let pr = Probe(pr);
    // SAFETY: a live probe.
    let rc = unsafe {
        blkid_probe_enable_superblocks(pr.0, 1);
        blkid_probe_enable_partitions(pr.0, 1);
        blkid_do_fullprobe(pr.0)
    };
    match rc {
        0 => {}
        1 => return Ok(None),
        _ => {
            return Err(format!(
                "{}: probing for existing signatures failed",
                path.display()
            ))
        }
    }
    if let Some(t) = pr.value(c"TYPE") {
        return Ok(Some(format!("an existing filesystem ({t})")));
    }
    if let Some(t) = pr.value(c"PTTYPE") {
        return Ok(Some(format!("a partition table ({t})")));
    }
    Ok(Some("an existing signature".into()))
}
