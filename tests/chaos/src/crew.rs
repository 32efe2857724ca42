//! The worker processes: spawning Rust and SQL workers, following from their stdout which one
//! holds a lease, and replacing the ones that die.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::primitives::Role;
use crate::rng::Rng;

/// Which implementation a worker is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `dlock-chaos worker`, through `dlock_client`.
    Rust,
    /// `chaos/worker.py`, raw SQL through psycopg 3.
    Sql,
    /// `dlock-chaos primitive-worker` in one role (raw SQL through tokio-postgres).
    Primitive(Role),
}

impl Kind {
    /// The first letter of its workers' names.
    fn prefix(self) -> &'static str {
        match self {
            Kind::Rust => "r",
            Kind::Sql => "p",
            Kind::Primitive(Role::Shared) => "s",
            Kind::Primitive(Role::Semaphore) => "n",
            Kind::Primitive(Role::MultiKey) => "m",
            Kind::Primitive(Role::Election) => "e",
        }
    }

    /// Whether it writes to the fenced resource (the hot-key workers).
    pub fn writes(self) -> bool {
        matches!(self, Kind::Rust | Kind::Sql)
    }
}

/// The keys (or elections) of each primitive role, and the semaphores' size.
#[derive(Debug, Clone)]
pub struct PrimitiveKeys {
    pub shared: Vec<String>,
    pub semaphore: Vec<String>,
    pub multi_key: Vec<String>,
    pub elections: Vec<String>,
    pub max_holders: i32,
}

impl PrimitiveKeys {
    fn of(&self, role: Role) -> &[String] {
        match role {
            Role::Shared => &self.shared,
            Role::Semaphore => &self.semaphore,
            Role::MultiKey => &self.multi_key,
            Role::Election => &self.elections,
        }
    }
}

/// What every worker is told.
#[derive(Debug, Clone)]
pub struct Spec {
    pub dir: PathBuf,
    pub script: PathBuf,
    /// Host/port/user of dlock (the proxy) and of the resource, as libpq key=value words.
    pub dlock_conn: String,
    pub resource_conn: String,
    pub keys: Vec<String>,
    pub ttl: (f64, f64),
    pub wait: f64,
    /// The SQL workers' clocks are off by up to this many seconds, either way.
    pub skew: f64,
    /// Share of the SQL workers' iterations that take a session-bound lease (`ttl NULL`).
    pub bound_rate: f64,
    /// Fast-mode leases instead of durable ones.
    pub fast: bool,
    pub primitives: PrimitiveKeys,
    /// Several servers (`dlock-chaos shards`): the shard map file the Rust workers route with,
    /// and the longest of their short holds (many grants a second).
    pub shards: Option<(PathBuf, f64)>,
}

/// A role as `primitive-worker --role` spells it.
fn role_arg(role: Role) -> &'static str {
    match role {
        Role::Shared => "shared",
        Role::Semaphore => "semaphore",
        Role::MultiKey => "multi-key",
        Role::Election => "election",
    }
}

/// One running worker.
pub struct Worker {
    pub name: String,
    pub kind: Kind,
    pub pid: i32,
    child: Child,
    /// The lease it last said it holds, and whether it is session-bound.
    holding: Arc<Mutex<Option<(String, i64, bool)>>>,
}

impl Worker {
    pub fn holding(&self) -> Option<(String, i64)> {
        self.holding.lock().unwrap().as_ref().map(|(k, f, _)| (k.clone(), *f))
    }

    /// The lease it last said it holds if that one is session-bound.
    pub fn holding_bound(&self) -> Option<(String, i64)> {
        self.holding.lock().unwrap().as_ref().filter(|h| h.2).map(|(k, f, _)| (k.clone(), *f))
    }
}

/// All workers of the run.
pub struct Crew {
    pub workers: Vec<Worker>,
    spec: Spec,
    spawned: usize,
    rng: Rng,
    /// How many workers ran with a skewed clock, and the largest skew (seconds).
    pub skewed: u64,
    pub max_skew: f64,
}

impl Crew {
    pub fn new(spec: Spec, seed: u64) -> Crew {
        Crew { workers: Vec::new(), spec, spawned: 0, rng: Rng::new(seed), skewed: 0, max_skew: 0.0 }
    }

