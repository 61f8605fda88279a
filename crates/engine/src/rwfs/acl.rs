//! POSIX ACLs at create time, as the kernel's posix_acl_create: a new
//! inode in a directory with a default ACL gets that ACL as its access
//! ACL, its permission bits cut by the mode asked for (and the mode cut by
//! the ACL), and a new directory inherits the default ACL too; without a
//! default ACL the umask applies. Checking access against ACLs is the
//! kernel's (FUSE_POSIX_ACL with default_permissions), from the xattrs
//! the mount serves.
//!
//! The xattr value: a u32 version (2), then 8-byte entries of a u16 tag,
//! a u16 permission set and a u32 id, little-endian.

/// The xattr names of the access and default ACLs.
pub const ACCESS: &[u8] = b"system.posix_acl_access";
pub const DEFAULT: &[u8] = b"system.posix_acl_default";

const VERSION: u32 = 2;
const USER_OBJ: u16 = 0x01;
const GROUP_OBJ: u16 = 0x04;
const MASK: u16 = 0x10;
const OTHER: u16 = 0x20;

/// One ACL entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    tag: u16,
    perm: u16,
    id: u32,
}

fn parse(v: &[u8]) -> Option<Vec<Entry>> {
    if v.len() < 4 || !(v.len() - 4).is_multiple_of(8) {
        return None;
    }
    if u32::from_le_bytes(v[..4].try_into().ok()?) != VERSION {
        return None;
    }
    Some(
        v[4..]
            .chunks_exact(8)
            .map(|c| Entry {
                tag: u16::from_le_bytes([c[0], c[1]]),
                perm: u16::from_le_bytes([c[2], c[3]]),
                id: u32::from_le_bytes([c[4], c[5], c[6], c[7]]),
            })
            .collect(),
    )
}

fn encode(entries: &[Entry]) -> Vec<u8> {
    let mut v = VERSION.to_le_bytes().to_vec();
    for e in entries {
        v.extend_from_slice(&e.tag.to_le_bytes());
        v.extend_from_slice(&e.perm.to_le_bytes());
        v.extend_from_slice(&e.id.to_le_bytes());
    }
    v
}

