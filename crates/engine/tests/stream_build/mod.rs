//! Send streams built command by command for the receive tests.

use ubtrfs_engine::send::stream::StreamWriter;
use ubtrfs_format::send_stream::attr;

/// A command and its attributes (type, value), in stream order.
pub type Cmd = (u16, Vec<(u16, Vec<u8>)>);

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
