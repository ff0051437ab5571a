//! A Redis server of a test's own (Debian's `redis-server`, which `scripts/setup` installs) on
//! a loopback port, with nothing saved to disk; killed on drop.

use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running redis-server. See the [module documentation](self).
pub struct RedisServer {
    child: Child,
    port: u16,
}

impl RedisServer {
    /// Starts one on `port` (a free one when 0) and waits until it listens. `None` when
    /// redis-server cannot start, which fails the test instead when `CI` is set.
    pub fn start(port: u16) -> Option<RedisServer> {
        let port = match port {
            0 => TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("a free loopback port")
                .port(),
            p => p,
        };
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        let child = match child {
            Ok(c) => c,
            Err(e) => {
                assert!(
                    std::env::var_os("CI").is_none(),
                    "redis-server could not start ({e}): scripts/setup installs it"
                );
                eprintln!("skipped: redis-server could not start ({e})");
                return None;
            }
        };
        let server = RedisServer { child, port };
        let end = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < end,
                "redis-server did not listen on {port}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(server)
    }

    /// Its port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Its URL (database 0).
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// What redis-cli prints for `args` (one command), trimmed.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-p", &self.port.to_string()])
            .args(args)
            .output()
            .expect("redis-cli comes with redis-server");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// Calls of `command` the server answered so far (`INFO commandstats`, through
    /// redis-cli, which comes with it).
    pub fn calls(&self, command: &str) -> u64 {
        let out = Command::new("redis-cli")
            .args(["-p", &self.port.to_string(), "INFO", "commandstats"])
            .output()
            .expect("redis-cli comes with redis-server");
        let text = String::from_utf8_lossy(&out.stdout);
        text.lines()
            .find_map(|l| {
                let rest = l.strip_prefix(&format!("cmdstat_{command}:calls="))?;
                rest.split(',').next()?.parse().ok()
            })
            .unwrap_or(0)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
