//! The arguments of `dlock-chaos run`: how big and how hostile a run is.

/// How big and how hostile a run is.
#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    /// How long the workers run, in seconds.
    #[arg(long, default_value_t = 300)]
    pub seconds: u64,
    /// Workers through the Rust client.
    #[arg(long, default_value_t = 3)]
    pub rust_workers: usize,
    /// Workers in raw SQL (Python, psycopg 3).
    #[arg(long, default_value_t = 3)]
    pub sql_workers: usize,
    /// Number of hot keys.
    #[arg(long, default_value_t = 3)]
    pub keys: usize,
    /// Lease ttl range, in seconds.
    #[arg(long, default_value_t = 1.0)]
    pub ttl_min: f64,
    #[arg(long, default_value_t = 2.0)]
    pub ttl_max: f64,
    /// Seconds between two faults (kill -9, SIGSTOP, pg_terminate_backend, in turn).
    #[arg(long, default_value_t = 3.0)]
    pub fault_every: f64,
    /// Seconds between two crash restarts of the server (0: none).
    #[arg(long, default_value_t = 45.0)]
    pub crash_every: f64,
    /// Probability that the proxy cuts a connection right after forwarding a request.
    #[arg(long, default_value_t = 0.02)]
    pub cut_rate: f64,
    /// The SQL workers' clocks are off by up to this many seconds.
    #[arg(long, default_value_t = 3600.0)]
    pub skew: f64,
    /// Start the server with `shared_preload_libraries = 'dlock'` (direct hand-off to the
    /// server-side waiters of the SQL workers).
    #[arg(long)]
    pub preload: bool,
    /// Self-test: also force-release hot keys (and, with `--primitives`, every other time a key
    /// or election of theirs) under their holders (dlock_force_release), which takes leases away
    /// early; the checker must then report violations and the run fail.
    #[arg(long)]
    pub sabotage: bool,
    /// Failover instead of crash restarts: dlock's cluster is a primary with a synchronous
    /// streaming standby (`synchronous_standby_names = '*'`, `synchronous_commit = on`); at
    /// `--failover-at` of the run the primary stops immediately, the standby is promoted and the
    /// proxy points at it. The resource then lives on a third cluster that does not fail over.
    #[arg(long)]
    pub failover: bool,
    /// When the failover happens, as a share of `--seconds`.
    #[arg(long, default_value_t = 0.5)]
    pub failover_at: f64,
    /// Share of the SQL workers' iterations that take a session-bound lease (`ttl NULL`).
    #[arg(long, default_value_t = 0.25)]
    pub bound_rate: f64,
    /// Fast mode: every worker takes fast-mode leases (`dlock_fast_*`, shared memory, no WAL)
    /// instead of durable ones. Implies `--preload`; `dlock.fast_max_ttl` is the longest ttl
    /// (rounded up), so each crash restart holds every key back that long; no session-bound
    /// leases (fast mode has none).
    #[arg(long)]
    pub fast: bool,
    /// Workers of the version 2 primitives per role, beside the hot-key workers: read-write
    /// locks, semaphores, multi-key grants (twice as many) and elections (0: none); durable
    /// leases, also with `--fast`.
    #[arg(long, default_value_t = 0)]
    pub primitives: usize,
    /// The semaphores' size.
    #[arg(long, default_value_t = 3)]
    pub max_holders: i32,
    /// Seed of every random choice of the run (faults, keys, ttls, holds, cuts).
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
}
