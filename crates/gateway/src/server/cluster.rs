//! A cluster of gateways sharing one directory in Redis (or Valkey): `cluster_redis`.
//!
//! - **Nodes** register under `secrelay:node:<name>` with a lease (`cluster_lease_secs`),
//!   renewed every third of it with what the node carries (participants, rooms, load): a node
//!   that dies drops out when its lease runs out.
//! - **Rooms** are owned by one node each, under `secrelay:room:<name>`. The key has no lease of
//!   its own: it is written when the room comes and released when it goes, so a steady room
//!   costs the directory no write; it is worth what its owner's lease is worth (a room whose
//!   owner is gone is nobody's, and is claimed again, and swept). A new room goes to the live
//!   node with the fewest participants (this one on a tie), claimed atomically (a Lua script:
//!   two nodes that place the same new room at once agree on one owner).
//! - **Signaling** that starts a session (WHIP, WHEP, a room join, a telephony leg over HTTP)
//!   arriving at a node that does not own the room is answered `307 Temporary Redirect` to the
//!   owner's URL (`cluster_url`), the same path: WHIP and WHEP clients follow it (RFC 9725
//!   §4.5), and the session's resource lives on the owner from then on.
//! - **Redis down or restarted**: the directory is a cache of what the nodes know, not the
//!   truth of any call: while it does not answer, a node serves every room locally (counted);
//!   the connection is made again in the background, and the next renewal writes the node's
//!   record and its rooms again. No session depends on Redis once it is made.
//!
//! - **Calls that survive their node** (`cluster_state_key` or `cluster_state_clear`): each
//!   telephony call's state ([`super::call_state`]) is written, sealed, to the node's hash
//!   `secrelay:calls:<name>` when the call changes, and removed when it ends. A node that lists
//!   another in `cluster_takeover` watches its record; when it is gone (its lease ran out, or
//!   it shut down: a clean stop leaves its hash), the node moves the other's hash to its own
//!   and its calls' rooms to itself (one Lua script that checks the record: two nodes never
//!   both take a call), and makes each call again ([`super::ng`]). A node that starts with
//!   states of its own left in the directory takes those calls back (a restart).
//!
//! Every Redis call has a deadline ([`CALL_TIMEOUT`]): a directory that does not answer never
//! holds a request longer than that.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::aio::ConnectionManager;
use redis::AsyncCommands as _;
use serde::{Deserialize, Serialize};

use super::call_state::{CallState, Sealer};
use super::Gateway;

/// Every key of the directory starts with this.
const PREFIX: &str = "secrelay:";
/// The longest a Redis call may take before the node goes on without it.
const CALL_TIMEOUT: Duration = Duration::from_secs(1);

/// Writes a room as its holder's when it is free or already the holder's; 1 if it was, 0 if
/// another holds it.
const HOLD: &str = "local v = redis.call('GET', KEYS[1]) \
    if v == false or v == ARGV[1] then \
      redis.call('SET', KEYS[1], ARGV[1]) return 1 end \
    return 0";
/// Claims a room for `ARGV[1]` when it is free (or still names `ARGV[2]`, an owner whose
/// lease ran out); the owner after the call.
const CLAIM: &str = "local v = redis.call('GET', KEYS[1]) \
    if v == false or v == ARGV[2] then \
      redis.call('SET', KEYS[1], ARGV[1]) return ARGV[1] end \
    return v";
/// How long the calls' states of a node that shut down cleanly stay for a standby or its next
/// start to take.
const LEFT_CALLS_KEPT: Duration = Duration::from_secs(3600);
/// How many renewals apart a node looks for rooms whose owner is gone (and for rooms that
/// name it but that it does not hold).
const SWEEP_EVERY: u64 = 10;
/// Moves a node's call states (KEYS[1]) to the taker's hash (KEYS[2]) and each call's room
/// (`ARGV[1]` + call-id) to the taker (`ARGV[2]`), unless the node's record (KEYS[3]) is there
/// (it is alive, or came back): the states moved, as field, value, …. A node taking its own
/// calls back (KEYS[1] is KEYS[2], its record just written) keeps its hash as it is.
const TAKE: &str =
    "if KEYS[1] ~= KEYS[2] and redis.call('EXISTS', KEYS[3]) == 1 then return {} end \
    local all = redis.call('HGETALL', KEYS[1]) \
    for i = 1, #all, 2 do \
      redis.call('SET', ARGV[1] .. all[i], ARGV[2]) \
      if KEYS[1] ~= KEYS[2] then redis.call('HSET', KEYS[2], all[i], all[i + 1]) end end \
    if KEYS[1] ~= KEYS[2] then redis.call('DEL', KEYS[1]) else redis.call('PERSIST', KEYS[1]) end \
    return all";
/// Releases a key its holder no longer needs (another's is left alone).
const RELEASE: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then \
      return redis.call('DEL', KEYS[1]) end \
    return 0";

/// What a node publishes of itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeRecord {
    /// Its name (`cluster_node`).
    pub node: String,
    /// Where its signaling is reached (`cluster_url`).
    pub url: String,
    /// Participants on it now.
    pub participants: u64,
    /// Rooms it owns now.
    pub rooms: u64,
    /// Its busiest worker's load (0 to 1).
    pub load: f64,
    /// Where its ng socket takes the commands of the calls it owns (`cluster_ng`), if it has
    /// one.
    #[serde(default)]
    pub ng: Option<SocketAddr>,
    /// It is being drained: no new room goes to it (its rooms stay until they end).
    #[serde(default)]
    pub draining: bool,
    /// It is a hot standby (`cluster_standby`): no new room goes to it while a node that is
    /// neither draining nor a standby lives.
    #[serde(default)]
    pub standby: bool,
    /// Where its pipes to other nodes listen (`cluster_pipe`), if it has them.
    #[serde(default)]
    pub pipe: Option<SocketAddr>,
    /// When it registered (Unix seconds).
    pub since: u64,
}

