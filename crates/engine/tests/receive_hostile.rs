//! Hostile send streams: a stream using every command is received into an
//! in-memory image, then seeded mutations of it (attribute values set to
//! extremes or flipped, lengths changed, commands swapped or dropped, the
//! CRC recomputed so the commands reach the receiver) must end in Ok or
//! an error, never a panic (also in debug builds: overflow checks), and the
//! image left behind must pass the engine's check.
//!
//! UBTRFS_HOSTILE_STREAMS=N (default 150).

use std::sync::Arc;
use ubtrfs_engine::io::dev::{BlockDev, MemDev};
use ubtrfs_engine::receive::{receive, ReceiveOptions};
use ubtrfs_engine::tools::check::check_dev;
use ubtrfs_engine::tx::Trans;
use ubtrfs_format::items::Timespec;
use ubtrfs_format::send_stream::{attr, cmd};

mod stream_build;
use stream_build::{encode, mem_fs, write_cmd, Cmd};

fn u64a(t: u16, v: u64) -> (u16, Vec<u8>) {
    (t, v.to_le_bytes().to_vec())
}

fn b(t: u16, v: &[u8]) -> (u16, Vec<u8>) {
    (t, v.to_vec())
}

fn ts(t: u16) -> (u16, Vec<u8>) {
    let mut v = 1_700_000_000i64.to_le_bytes().to_vec();
    v.extend_from_slice(&5u32.to_le_bytes());
    (t, v)
}

/// A stream that uses every command the receiver applies.
fn base() -> Vec<Cmd> {
    let data: Vec<u8> = (0..70_000u32).map(|i| (i / 300) as u8).collect();
    let packed = ubtrfs_format::compress::compress(3, 1, &data[..65536], 4096)
        .unwrap()
        .unwrap();
    vec![
        (
            cmd::SUBVOL,
            vec![
                b(attr::PATH, b"sub"),
                b(attr::UUID, &[9; 16]),
                u64a(attr::CTRANSID, 7),
            ],
        ),
        (cmd::MKDIR, vec![b(attr::PATH, b"d")]),
        (cmd::MKFILE, vec![b(attr::PATH, b"d/f")]),
        write_cmd(b"d/f", 0, &data[..40_000]),
        write_cmd(b"d/f", 40_000, &data[40_000..]),
        (cmd::MKFILE, vec![b(attr::PATH, b"g")]),
        (
            cmd::CLONE,
            vec![
                b(attr::PATH, b"g"),
                u64a(attr::FILE_OFFSET, 4096),
                u64a(attr::CLONE_LEN, 8192),
                b(attr::CLONE_UUID, &[9; 16]),
                u64a(attr::CLONE_CTRANSID, 7),
                b(attr::CLONE_PATH, b"d/f"),
                u64a(attr::CLONE_OFFSET, 16384),
            ],
        ),
        (
            cmd::ENCODED_WRITE,
            vec![
                b(attr::PATH, b"g"),
                u64a(attr::FILE_OFFSET, 65536),
                u64a(attr::UNENCODED_FILE_LEN, 65536),
                u64a(attr::UNENCODED_LEN, 65536),
                u64a(attr::UNENCODED_OFFSET, 0),
                (attr::COMPRESSION, 2u32.to_le_bytes().to_vec()),
                b(attr::DATA, &packed),
            ],
        ),
        (
            cmd::FALLOCATE,
            vec![
                b(attr::PATH, b"g"),
                (attr::FALLOCATE_MODE, 1u32.to_le_bytes().to_vec()),
                u64a(attr::FILE_OFFSET, 200_000),
                u64a(attr::SIZE, 50_000),
            ],
        ),
        (
            cmd::FALLOCATE,
            vec![
                b(attr::PATH, b"g"),
                (attr::FALLOCATE_MODE, 3u32.to_le_bytes().to_vec()),
                u64a(attr::FILE_OFFSET, 5000),
                u64a(attr::SIZE, 9000),
            ],
        ),
        (
            cmd::TRUNCATE,
            vec![b(attr::PATH, b"g"), u64a(attr::SIZE, 150_001)],
        ),
        (
            cmd::SET_XATTR,
            vec![
                b(attr::PATH, b"g"),
                b(attr::XATTR_NAME, b"user.x"),
                b(attr::XATTR_DATA, b"v"),
            ],
        ),
        (
            cmd::SET_XATTR,
            vec![
                b(attr::PATH, b"d"),
                b(attr::XATTR_NAME, b"btrfs.compression"),
                b(attr::XATTR_DATA, b"zstd"),
            ],
        ),
        (cmd::MKFILE, vec![b(attr::PATH, b"d/c")]),
        write_cmd(b"d/c", 0, &data[..20_000]),
        (
            cmd::REMOVE_XATTR,
            vec![b(attr::PATH, b"g"), b(attr::XATTR_NAME, b"user.x")],
        ),
        (
            cmd::SYMLINK,
            vec![b(attr::PATH, b"s"), b(attr::PATH_LINK, b"d/f")],
        ),
        (
            cmd::MKNOD,
            vec![
                b(attr::PATH, b"n"),
                u64a(attr::MODE, 0o20644),
                u64a(attr::RDEV, 0x0801),
            ],
        ),
        (cmd::MKFIFO, vec![b(attr::PATH, b"p")]),
        (cmd::MKSOCK, vec![b(attr::PATH, b"k")]),
        (
            cmd::LINK,
            vec![b(attr::PATH, b"d/h"), b(attr::PATH_LINK, b"d/f")],
        ),
        (
            cmd::RENAME,
            vec![b(attr::PATH, b"g"), b(attr::PATH_TO, b"d/g")],
        ),
        (cmd::UNLINK, vec![b(attr::PATH, b"p")]),
        (cmd::MKDIR, vec![b(attr::PATH, b"e")]),
        (cmd::RMDIR, vec![b(attr::PATH, b"e")]),
        (
            cmd::CHMOD,
            vec![b(attr::PATH, b"d/f"), u64a(attr::MODE, 0o4755)],
        ),
        (
            cmd::CHOWN,
            vec![
                b(attr::PATH, b"d/f"),
                u64a(attr::UID, 1000),
                u64a(attr::GID, 100),
            ],
        ),
        (
            cmd::UTIMES,
            vec![
                b(attr::PATH, b"d/f"),
                ts(attr::ATIME),
                ts(attr::MTIME),
                ts(attr::CTIME),
            ],
        ),
        (
            cmd::UPDATE_EXTENT,
            vec![
                b(attr::PATH, b"d/f"),
                u64a(attr::FILE_OFFSET, 0),
                u64a(attr::SIZE, 10),
            ],
        ),
        (cmd::END, vec![]),
    ]
}

