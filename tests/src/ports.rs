//! Free TCP ports for the servers the tests start (pgbouncer, standbys; `cluster.sh` picks its
//! own the same way).

use std::net::TcpListener;

/// A port on 127.0.0.1 that nobody listens on right now, below the kernel's ephemeral range
/// (32768-60999 by default): a port the kernel hands out (`bind` to port 0) is soon the source
/// port of some outgoing connection of the tests, which then holds it when the server binds.
pub fn free_port() -> u16 {
    (0..500)
        .map(|_| fastrand::u16(20_000..32_000))
        .find(|&port| TcpListener::bind(("127.0.0.1", port)).is_ok())
        .expect("a free port between 20000 and 32000")
}