/// A node as `/api/cluster` shows it: its record and what is left of its lease.
#[derive(Debug, Clone, Serialize)]
pub struct NodeView {
    #[serde(flatten)]
    pub record: NodeRecord,
    /// Milliseconds until its lease runs out (it renews every third of the lease).
    pub lease_ms: i64,
}

/// The cluster as one node sees it (`GET /api/cluster`).
#[derive(Debug, Clone, Serialize)]
pub struct ClusterView {
    /// This node.
    pub node: String,
    /// Whether the directory answered its last call.
    pub directory_up: bool,
    /// The live nodes, by name.
    pub nodes: Vec<NodeView>,
    /// Each room's owner, by room.
    pub rooms: BTreeMap<String, String>,
    /// This node's links to other nodes (`cluster_pipe`), by the other node's name.
    pub links: Vec<LinkView>,
}

/// A link of this node's to another (`GET /api/cluster`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LinkView {
    /// The other node.
    pub node: String,
    /// Made by this node (for its viewers of the other's rooms), or by the other.
    pub made_here: bool,
    /// Seconds it has been up.
    pub up_secs: u64,
}

/// Where a room's sessions are made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// On this node.
    Here,
    /// On another node, whose signaling is at `url`.
    Elsewhere {
        /// Its name.
        node: String,
        /// Its `cluster_url`.
        url: String,
        /// Its ng socket, if it has one (`cluster_ng`).
        ng: Option<SocketAddr>,
        /// Where its node pipes listen (`cluster_pipe`), if it has them.
        pipe: Option<SocketAddr>,
    },
}

/// This node's membership of the cluster. See the [module documentation](self).
pub struct Cluster {
    node: String,
    url: String,
    ng: Option<SocketAddr>,
    pipe: Option<SocketAddr>,
    lease: Duration,
    client: redis::Client,
    /// The connection, made on the runtime at first use (and again whenever it is lost).
    redis: tokio::sync::OnceCell<ConnectionManager>,
    gateway: Arc<Gateway>,
    /// Rooms placed here whose first participant may not be in yet (kept a lease).
    claimed: Mutex<HashMap<String, Instant>>,
    /// The rooms written as this node's (those gone since are released).
    held: Mutex<Vec<String>>,
    /// Rooms the directory gives this node that it does not hold (a claim on its behalf whose
    /// client never came), and the sweep that first saw each: released at the next.
    orphans: Mutex<HashMap<String, u64>>,
    /// Renewals so far.
    renewals: AtomicU64,
    since: u64,
    up: AtomicBool,
    /// Drained ([`Cluster::set_draining`]): new rooms go to other nodes.
    draining: AtomicBool,
    /// A hot standby (`cluster_standby`): new rooms go to the other nodes that are not.
    standby: bool,
    /// Redis calls that failed or ran out of time.
    pub errors: AtomicU64,
    /// Offers redirected and ng commands forwarded to the owner.
    pub redirects: AtomicU64,
    /// The calls kept for a standby, if this node keeps them.
    calls: Option<KeptCalls>,
    /// Call states written to the directory.
    pub call_writes: AtomicU64,
    /// Calls taken over from a node that died, and those that could not be made again.
    pub calls_taken_over: AtomicU64,
    pub takeover_failures: AtomicU64,
}

/// Which calls a node keeps for a standby, and takes over. See the [module
/// documentation](self).
#[derive(Debug, Default)]
pub(crate) struct Keeping {
    /// How states are written (`None`: calls are not kept).
    pub sealer: Option<Sealer>,
    /// The nodes whose calls this node takes over when their lease runs out.
    pub takeover_of: Vec<String>,
}

/// The calls' states this node keeps, and its takeovers.
#[derive(Debug)]
struct KeptCalls {
    sealer: Sealer,
    takeover_of: Vec<String>,
    /// Each kept call's state as last written (written again whole when the directory
    /// restarted empty).
    states: Mutex<HashMap<String, String>>,
    /// Calls whose state changed, to the writer.
    changed: tokio::sync::mpsc::UnboundedSender<String>,
    changed_rx: Mutex<Option<tokio::sync::mpsc::UnboundedReceiver<String>>>,
    /// Calls taken over, to the ng server that makes them again.
    taken: tokio::sync::mpsc::UnboundedSender<Vec<CallState>>,
    /// Hand-over requests (from the HTTP API), to the ng server that holds the calls.
    handover: tokio::sync::mpsc::UnboundedSender<(
        String,
        tokio::sync::oneshot::Sender<Result<usize, HandoverError>>,
    )>,
    handover_rx: Mutex<Option<HandoverRequests>>,
    /// The calls a previous life of this node left were taken back (once, at start).
    reclaimed: AtomicBool,
    /// Shutting down: no state is written any more ([`Cluster::stop_keeping`]).
    stopped: AtomicBool,
    taken_rx: Mutex<Option<tokio::sync::mpsc::UnboundedReceiver<Vec<CallState>>>>,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("node", &self.node)
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

fn node_key(node: &str) -> String {
    format!("{PREFIX}node:{node}")
}

fn room_key(room: &str) -> String {
    format!("{PREFIX}room:{room}")
}

fn calls_key(node: &str) -> String {
    format!("{PREFIX}calls:{node}")
}

fn handover_key(node: &str) -> String {
    format!("{PREFIX}handover:{node}")
}

/// Where calls being taken come from (for the log).
enum Whence<'a> {
    /// This node's previous life.
    Restart,
    /// A node that is gone.
    Gone(&'a str),
    /// A live node that handed them over.
    Handed,
}

/// Why the cluster's directory did not answer a call.
#[derive(Debug, Clone)]
pub enum DirectoryError {
    /// No answer within the deadline.
    Timeout,
    /// The connection or the command failed.
    Redis(Arc<redis::RedisError>),
    /// This node's record did not encode.
    Encode(Arc<serde_json::Error>),
}

impl DirectoryError {
    /// Whether the call certainly changed nothing: Redis refused it (an error reply: out of
    /// memory, a read-only replica), or nothing reached it. A timeout or a connection lost on
    /// the way leaves it unknown.
    fn changed_nothing(&self) -> bool {
        match self {
            DirectoryError::Timeout => false,
            DirectoryError::Redis(e) => {
                !(e.is_io_error() || e.is_timeout()) || e.is_connection_refusal()
            }
            DirectoryError::Encode(_) => true,
        }
    }
}

impl From<redis::RedisError> for DirectoryError {
    fn from(e: redis::RedisError) -> DirectoryError {
        DirectoryError::Redis(Arc::new(e))
    }
}

impl std::fmt::Display for DirectoryError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DirectoryError::Timeout => write!(f, "no answer within {CALL_TIMEOUT:?}"),
            DirectoryError::Redis(e) => e.fmt(f),
            DirectoryError::Encode(e) => write!(f, "the node's record: {e}"),
        }
    }
}