mod memcheck;
use memcheck::Rng;

const EXTREMES: [u64; 10] = [
    0,
    1,
    4095,
    4097,
    1 << 32,
    (1 << 63) - 1,
    1 << 63,
    u64::MAX,
    u64::MAX - 4095,
    128 * 1024 + 1,
];

fn mutate(cmds: &mut Vec<Cmd>, rng: &mut Rng) -> String {
    let i = rng.below(cmds.len() as u64) as usize;
    let name = format!("command {i} ({})", cmds[i].0);
    match rng.below(6) {
        0 if !cmds[i].1.is_empty() => {
            let j = rng.below(cmds[i].1.len() as u64) as usize;
            let v = &mut cmds[i].1[j].1;
            if v.len() == 8 || v.len() == 4 {
                let x = EXTREMES[rng.below(EXTREMES.len() as u64) as usize];
                let n = v.len();
                v.copy_from_slice(&x.to_le_bytes()[..n]);
                format!("{name}: attribute {} = {x}", cmds[i].1[j].0)
            } else if !v.is_empty() {
                let k = rng.below(v.len() as u64) as usize;
                v[k] ^= 1 << rng.below(8);
                format!("{name}: attribute {} byte {k} flipped", cmds[i].1[j].0)
            } else {
                String::from("nothing")
            }
        }
        1 if !cmds[i].1.is_empty() => {
            let j = rng.below(cmds[i].1.len() as u64) as usize;
            let v = &mut cmds[i].1[j].1;
            let n = rng.below(v.len() as u64 + 3) as usize;
            v.resize(n, 0x2f);
            format!("{name}: attribute {} resized to {n}", cmds[i].1[j].0)
        }
        2 if !cmds[i].1.is_empty() => {
            let j = rng.below(cmds[i].1.len() as u64) as usize;
            cmds[i].1.remove(j);
            format!("{name}: attribute removed")
        }
        3 => {
            let c = 1 + rng.below(27) as u16;
            cmds[i].0 = c;
            format!("{name}: command number set to {c}")
        }
        4 => {
            cmds.remove(i);
            format!("{name}: removed")
        }
        _ => {
            let j = rng.below(cmds.len() as u64) as usize;
            cmds.swap(i, j);
            format!("{name}: swapped with {j}")
        }
    }
}

#[test]
fn hostile_streams_end_in_an_error_and_a_valid_image() {
    let n = memcheck::env_u64("UBTRFS_HOSTILE_STREAMS").unwrap_or(150);
    // The stream as made applies cleanly.
    let (dev, mut t) = mem_fs(0x31);
    let now = Timespec { sec: 1, nsec: 0 };
    let ro = |honor_end| ReceiveOptions {
        honor_end,
        now,
        ..ReceiveOptions::new()
    };
    receive(&mut t, "/", &encode(&base())[..], ro(false)).expect("the base stream");
    drop(t);
    check_dev(dev.clone()).expect("check after the base stream");
    let pristine = MemDev::from_bytes(dev.snapshot());
    let mut errors = 0;
    for seed in 1..=n {
        let mut rng = Rng::new(seed);
        let mut cmds = base();
        let mut what = Vec::new();
        for _ in 0..1 + rng.below(3) {
            what.push(mutate(&mut cmds, &mut rng));
        }
        let dev = Arc::new(MemDev::from_bytes(pristine.snapshot()));
        let mut t = Trans::open_dev(vec![dev.clone() as Arc<dyn BlockDev>], 16 << 20).unwrap();
        // Receive under another name (the base one exists).
        for c in cmds.iter_mut() {
            if c.0 == cmd::SUBVOL {
                for a in c.1.iter_mut() {
                    if a.0 == attr::PATH && a.1 == b"sub" {
                        a.1 = b"sub2".to_vec();
                    }
                }
            }
        }
        let r = receive(&mut t, "/", &encode(&cmds)[..], ro(true));
        if r.is_err() {
            errors += 1;
        }
        drop(t);
        if let Err(e) = check_dev(dev.clone()) {
            panic!("seed {seed} ({what:?}): receive gave {r:?}, then check: {e}");
        }
    }
    eprintln!("{n} hostile streams, {errors} refused with an error, none panicked");
}