    /// Starts one more worker of `kind`.
    pub fn spawn(&mut self, kind: Kind) {
        let name = format!("{}{}", kind.prefix(), self.spawned);
        self.spawned += 1;
        let seed = self.rng.next_u64() >> 1;
        let skew = if kind == Kind::Sql { self.rng.range(-self.spec.skew, self.spec.skew) } else { 0.0 };
        if skew != 0.0 {
            self.skewed += 1;
            self.max_skew = self.max_skew.max(skew.abs());
        }
        let spec = &self.spec;
        let mut command = match kind {
            Kind::Rust => {
                let mut c = Command::new(std::env::current_exe().expect("own executable"));
                c.arg("worker");
                c
            }
            Kind::Sql => {
                // Debian's python3 has psycopg 3; a python3 earlier on PATH may not.
                let mut c = Command::new("/usr/bin/python3");
                c.arg(&spec.script).arg("--skew").arg(skew.to_string());
                c.arg("--bound-rate").arg(spec.bound_rate.to_string());
                c
            }
            Kind::Primitive(role) => {
                let mut c = Command::new(std::env::current_exe().expect("own executable"));
                c.arg("primitive-worker").arg("--role").arg(role_arg(role));
                c.arg("--max-holders").arg(spec.primitives.max_holders.to_string());
                c.arg("--keys").arg(spec.primitives.of(role).join(","));
                c
            }
        };
        if kind.writes() {
            command
                .arg("--resource-url")
                .arg(format!("{} application_name=chaos-{name}-data", spec.resource_conn))
                .arg("--keys")
                .arg(spec.keys.join(","))
                .args(spec.fast.then_some("--fast"));
        }
        if let (Kind::Rust, Some((file, short_hold_max))) = (kind, &spec.shards) {
            command
                .arg("--short-hold-max")
                .arg(short_hold_max.to_string())
                .arg("--long-hold-rate")
                .arg("0.03");
            // Half the workers read a changed map at once, the others go on with a stale one
            // for up to 8 s unless a server tells them.
            let reload_every = if self.rng.chance(0.5) { 0.3 } else { 8.0 };
            command.arg("--shards").arg(file).arg("--reload-every").arg(reload_every.to_string());
        }
        command
            .arg("--name")
            .arg(&name)
            .arg("--dlock-url")
            .arg(format!("{} application_name=chaos-{name}", spec.dlock_conn))
            .arg("--ttl-min")
            .arg(spec.ttl.0.to_string())
            .arg("--ttl-max")
            .arg(spec.ttl.1.to_string())
            .arg("--wait")
            .arg(spec.wait.to_string())
            .arg("--history")
            .arg(spec.dir.join(format!("{name}.jsonl")))
            .arg("--seed")
            .arg(seed.to_string())
            .env("RUST_LOG", "off")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(spec.dir.join(format!("{name}.stderr"))).expect("stderr file"))
            .kill_on_drop(true);
        let mut child = command.spawn().expect("spawn a worker");
        let pid = child.id().expect("worker pid") as i32;
        let holding = Arc::new(Mutex::new(None));
        let stdout = child.stdout.take().expect("worker stdout");
        let seen = holding.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let mut words = line.split_whitespace();
                *seen.lock().unwrap() = match (words.next(), words.next(), words.next()) {
                    (Some("hold"), Some(key), Some(fence)) => {
                        let bound = words.next() == Some("bound");
                        fence.parse().ok().map(|f| (key.to_string(), f, bound))
                    }
                    _ => None,
                };
            }
        });
        self.workers.push(Worker { name, kind, pid, child, holding });
    }

    /// A worker that holds a lease right now, if any; else any worker.
    pub fn pick_holder(&mut self) -> Option<usize> {
        let holders: Vec<usize> =
            (0..self.workers.len()).filter(|&i| self.workers[i].holding().is_some()).collect();
        if !holders.is_empty() {
            return Some(holders[self.rng.below(holders.len())]);
        }
        (!self.workers.is_empty()).then(|| self.rng.below(self.workers.len()))
    }

    /// Replaces every worker that has exited (killed or crashed); returns the names of those
    /// that exited without being killed by us.
    pub fn replace_exited(&mut self, killed: &[String]) -> Vec<String> {
        let mut unexpected = Vec::new();
        let mut i = 0;
        while i < self.workers.len() {
            if let Ok(Some(_)) = self.workers[i].child.try_wait() {
                let worker = self.workers.remove(i);
                if !killed.contains(&worker.name) {
                    unexpected.push(worker.name.clone());
                }
                self.spawn(worker.kind);
            } else {
                i += 1;
            }
        }
        unexpected
    }

    /// Kills every worker (the run is over) and waits for them.
    pub async fn kill_all(&mut self) {
        for worker in &mut self.workers {
            let _ = worker.child.start_kill();
            // A stopped process dies of SIGKILL too, but resume it anyway for a clean exit.
            // SAFETY: kill(2) on a child we spawned.
            unsafe { libc::kill(worker.pid, libc::SIGCONT) };
            let _ = worker.child.wait().await;
        }
    }
}
