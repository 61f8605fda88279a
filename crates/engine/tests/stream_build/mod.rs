//! Send streams built command by command for the receive tests.

use std::sync::Arc;
use ubtrfs_engine::io::dev::MemDev;
use ubtrfs_engine::mkfs::{make, MkfsOptions};
use ubtrfs_engine::send::stream::StreamWriter;
use ubtrfs_engine::tx::Trans;
use ubtrfs_format::send_stream::{attr, cmd};

/// A command and its attributes (type, value), in stream order.
pub type Cmd = (u16, Vec<(u16, Vec<u8>)>);

/// A WRITE of `data` at `off` into `path`.
pub fn write_cmd(path: &[u8], off: u64, data: &[u8]) -> Cmd {
    (
        cmd::WRITE,
        vec![
            (attr::PATH, path.to_vec()),
            (attr::FILE_OFFSET, off.to_le_bytes().to_vec()),
            (attr::DATA, data.to_vec()),
        ],
    )
}

/// A new filesystem (nodesize 4096, every fsid byte `fsid`) on a 120 MiB
/// memory device, and a transaction on it.
pub fn mem_fs(fsid: u8) -> (Arc<MemDev>, Trans) {
    let opts = MkfsOptions {
        fsid: Some([fsid; 16]),
        nodesize: 4096,
        ..Default::default()
    };
    let dev = Arc::new(MemDev::new(120 << 20));
    let t = make(vec![("mem".into(), dev.clone())], &opts).unwrap();
    (dev, t)
}

/// The v2 stream of `cmds` (DATA attributes written as the stream's
/// trailing data, as the kernel writes them).
pub fn encode(cmds: &[Cmd]) -> Vec<u8> {
    let mut out = Vec::new();
    {
        let mut w = StreamWriter::new(Box::new(&mut out), 2);
        w.header().unwrap();
        for (c, attrs) in cmds {
            w.begin(*c);
            for (t, v) in attrs {
                if *t == attr::DATA {
                    w.put_data(v);
                } else {
                    w.put(*t, v);
                }
            }
            w.finish().unwrap();
        }
    }
    out
}