/// An xattr to set: name, value.
pub type Xattr = (&'static [u8], Vec<u8>);

/// What a new inode gets: its mode (type bits kept) and the xattrs to
/// set, from the mode asked for, the caller's umask and the directory's
/// default ACL (if any).
pub fn inherit(mode: u32, umask: u32, parent_default: Option<&[u8]>) -> (u32, Vec<Xattr>) {
    let Some(mut acl) = parent_default.and_then(parse).filter(|a| !a.is_empty()) else {
        return (mode & !(umask & 0o777), Vec::new());
    };
    let is_dir = mode & 0o170000 == 0o040000;
    let mut xattrs: Vec<Xattr> = Vec::new();
    if is_dir {
        xattrs.push((DEFAULT, encode(&acl)));
    }
    // posix_acl_create_masq: the ACL's owner, group (or mask) and other
    // entries are cut by the mode, and the mode by them.
    let mut m = mode & 0o7777;
    let has_mask = acl.iter().any(|e| e.tag == MASK);
    let mut extended = false;
    for e in acl.iter_mut() {
        match e.tag {
            USER_OBJ => {
                e.perm &= ((m >> 6) & 7) as u16;
                m = (m & !0o700) | ((e.perm as u32) << 6);
            }
            GROUP_OBJ if has_mask => {}
            GROUP_OBJ | MASK => {
                e.perm &= ((m >> 3) & 7) as u16;
                m = (m & !0o070) | ((e.perm as u32) << 3);
            }
            OTHER => {
                e.perm &= (m & 7) as u16;
                m = (m & !0o007) | e.perm as u32;
            }
            _ => extended = true,
        }
    }
    if extended || has_mask {
        xattrs.push((ACCESS, encode(&acl)));
    }
    ((mode & 0o170000) | m, xattrs)
}

/// The access ACL after chmod to `mode` (posix_acl_chmod): the owner,
/// mask (or owning group, without a mask) and other entries take the
/// mode's bits. None when `acl` is not an ACL.
pub fn chmod(acl: &[u8], mode: u32) -> Option<Vec<u8>> {
    let mut entries = parse(acl)?;
    let has_mask = entries.iter().any(|e| e.tag == MASK);
    for e in entries.iter_mut() {
        match e.tag {
            USER_OBJ => e.perm = ((mode >> 6) & 7) as u16,
            GROUP_OBJ if has_mask => {}
            GROUP_OBJ | MASK => e.perm = ((mode >> 3) & 7) as u16,
            OTHER => e.perm = (mode & 7) as u16,
            _ => {}
        }
    }
    Some(encode(&entries))
}

/// The permission bits an access ACL gives (posix_acl_equiv_mode): the
/// owner, mask (or owning group) and other entries; and whether the ACL
/// says no more than those bits (then it is not stored). None when `acl`
/// is not a valid ACL.
pub fn mode_of(acl: &[u8]) -> Option<(u32, bool)> {
    let entries = parse(acl)?;
    let (mut u, mut g, mut m, mut o) = (None, None, None, None);
    let mut extended = false;
    for e in &entries {
        match e.tag {
            USER_OBJ => u = Some(e.perm as u32 & 7),
            GROUP_OBJ => g = Some(e.perm as u32 & 7),
            MASK => m = Some(e.perm as u32 & 7),
            OTHER => o = Some(e.perm as u32 & 7),
            0x02 | 0x08 => extended = true,
            _ => return None,
        }
    }
    let (u, g, o) = (u?, g?, o?);
    let group = m.unwrap_or(g);
    Some(((u << 6) | (group << 3) | o, !extended && m.is_none()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acl(entries: &[(u16, u16, u32)]) -> Vec<u8> {
        encode(
            &entries
                .iter()
                .map(|&(tag, perm, id)| Entry { tag, perm, id })
                .collect::<Vec<_>>(),
        )
    }

    #[test]
    fn chmod_sets_owner_mask_and_other() {
        let a = acl(&[
            (USER_OBJ, 6, 0),
            (0x02, 7, 1000),
            (GROUP_OBJ, 5, 0),
            (MASK, 6, 0),
            (OTHER, 0, 0),
        ]);
        let want = acl(&[
            (USER_OBJ, 6, 0),
            (0x02, 7, 1000),
            (GROUP_OBJ, 5, 0),
            (MASK, 0, 0),
            (OTHER, 4, 0),
        ]);
        assert_eq!(chmod(&a, 0o604), Some(want));
    }

    #[test]
    fn no_default_acl_means_the_umask() {
        assert_eq!(inherit(0o100666, 0o022, None), (0o100644, vec![]));
    }

    #[test]
    fn a_minimal_default_acl_sets_the_mode_and_no_access_acl() {
        let d = acl(&[(USER_OBJ, 7, 0), (GROUP_OBJ, 5, 0), (OTHER, 0, 0)]);
        let (mode, x) = inherit(0o100666, 0o022, Some(&d));
        assert_eq!(mode, 0o100640);
        assert!(x.is_empty());
        let (mode, x) = inherit(0o040777, 0o077, Some(&d));
        assert_eq!(mode, 0o040750);
        assert_eq!(x, vec![(DEFAULT, d.clone())]);
    }

    #[test]
    fn an_extended_default_acl_is_inherited_masked_by_the_mode() {
        let d = acl(&[
            (USER_OBJ, 7, 0),
            (0x02, 7, 1000),
            (GROUP_OBJ, 5, 0),
            (MASK, 7, 0),
            (OTHER, 5, 0),
        ]);
        let (mode, x) = inherit(0o100644, 0o077, Some(&d));
        // The mask takes the group bits; the umask is not used.
        assert_eq!(mode, 0o100644);
        let want = acl(&[
            (USER_OBJ, 6, 0),
            (0x02, 7, 1000),
            (GROUP_OBJ, 5, 0),
            (MASK, 4, 0),
            (OTHER, 4, 0),
        ]);
        assert_eq!(x, vec![(ACCESS, want)]);
    }
}
