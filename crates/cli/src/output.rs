//! Output helpers: byte-exact name encoding and time formatting.

use ubtrfs_format::items::Timespec;

/// Percent-encodes bytes: 0x21..=0x7e except '%' as is, all else %XX. The
/// manifest format of the kernel-oracle tests uses exactly this.
pub fn pct(b: &[u8]) -> String {
    let mut s = String::with_capacity(b.len());
    for &c in b {
        if (0x21..=0x7e).contains(&c) && c != b'%' {
            s.push(c as char);
        } else {
            s.push_str(&format!("%{c:02X}"));
        }
    }
    s
}

pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Nanoseconds since the epoch.
pub fn ts_ns(t: &Timespec) -> i128 {
    t.sec as i128 * 1_000_000_000 + t.nsec as i128
}

/// "YYYY-MM-DD HH:MM:SS.nnnnnnnnn" in UTC.
pub fn ts_human(t: &Timespec) -> String {
    let days = t.sec.div_euclid(86400);
    let secs = t.sec.rem_euclid(86400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}.{:09}",
        secs / 3600,
        secs / 60 % 60,
        secs % 60,
        t.nsec
    )
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719468;
    let era = z.div_euclid(146097);
    let doe = z.rem_euclid(146097);
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// `ls -l` style mode string.
pub fn mode_string(mode: u32) -> String {
    let t = match mode & 0o170000 {
        0o040000 => 'd',
        0o120000 => 'l',
        0o020000 => 'c',
        0o060000 => 'b',
        0o010000 => 'p',
        0o140000 => 's',
        _ => '-',
    };
    let mut s = String::from(t);
    let bits = [
        (0o400, 'r'),
        (0o200, 'w'),
        (0o100, 'x'),
        (0o040, 'r'),
        (0o020, 'w'),
        (0o010, 'x'),
        (0o004, 'r'),
        (0o002, 'w'),
        (0o001, 'x'),
    ];
    for (i, (b, c)) in bits.iter().enumerate() {
        let mut ch = if mode & b != 0 { *c } else { '-' };
        let special = match i {
            2 => Some((0o4000, 's', 'S')),
            5 => Some((0o2000, 's', 'S')),
            8 => Some((0o1000, 't', 'T')),
            _ => None,
        };
        if let Some((sb, on, off)) = special {
            if mode & sb != 0 {
                ch = if mode & b != 0 { on } else { off };
            }
        }
        s.push(ch);
    }
    s
}

/// "YYYY-MM-DD HH:MM:SS +hhmm" in the local time zone, as btrfs-progs
/// prints a subvolume's times (strftime "%Y-%m-%d %X %z").
pub fn ts_local(sec: i64) -> String {
    // SAFETY: localtime_r fills `tm` from `t`; both live on this stack.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    let t: libc::time_t = sec;
    if unsafe { libc::localtime_r(&t, &mut tm) }.is_null() {
        return format!("@{sec}");
    }
    let off = tm.tm_gmtoff / 60;
    let sign = if off < 0 { '-' } else { '+' };
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02} {sign}{:02}{:02}",
        tm.tm_year + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec,
        off.abs() / 60,
        off.abs() % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn encodes() {
        assert_eq!(pct(b"a b%\xff/"), "a%20b%25%FF/");
        assert_eq!(mode_string(0o104755), "-rwsr-xr-x");
        assert_eq!(
            ts_human(&Timespec { sec: 0, nsec: 5 }),
            "1970-01-01 00:00:00.000000005"
        );
        assert_eq!(
            &ts_human(&Timespec {
                sec: 1_700_000_000,
                nsec: 0
            })[..10],
            "2023-11-14"
        );
    }
}