impl std::error::Error for DirectoryError {}

/// Why a node's calls cannot be handed over.
#[derive(Debug, Clone)]
pub enum HandoverError {
    /// The node keeps no telephony calls (no `cluster_state_key`, or no ng socket).
    KeepsNoCalls,
    /// The node asked for cannot take them (why).
    NotAReceiver(String),
    /// The directory did not answer.
    Directory(DirectoryError),
}

impl std::fmt::Display for HandoverError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HandoverError::KeepsNoCalls => f.write_str(
                "this node keeps no telephony calls to hand over (it needs cluster_state_key or cluster_state_clear, and an ng socket)",
            ),
            HandoverError::NotAReceiver(why) => f.write_str(why),
            HandoverError::Directory(e) => write!(f, "the cluster's directory does not answer: {e}"),
        }
    }
}

/// Hand-over requests to the ng server: the node to hand the calls to, and where the answer
/// goes.
pub(crate) type HandoverRequests = tokio::sync::mpsc::UnboundedReceiver<(
    String,
    tokio::sync::oneshot::Sender<Result<usize, HandoverError>>,
)>;

/// The directory's name for what a room of this node belongs to: an ng call's sections
/// (`call:ID:N`) all belong to its call (`call:ID`), which is what a node owns; any other room
/// is its own.
fn owned_as(room: String) -> String {
    match room
        .strip_prefix("call:")
        .and_then(|_| room.rsplit_once(':'))
    {
        Some((call, _)) if call.len() > "call:".len() => call.to_owned(),
        _ => room,
    }
}

/// Another node's rooms' placement, by its record.
fn elsewhere(rec: NodeRecord) -> Placement {
    Placement::Elsewhere {
        node: rec.node,
        url: rec.url,
        ng: rec.ng,
        pipe: rec.pipe,
    }
}

/// A Redis call with the deadline.
async fn call<T>(
    f: impl std::future::Future<Output = redis::RedisResult<T>>,
) -> Result<T, DirectoryError> {
    match tokio::time::timeout(CALL_TIMEOUT, f).await {
        Ok(r) => Ok(r?),
        Err(_) => Err(DirectoryError::Timeout),
    }
}

impl Cluster {
    /// Joins the cluster whose directory is at `redis_url` as `node`, reached at `url`, with
    /// leases of `lease`. The connection is made on first use (and again whenever it is lost):
    /// Err only for a URL that is no Redis URL.
    pub fn new(
        redis_url: &str,
        (node, url, ng, pipe): (String, String, Option<SocketAddr>, Option<SocketAddr>),
        lease: Duration,
        gateway: Arc<Gateway>,
        keeping: Keeping,
        standby: bool,
    ) -> Result<Arc<Cluster>, redis::RedisError> {
        let client = redis::Client::open(redis_url)?;
        let since = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        Ok(Arc::new(Cluster {
            node,
            url,
            ng,
            pipe,
            lease,
            client,
            redis: tokio::sync::OnceCell::new(),
            gateway,
            claimed: Mutex::default(),
            held: Mutex::default(),
            orphans: Mutex::default(),
            renewals: AtomicU64::new(0),
            since,
            up: AtomicBool::new(false),
            draining: AtomicBool::new(false),
            standby,
            errors: AtomicU64::new(0),
            redirects: AtomicU64::new(0),
            calls: keeping.sealer.map(|sealer| {
                let (changed, changed_rx) = tokio::sync::mpsc::unbounded_channel();
                let (taken, taken_rx) = tokio::sync::mpsc::unbounded_channel();
                let (handover, handover_rx) = tokio::sync::mpsc::unbounded_channel();
                KeptCalls {
                    sealer,
                    takeover_of: keeping.takeover_of,
                    states: Mutex::default(),
                    changed,
                    changed_rx: Mutex::new(Some(changed_rx)),
                    taken,
                    taken_rx: Mutex::new(Some(taken_rx)),
                    handover,
                    handover_rx: Mutex::new(Some(handover_rx)),
                    reclaimed: AtomicBool::new(false),
                    stopped: AtomicBool::new(false),
                }
            }),
            call_writes: AtomicU64::new(0),
            calls_taken_over: AtomicU64::new(0),
            takeover_failures: AtomicU64::new(0),
        }))
    }

    /// Whether the directory answered its last call.
    pub fn directory_up(&self) -> bool {
        self.up.load(Ordering::Relaxed)
    }

    /// Whether the node is being drained.
    pub fn draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }

    /// Drains the node (`true`: new rooms go to the other nodes, while the rooms it has keep
    /// their sessions and take new ones until they end) or takes it back (`false`); its
    /// record says so at once.
    pub async fn set_draining(&self, draining: bool) -> Result<(), DirectoryError> {
        if self.draining.swap(draining, Ordering::Relaxed) != draining {
            tracing::info!(node = %self.node, draining, "cluster node drain changed");
        }
        let r = self.renew().await;
        self.note(r)
    }

    /// The connection (a handle on it: the manager reconnects by itself).
    async fn conn(&self) -> Result<ConnectionManager, DirectoryError> {
        self.redis
            .get_or_try_init(|| async {
                let config = redis::aio::ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(CALL_TIMEOUT))
                    .set_response_timeout(Some(CALL_TIMEOUT))
                    .set_number_of_retries(2)
                    .set_max_delay(Duration::from_secs(1));
                self.client
                    .get_connection_manager_lazy(config)
                    .map_err(DirectoryError::from)
            })
            .await
            .cloned()
    }

    fn lease_ms(&self) -> u64 {
        self.lease.as_millis().max(1) as u64
    }

    /// Notes how a Redis call went (the error logged once per change of state).
    fn note<T>(&self, r: Result<T, DirectoryError>) -> Result<T, DirectoryError> {
        match &r {
            Ok(_) => {
                if !self.up.swap(true, Ordering::Relaxed) {
                    tracing::info!(node = %self.node, "cluster directory reached");
                }
            }
            Err(e) => {
                self.errors.fetch_add(1, Ordering::Relaxed);
                if self.up.swap(false, Ordering::Relaxed) {
                    tracing::warn!(node = %self.node, error = %e, "cluster directory lost: rooms are served here meanwhile");
                }
            }
        }
        r
    }

    /// Renews the node's record and its rooms' ownership every third of the lease, until the
    /// runtime ends.
    pub async fn run(self: Arc<Self>) {
        let writer = self.calls.as_ref().and_then(|k| {
            k.changed_rx
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take()
        });
        if let Some(rx) = writer {
            tokio::spawn(self.clone().write_calls(rx));
        }
        let mut tick = tokio::time::interval(self.lease / 3);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let r = self.renew().await;
            // Calls are taken over only from a directory that answered the renewal (and a
            // node that keeps none makes no call that would say the directory is up).
            if self.note(r).is_ok() && self.calls.is_some() {
                let r = self.take_over().await;
                let _ = self.note(r);
            }
        }
    }

    /// Whether this node keeps its telephony calls' states for a standby.
    pub fn keeps_calls(&self) -> bool {
        self.calls.is_some()
    }

    /// Keeps `state` as its call's (sealed, written by the writer), or forgets call `call_id`
    /// (`None`: it ended).
    pub fn keep_call(&self, call_id: &str, state: Option<&CallState>) {
        let Some(k) = self
            .calls
            .as_ref()
            .filter(|k| !k.stopped.load(Ordering::Relaxed))
        else {
            return;
        };
        let sealed = match state.map(|s| k.sealer.seal(s)).transpose() {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(call_id, error = %e, "a call's state could not be sealed: not kept");
                None
            }
        };
        {
            let mut states = k.states.lock().unwrap_or_else(|e| e.into_inner());
            match sealed {
                Some(text) => states.insert(call_id.to_owned(), text),
                None => states.remove(call_id),
            };
        }
        let _ = k.changed.send(call_id.to_owned());
    }

    /// The calls taken over from dead nodes, as they are taken (once: the ng server's).
    pub fn takeovers(&self) -> Option<tokio::sync::mpsc::UnboundedReceiver<Vec<CallState>>> {
        self.calls
            .as_ref()?
            .taken_rx
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }

    /// Writes the states of the calls that changed, in the order they changed (each as it is
    /// when written), until the runtime ends. A write the directory refused is tried again
    /// with the next change, and every state is written again at the renewal that finds the
    /// directory emptied.
    async fn write_calls(self: Arc<Self>, mut rx: tokio::sync::mpsc::UnboundedReceiver<String>) {
        let mut ids: Vec<String> = Vec::new();
        let mut retry: Vec<String> = Vec::new();
        while rx.recv_many(&mut ids, 256).await > 0 {
            ids.append(&mut retry);
            ids.sort();
            ids.dedup();
            let r = self.write_states(&ids).await;
            if self.note(r).is_err() {
                retry = std::mem::take(&mut ids);
            }
            ids.clear();
        }
    }

    /// Writes calls `ids` as this node keeps them now (a call no longer kept is removed).
    async fn write_states(&self, ids: &[String]) -> Result<(), DirectoryError> {
        let Some(k) = &self.calls else { return Ok(()) };
        let mut pipe = redis::pipe();
        {
            let states = k.states.lock().unwrap_or_else(|e| e.into_inner());
            for id in ids {
                match states.get(id) {
                    Some(text) => pipe.hset(calls_key(&self.node), id, text).ignore(),
                    None => pipe.hdel(calls_key(&self.node), id).ignore(),
                };
            }
        }
        let mut c = self.conn().await?;
        call(pipe.query_async::<()>(&mut c)).await?;
        self.call_writes
            .fetch_add(ids.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Takes over the calls of each node of `cluster_takeover` whose record is gone (its lease
    /// ran out, or it left), and, once at start, this node's own calls that a previous life of
    /// it left (a restart).
    async fn take_over(&self) -> Result<(), DirectoryError> {
        let Some(k) = &self.calls else { return Ok(()) };
        if !k.reclaimed.load(Ordering::Relaxed) {
            self.take_calls_of(k, &self.node).await?;
            k.reclaimed.store(true, Ordering::Relaxed);
        }
        for dead in &k.takeover_of {
            if *dead != self.node {
                self.take_calls_of(k, dead).await?;
            }
        }
        // Calls another node handed here (its record stays: it is alive, and drained).
        self.take_from(
            k,
            &handover_key(&self.node),
            &format!("{PREFIX}none"),
            Whence::Handed,
        )
        .await
    }

    /// Moves `node`'s calls to this node unless its record is there (see [`Cluster::take_from`]).
    async fn take_calls_of(&self, k: &KeptCalls, node: &str) -> Result<(), DirectoryError> {
        let whence = if node == self.node {
            Whence::Restart
        } else {
            Whence::Gone(node)
        };
        self.take_from(k, &calls_key(node), &node_key(node), whence)
            .await
    }

    /// Moves the call states of hash `from` to this node's (unless `record` is in the
    /// directory: one Lua script, so two nodes never both take a call), opens each and hands
    /// them to the ng server. A state that does not open is counted and dropped.
    async fn take_from(
        &self,
        k: &KeptCalls,
        from: &str,
        record: &str,
        whence: Whence<'_>,
    ) -> Result<(), DirectoryError> {
        let script = redis::cmd("EVAL")
            .arg(TAKE)
            .arg(3)
            .arg(from)
            .arg(calls_key(&self.node))
            .arg(record)
            .arg(room_key("call:"))
            .arg(&self.node)
            .to_owned();
        let mut c = self.conn().await?;
        let moved: Vec<String> = call(script.query_async(&mut c)).await?;
        if moved.is_empty() {
            return Ok(());
        }
        let mut states = Vec::new();
        for pair in moved.chunks(2) {
            let [id, text] = pair else { continue };
            match k.sealer.open(id, text) {
                Ok(state) => {
                    k.states
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(id.clone(), text.clone());
                    states.push(state);
                }
                Err(e) => {
                    self.takeover_failures.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(from, call_id = %id, error = %e, "a call's state could not be opened: not taken over");
                }
            }
        }
        let calls = states.len();
        match whence {
            Whence::Restart => {
                tracing::info!(
                    calls,
                    "calls this node carried before its restart are taken back"
                )
            }
            Whence::Gone(node) => tracing::warn!(
                node,
                calls,
                "node gone (its lease ran out, or it left): its calls are taken over here"
            ),
            Whence::Handed => tracing::info!(calls, "calls handed over to this node are taken"),
        }
        let _ = k.taken.send(states);
        Ok(())
    }

    /// Hands this node's telephony calls `ids` (ended here, their ports given back) to the
    /// live node `to`, which takes them at its next renewal: their states from this node's
    /// memory to `to`'s hand-over hash, their rooms to `to`, out of this node's hash, in one
    /// transaction. How many went.
    pub async fn hand_over(&self, to: &str, ids: &[String]) -> Result<usize, HandoverError> {
        let k = self.calls.as_ref().ok_or(HandoverError::KeepsNoCalls)?;
        let states: Vec<(String, String)> = {
            let mut kept = k.states.lock().unwrap_or_else(|e| e.into_inner());
            ids.iter()
                .filter_map(|id| kept.remove(id).map(|text| (id.clone(), text)))
                .collect()
        };
        let mut pipe = redis::pipe();
        pipe.atomic();
        for (id, text) in &states {
            pipe.hset(handover_key(to), id, text).ignore();
            pipe.set(room_key(&format!("call:{id}")), to).ignore();
            pipe.hdel(calls_key(&self.node), id).ignore();
        }
        let r = match self.conn().await {
            Ok(mut c) => call(pipe.query_async::<()>(&mut c)).await,
            Err(e) => Err(e),
        };
        let Err(e) = self.note(r) else {
            tracing::info!(to, calls = states.len(), "calls handed over");
            return Ok(states.len());
        };
        if e.changed_nothing() {
            self.keep_after_failed_handover(k, states);
        } else {
            // Made here again they could run on two nodes: left to `to`, which takes them if
            // the transaction went through, else to this node's next start.
            tracing::warn!(to, calls = states.len(), error = %e, "the directory did not answer the hand-over: the calls are not made here again");
        }
        Err(HandoverError::Directory(e))
    }

    /// The directory refused a hand-over whose calls were already ended here: the transaction
    /// changed nothing, so their states are still this node's, in the directory and (again) in
    /// memory, and the calls are made again here from them, on the same addresses with the
    /// same keys, as a restart takes its calls back.
    fn keep_after_failed_handover(&self, k: &KeptCalls, states: Vec<(String, String)>) {
        let mut again = Vec::with_capacity(states.len());
        let mut kept = k.states.lock().unwrap_or_else(|e| e.into_inner());
        for (id, text) in states {
            match k.sealer.open(&id, &text) {
                Ok(state) => again.push(state),
                Err(e) => {
                    self.takeover_failures.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(call_id = %id, error = %e, "a call's state could not be opened: not made again");
                }
            }
            kept.insert(id, text);
        }
        drop(kept);
        tracing::warn!(
            calls = again.len(),
            "the directory refused the hand-over: the calls are made again here"
        );
        let _ = k.taken.send(again);
    }

    /// Whether node `to` may take this node's calls: another node, alive in the directory.
    pub async fn check_receiver(&self, to: &str) -> Result<(), HandoverError> {
        if self.calls.is_none() {
            return Err(HandoverError::KeepsNoCalls);
        }
        if to == self.node {
            return Err(HandoverError::NotAReceiver(format!(
                "{to:?} is this node: give another"
            )));
        }
        let r = self.record(to).await;
        match self.note(r).map_err(HandoverError::Directory)? {
            Some(_) => Ok(()),
            None => Err(HandoverError::NotAReceiver(format!(
                "node {to:?} is not in the cluster (no record in the directory)"
            ))),
        }
    }

    /// Asks the ng server to hand every telephony call of this node to node `to`
    /// ([`super::ng`]); how many went.
    pub async fn request_handover(&self, to: &str) -> Result<usize, HandoverError> {
        let k = self.calls.as_ref().ok_or(HandoverError::KeepsNoCalls)?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        let taken = k
            .handover_rx
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_none();
        if !taken || k.handover.send((to.to_owned(), tx)).is_err() {
            return Err(HandoverError::KeepsNoCalls);
        }
        rx.await.unwrap_or(Err(HandoverError::KeepsNoCalls))
    }

    /// The hand-over requests, for the ng server (once).
    pub fn handover_requests(&self) -> Option<HandoverRequests> {
        self.calls
            .as_ref()?
            .handover_rx
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }

    /// Stops writing calls' states (the node is shutting down: its calls' states stay as
    /// they are, for its standby or its next start to take).
    pub fn stop_keeping(&self) {
        if let Some(k) = &self.calls {
            k.stopped.store(true, Ordering::Relaxed);
        }
    }

    /// The rooms this node holds now: those with participants here, and those placed here
    /// within the lease whose first participant may not be in yet.
    async fn rooms_here(&self) -> Vec<String> {
        let mut rooms: Vec<String> = self
            .gateway
            .room_names()
            .await
            .into_iter()
            .map(owned_as)
            .collect();
        let now = Instant::now();
        let mut claimed = self.claimed.lock().unwrap_or_else(|e| e.into_inner());
        claimed.retain(|_, at| now.duration_since(*at) < self.lease);
        rooms.extend(claimed.keys().cloned());
        rooms.sort();
        rooms.dedup();
        rooms
    }

    /// One renewal: the node's record (with its lease), and the rooms that changed since the
    /// last: those that came are written as this node's (unless another holds one), those that
    /// went are released. A steady room costs no write. When the record was missing (the first
    /// renewal, a lease that ran out, a Redis that restarted empty), every room here is written
    /// again. Every [`SWEEP_EVERY`] renewals, rooms of nodes that are gone are released.
    async fn renew(&self) -> Result<(), DirectoryError> {
        let rooms = self.rooms_here().await;
        let json = serde_json::to_string(&self.own_record(rooms.len()))
            .map_err(|e| DirectoryError::Encode(Arc::new(e)))?;
        let mut c = self.conn().await?;
        let set = redis::cmd("SET")
            .arg(node_key(&self.node))
            .arg(json)
            .arg("PX")
            .arg(self.lease_ms())
            .arg("GET")
            .to_owned();
        let before: Option<String> = call(set.query_async(&mut c)).await?;
        if before.is_none() {
            self.rewrite_states().await?;
        }
        let (came, gone) = {
            let held = self.held.lock().unwrap_or_else(|e| e.into_inner());
            let came: Vec<String> = match before {
                None => rooms.clone(),
                Some(_) => rooms
                    .iter()
                    .filter(|r| held.binary_search(r).is_err())
                    .cloned()
                    .collect(),
            };
            let gone: Vec<String> = held
                .iter()
                .filter(|r| rooms.binary_search(r).is_err())
                .cloned()
                .collect();
            (came, gone)
        };
        if !came.is_empty() || !gone.is_empty() {
            let mut pipe = redis::pipe();
            for room in &came {
                pipe.cmd("EVAL")
                    .arg(HOLD)
                    .arg(1)
                    .arg(room_key(room))
                    .arg(&self.node)
                    .ignore();
            }
            self.release(&mut pipe, &gone);
            call(pipe.query_async::<()>(&mut c)).await?;
        }
        *self.held.lock().unwrap_or_else(|e| e.into_inner()) = rooms;
        let n = self.renewals.fetch_add(1, Ordering::Relaxed) + 1;
        if n.is_multiple_of(SWEEP_EVERY) {
            self.sweep(n).await?;
        }
        Ok(())
    }

    /// Writes every kept call's state again (the directory lost them, or never had them).
    async fn rewrite_states(&self) -> Result<(), DirectoryError> {
        let Some(k) = &self.calls else { return Ok(()) };
        let ids: Vec<String> = k
            .states
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .cloned()
            .collect();
        if ids.is_empty() {
            return Ok(());
        }
        self.write_states(&ids).await
    }

    /// This node's record now.
    fn own_record(&self, rooms: usize) -> NodeRecord {
        let load = self
            .gateway
            .stats()
            .workers
            .iter()
            .map(|w| w.load())
            .fold(0.0, f64::max);
        NodeRecord {
            node: self.node.clone(),
            url: self.url.clone(),
            participants: self.gateway.stats().totals().participants,
            rooms: rooms as u64,
            load,
            ng: self.ng,
            draining: self.draining(),
            standby: self.standby,
            pipe: self.pipe,
            since: self.since,
        }
    }

    /// Releases the rooms whose owner is no live node, and those that name this node but that
    /// it has not held for a whole sweep (claimed on its behalf by a node whose client then
    /// never came here).
    async fn sweep(&self, n: u64) -> Result<(), DirectoryError> {
        let (live, owners) = self.owners().await?;
        let held = self.held.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let mut stale: Vec<(String, String)> = Vec::new();
        {
            let mut orphans = self.orphans.lock().unwrap_or_else(|e| e.into_inner());
            let mut still = HashMap::new();
            for (room, owner) in owners {
                if !live.iter().any(|l| l.node == owner) {
                    stale.push((room, owner));
                } else if owner == self.node && held.binary_search(&room).is_err() {
                    match orphans.get(&room) {
                        Some(&seen) if seen < n => stale.push((room, owner)),
                        _ => {
                            still.insert(room, n);
                        }
                    }
                }
            }
            *orphans = still;
        }
        if stale.is_empty() {
            return Ok(());
        }
        let mut pipe = redis::pipe();
        for (room, owner) in &stale {
            pipe.cmd("EVAL")
                .arg(RELEASE)
                .arg(1)
                .arg(room_key(room))
                .arg(owner)
                .ignore();
        }
        let mut c = self.conn().await?;
        call(pipe.query_async::<()>(&mut c)).await
    }

    /// The live nodes, and every room's owner as the directory says.
    async fn owners(&self) -> Result<(Vec<NodeRecord>, Vec<(String, String)>), DirectoryError> {
        let live = self.live_nodes().await?;
        let keys = self.keys(&format!("{PREFIX}room:*")).await?;
        let mut owners = Vec::with_capacity(keys.len());
        if !keys.is_empty() {
            let mut c = self.conn().await?;
            let values: Vec<Option<String>> = call(c.mget(&keys)).await?;
            for (k, owner) in keys.iter().zip(values) {
                if let (Some(room), Some(owner)) =
                    (k.strip_prefix(&format!("{PREFIX}room:")), owner)
                {
                    owners.push((room.to_owned(), owner));
                }
            }
        }
        Ok((live, owners))
    }

    /// Where `room`'s new sessions are made: here, or at its owner. A room nobody owns goes to
    /// the live node with the fewest participants. Here whenever the directory does not
    /// answer.
    pub async fn place(&self, room: &str) -> Placement {
        let r = self.place_in_directory(room).await;
        match self.note(r) {
            Ok(p) => {
                if let Placement::Elsewhere { node, .. } = &p {
                    self.redirects.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(room, owner = %node, "room served by another node");
                }
                p
            }
            Err(_) => Placement::Here,
        }
    }

    async fn place_in_directory(&self, room: &str) -> Result<Placement, DirectoryError> {
        let mut c = self.conn().await?;
        let key = room_key(room);
        let owner: Option<String> = call(c.get(&key)).await?;
        let mut dead = String::new();
        if let Some(owner) = owner {
            if owner == self.node {
                return Ok(Placement::Here);
            }
            if let Some(rec) = self.record(&owner).await? {
                return Ok(elsewhere(rec));
            }
            // Its owner's lease ran out: placed again, as a new room.
            dead = owner;
        }
        let nodes = self.live_nodes().await?;
        // A draining node takes no new room (this one included: its own record may not say
        // so yet), nor does a standby while another node can; with every node draining, the
        // room stays where it was asked for.
        let chosen = nodes
            .iter()
            .filter(|n| !(n.draining || (n.node == self.node && self.draining())))
            .min_by_key(|n| {
                let standby = n.standby || (n.node == self.node && self.standby);
                (standby, n.participants, n.node != self.node, n.node.clone())
            })
            .map_or_else(|| self.node.clone(), |n| n.node.clone());
        let script = redis::cmd("EVAL")
            .arg(CLAIM)
            .arg(1)
            .arg(&key)
            .arg(&chosen)
            .arg(&dead)
            .to_owned();
        let owner: String = call(script.query_async(&mut c)).await?;
        if owner == self.node {
            self.claimed
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(room.to_owned(), Instant::now());
            return Ok(Placement::Here);
        }
        Ok(match nodes.into_iter().find(|n| n.node == owner) {
            Some(n) => elsewhere(n),
            None => self
                .record(&owner)
                .await?
                .map_or(Placement::Here, elsewhere),
        })
    }

    /// The node a viewer of a room this node owns is better served at (`cluster_spread_viewers`,
    /// or this node drains): the live node with pipes, neither draining nor a standby, with the
    /// fewest participants, when it has fewer than this node has now (any, while this node
    /// drains); its name and URL. `None` when there is none, or the directory does not answer.
    pub async fn spread_to(&self) -> Option<(String, String)> {
        let nodes = self.note(self.live_nodes().await).ok()?;
        let here = self.gateway.stats().totals().participants;
        let best = nodes
            .into_iter()
            .filter(|n| n.node != self.node && n.pipe.is_some() && !n.draining && !n.standby)
            .min_by_key(|n| (n.participants, n.node.clone()))?;
        if best.participants >= here && !self.draining() {
            return None;
        }
        self.redirects.fetch_add(1, Ordering::Relaxed);
        Some((best.node, best.url))
    }

    /// Where `room`'s sessions are now, without placing it: at its owner while that node's
    /// lease runs, else here (a room nobody owns, or the directory does not answer).
    pub async fn owner(&self, room: &str) -> Placement {
        let r = self.owner_in_directory(room).await;
        match self.note(r) {
            Ok(p) => {
                if matches!(p, Placement::Elsewhere { .. }) {
                    self.redirects.fetch_add(1, Ordering::Relaxed);
                }
                p
            }
            Err(_) => Placement::Here,
        }
    }

    async fn owner_in_directory(&self, room: &str) -> Result<Placement, DirectoryError> {
        let mut c = self.conn().await?;
        let owner: Option<String> = call(c.get(room_key(room))).await?;
        match owner {
            Some(owner) if owner != self.node => Ok(self
                .record(&owner)
                .await?
                .map_or(Placement::Here, elsewhere)),
            _ => Ok(Placement::Here),
        }
    }

    /// A node's record, if its lease runs.
    async fn record(&self, node: &str) -> Result<Option<NodeRecord>, DirectoryError> {
        let mut c = self.conn().await?;
        let json: Option<String> = call(c.get(node_key(node))).await?;
        Ok(json.and_then(|j| serde_json::from_str(&j).ok()))
    }

    /// The keys under `pattern` (SCAN: never blocks the server the way KEYS would).
    async fn keys(&self, pattern: &str) -> Result<Vec<String>, DirectoryError> {
        let mut c = self.conn().await?;
        let mut keys = Vec::new();
        let mut cursor: u64 = 0;
        loop {
            let scan = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(pattern)
                .arg("COUNT")
                .arg(1000)
                .to_owned();
            let (next, batch): (u64, Vec<String>) = call(scan.query_async(&mut c)).await?;
            keys.extend(batch);
            if next == 0 {
                return Ok(keys);
            }
            cursor = next;
        }
    }

    /// The records of the nodes whose lease runs.
    async fn live_nodes(&self) -> Result<Vec<NodeRecord>, DirectoryError> {
        let keys = self.keys(&format!("{PREFIX}node:*")).await?;
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let mut c = self.conn().await?;
        let values: Vec<Option<String>> = call(c.mget(&keys)).await?;
        Ok(values
            .into_iter()
            .flatten()
            .filter_map(|j| serde_json::from_str(&j).ok())
            .collect())
    }

    /// The cluster as the directory says now.
    pub async fn view(&self) -> Result<ClusterView, DirectoryError> {
        let r = self.view_of_directory().await;
        self.note(r)
    }

    async fn view_of_directory(&self) -> Result<ClusterView, DirectoryError> {
        let (records, owners) = self.owners().await?;
        let mut c = self.conn().await?;
        let mut nodes = Vec::with_capacity(records.len());
        for record in records {
            let lease_ms: i64 = call(c.pttl(node_key(&record.node))).await?;
            nodes.push(NodeView { record, lease_ms });
        }
        nodes.sort_by(|a, b| a.record.node.cmp(&b.record.node));
        // A room of a node that is gone is nobody's (the next offer places it again).
        let rooms = owners
            .into_iter()
            .filter(|(_, owner)| nodes.iter().any(|n| n.record.node == *owner))
            .collect();
        let links = self
            .gateway
            .shared
            .node_pipes
            .get()
            .map(|p| p.link_views())
            .unwrap_or_default();
        Ok(ClusterView {
            node: self.node.clone(),
            directory_up: true,
            nodes,
            rooms,
            links,
        })
    }

    /// Adds to `pipe` the release of `rooms` (each only while this node still holds it).
    fn release(&self, pipe: &mut redis::Pipeline, rooms: &[String]) {
        for room in rooms {
            pipe.cmd("EVAL")
                .arg(RELEASE)
                .arg(1)
                .arg(room_key(room))
                .arg(&self.node)
                .ignore();
        }
    }

    /// Leaves the cluster (a clean shutdown): the node's record and its rooms are released at
    /// once, so the others place them again without waiting for the lease.
    pub async fn leave(&self) {
        let rooms = std::mem::take(&mut *self.held.lock().unwrap_or_else(|e| e.into_inner()));
        let mut pipe = redis::pipe();
        pipe.cmd("DEL").arg(node_key(&self.node)).ignore();
        // Its calls' states stay for its standby, which takes them at its next renewal, or
        // for its own next start; an hour, if neither comes.
        pipe.cmd("PEXPIRE")
            .arg(calls_key(&self.node))
            .arg(LEFT_CALLS_KEPT.as_millis() as u64)
            .ignore();
        self.release(&mut pipe, &rooms);
        let left = match self.conn().await {
            Ok(mut c) => call(pipe.query_async::<()>(&mut c)).await,
            Err(e) => Err(e),
        };
        if let Err(e) = left {
            tracing::warn!(node = %self.node, error = %e, "leaving the cluster: its keys run out with their lease instead");
        }
    }
}

/// The cluster's figures for `/metrics`: whether the directory answers, its failed calls, and
/// the requests sent to other nodes.
#[derive(Debug)]
pub(crate) struct ClusterCollector(pub Arc<Cluster>);

impl prometheus_client::collector::Collector for ClusterCollector {
    fn encode(
        &self,
        mut e: prometheus_client::encoding::DescriptorEncoder<'_>,
    ) -> Result<(), std::fmt::Error> {
        let c = &self.0;
        super::stats::gauge(
            &mut e,
            "secrelay_cluster_directory_up",
            "Whether the cluster's directory (Redis) answered the node's last call (1) or not (0: rooms are served here meanwhile)",
            u64::from(c.directory_up()),
        )?;
        super::stats::gauge(
            &mut e,
            "secrelay_cluster_draining",
            "Whether the node is being drained (1: new rooms go to the other nodes)",
            u64::from(c.draining()),
        )?;
        super::stats::counter(
            &mut e,
            "secrelay_cluster_directory_errors",
            "Calls to the cluster's directory that failed or found no answer in time",
            c.errors.load(Ordering::Relaxed),
        )?;
        super::stats::counter(
            &mut e,
            "secrelay_cluster_redirects",
            "Offers answered with a redirect, and ng commands forwarded, to the node that owns their room or call",
            c.redirects.load(Ordering::Relaxed),
        )?;
        super::stats::counter(
            &mut e,
            "secrelay_cluster_call_state_writes",
            "Telephony calls' states written to the directory for a standby (each when its call changes or ends)",
            c.call_writes.load(Ordering::Relaxed),
        )?;
        super::stats::counter(
            &mut e,
            "secrelay_cluster_calls_taken_over",
            "Telephony calls made again here from their states: taken over from a node whose lease ran out, taken back at a restart or handed over, or kept after a hand-over the directory refused",
            c.calls_taken_over.load(Ordering::Relaxed),
        )?;
        super::stats::counter(
            &mut e,
            "secrelay_cluster_takeover_failures",
            "Calls of a dead node that could not be taken over (a state that does not open, a port that cannot be bound, a request refused)",
            c.takeover_failures.load(Ordering::Relaxed),
        )?;
        match c.gateway.shared.node_pipes.get() {
            Some(p) => pipe_metrics(&mut e, p),
            None => Ok(()),
        }
    }
}

/// The node pipes' series (`cluster_pipe`).
fn pipe_metrics(
    e: &mut prometheus_client::encoding::DescriptorEncoder<'_>,
    p: &super::node_pipes::NodePipes,
) -> Result<(), std::fmt::Error> {
    let n = &p.counts;
    let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
    super::stats::gauge(
        e,
        "secrelay_cluster_pipe_links",
        "Links to other nodes up now (each carries the pipes of the rooms spread between the two)",
        p.links() as u64,
    )?;
    super::stats::counter(
        e,
        "secrelay_cluster_pipe_links_lost",
        "Links to other nodes that broke or closed (their pipes cut at both ends)",
        get(&n.links_lost),
    )?;
    super::stats::counter(
        e,
        "secrelay_cluster_pipe_link_failures",
        "Tries to make a link to another node that failed (connection, TLS, its certificate, its hello); its viewers are redirected to it, and it is not tried again for 5 s",
        get(&n.link_failures),
    )?;
    super::stats::counter(
        e,
        "secrelay_cluster_pipe_sent",
        "Datagrams sealed and sent to other nodes: publishers' packets for their replicas there, mirrors' feedback for their publishers there",
        get(&n.sent),
    )?;
    super::stats::counter(
        e,
        "secrelay_cluster_pipe_received",
        "Datagrams from other nodes opened and handed to a worker",
        get(&n.received),
    )?;
    super::stats::labelled_counters(
        e,
        "secrelay_cluster_pipe_data_messages",
        "Data-channel messages of rooms across nodes, by event: sent (to another node), received (from one), dropped (not sent: larger than a control frame takes; or received unreadable)",
        "event",
        &[
            ("sent", get(&n.data_sent)),
            ("received", get(&n.data_received)),
            ("dropped", get(&n.data_dropped)),
        ],
    )?;
    super::stats::labelled_counters(
        e,
        "secrelay_cluster_pipe_drops",
        "Pipe datagrams dropped, by reason: bad (unreadable, or its tag did not check), replayed (seen before, or older than the window), unknown_link (for no link of this node's), lost (not sent, or a worker's queue was full)",
        "reason",
        &[
            ("bad", get(&n.bad)),
            ("replayed", get(&n.replayed)),
            ("unknown_link", get(&n.unknown_link)),
            ("lost", get(&n.lost)),
        ],
    )
}
