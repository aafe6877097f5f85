//! The scenarios: what each injects, what it proves, and how its stack is started
//! (which links go through a fault proxy, which timeouts the services run with).

use std::{fmt, time::Duration};

use paysaga_e2e::{Link, StackOptions};
use paysaga_supervisor::ServiceKind;

use crate::plan::Plan;

/// The orchestrator's timeout per downstream call in every scenario.
pub const DOWNSTREAM_TIMEOUT: Duration = Duration::from_millis(1000);
/// How long a crashed orchestrator's claims (payments, running requests) block others.
pub const LEASE: Duration = Duration::from_millis(3000);
/// Reservation lifetime in the partition scenario: shorter than the cut, so some
/// debited payments find their reservation expired when the link heals (refund path).
pub const PARTITION_RESERVATION_TTL: Duration = Duration::from_secs(4);

/// Evidence name: masters SIGKILLed whose replica the cluster promoted.
pub const MASTERS_FAILED_OVER: &str = "masters killed and failed over";

/// Evidence name: PostgreSQL primaries struck (SIGKILLed or cut off) while buyers were
/// still being served that Patroni replaced with their standby, reached through HAProxy.
pub const PRIMARIES_FAILED_OVER: &str = "primaries struck mid-drop and failed over by Patroni";

/// How long a unit offered to the head of the line is held for that member
/// (`WAITLIST_OFFER_TTL_SECS`): long enough for a buyer to take it through a short
/// fault, short enough that an offer nobody takes (its buyer left unanswered) passes on
/// well within the recovery bound. A buyer whose offer lapsed joins the line again.
pub const OFFER_TTL: Duration = Duration::from_secs(10);

/// How old a hold without its reservation must be before the order service releases it.
pub const HOLD_ORPHAN_GRACE: Duration = Duration::from_millis(3000);

/// Pool size of each database-backed service.
pub const DB_MAX_CONNECTIONS: u32 = 8;

/// How a PostgreSQL failover scenario strikes the primary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum PrimaryFault {
    /// SIGKILL to every process of the node at once; it is started again after the
    /// failover.
    Kill,
    /// The node cut off the network; healed after the failover.
    Cut,
}

impl PrimaryFault {
    pub fn name(self) -> &'static str {
        match self {
            PrimaryFault::Kill => "SIGKILL",
            PrimaryFault::Cut => "network cut",
        }
    }
}

/// One fault-injection scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub enum Scenario {
    OrchestratorCrash,
    SlowAccount,
    OrderPartition,
    AccountCrash,
    RedisLoss,
    DatabaseDrops,
    ImpatientClients,
    OrderCrash,
    RedisClusterMasterLoss,
    PostgresFailover,
    PostgresPartition,
}

impl Scenario {
    pub const ALL: [Scenario; 11] = [
        Scenario::OrchestratorCrash,
        Scenario::SlowAccount,
        Scenario::OrderPartition,
        Scenario::AccountCrash,
        Scenario::RedisLoss,
        Scenario::DatabaseDrops,
        Scenario::ImpatientClients,
        Scenario::OrderCrash,
        Scenario::RedisClusterMasterLoss,
        Scenario::PostgresFailover,
        Scenario::PostgresPartition,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Scenario::OrchestratorCrash => "orchestrator-crash",
            Scenario::SlowAccount => "slow-account",
            Scenario::OrderPartition => "order-partition",
            Scenario::AccountCrash => "account-crash",
            Scenario::RedisLoss => "redis-loss",
            Scenario::DatabaseDrops => "database-drops",
            Scenario::ImpatientClients => "impatient-clients",
            Scenario::OrderCrash => "order-crash",
            Scenario::RedisClusterMasterLoss => "redis-cluster-master-loss",
            Scenario::PostgresFailover => "postgres-failover",
            Scenario::PostgresPartition => "postgres-partition",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.name() == name)
    }

    /// What the scenario does to the running system.
    pub fn injects(self) -> &'static str {
        match self {
            Scenario::OrchestratorCrash => {
                "SIGKILLs the orchestrator while payments are unfinished (aimed at a moment when \
                 one of its batches is in flight), restarts it, repeatedly"
            }
            Scenario::SlowAccount => {
                "holds the account service's answers to debits for 1.5x the orchestrator's timeout (first \
                 pulse; later ones slow the whole link, lookups included, 3/4 of the timeout per leg): \
                 a debit reaches the ledger and commits, its answer arrives after the timeout"
            }
            Scenario::OrderPartition => {
                "cuts orchestrator -> order (open connections reset, new ones refused) while payments \
                 are being confirmed; the first cut outlasts the reservation TTL"
            }
            Scenario::AccountCrash => {
                "SIGKILLs the account service while debits are in flight (aimed at a moment when \
                 the orchestrator's account batch is in flight), restarts it, repeatedly"
            }
            Scenario::RedisLoss => {
                "SIGKILLs the gate's Redis (a private redis-server without persistence) mid-drop \
                 and starts it again empty after a while"
            }
            Scenario::DatabaseDrops => {
                "resets every open PostgreSQL connection of account, order and orchestrator \
                 repeatedly under load, refusing new ones for a moment each time"
            }
            Scenario::ImpatientClients => {
                "buyers time out at random moments (5 ms to 1.2 s) and retry with the same \
                 Idempotency-Key, sometimes twice at once"
            }
            Scenario::OrderCrash => {
                "SIGKILLs the order service while confirms are in flight (aimed at a moment when \
                 the orchestrator's order batch is in flight), restarts it, repeatedly"
            }
            Scenario::RedisClusterMasterLoss => {
                "the gate runs on a Redis Cluster (3 masters, 3 replicas, node timeout 1 s); \
                 SIGKILLs the master holding the drop's product mid-drop, lets the cluster \
                 promote its replica, then restarts the killed node empty (it rejoins as a \
                 replica), repeatedly"
            }
            Scenario::PostgresFailover => {
                "the services reach PostgreSQL through HAProxy in front of two nodes Patroni \
                 manages over etcd in synchronous mode (HAProxy routes by Patroni's /primary); \
                 SIGKILLs every process of the primary (Patroni and PostgreSQL) while payments \
                 are in flight (aimed at a batch in flight); Patroni promotes the standby; the \
                 killed node is started again and rejoins as a replica (pg_rewind), and the \
                 fault strikes again, the second failover going to the rejoined node"
            }
            Scenario::PostgresPartition => {
                "the same Patroni cluster; cuts the primary off the network (its PostgreSQL and \
                 REST API unreachable, etcd unreachable to it: bytes held, nothing refused) \
                 while payments are in flight; Patroni demotes it and promotes the standby; \
                 the cut heals, the old primary rejoins as a replica (pg_rewind), and the \
                 fault strikes again, the second failover going to the rejoined node"
            }
        }
    }

    /// What a clean run of the scenario shows.
    pub fn proves(self) -> &'static str {
        match self {
            Scenario::OrchestratorCrash => {
                "a crash between any two steps loses nothing: recovery (after the lease) finishes \
                 every saga, no step is applied twice, stuck Idempotency-Keys are taken over"
            }
            Scenario::SlowAccount => {
                "a late answer is an unknown outcome, not a failure: the saga looks the debit up \
                 by its operation key and continues; nobody is charged twice or charged for nothing"
            }
            Scenario::OrderPartition => {
                "unknown confirms are resolved by asking the order service; a reservation that \
                 expired meanwhile is refunded, so no money is kept without an order"
            }
            Scenario::AccountCrash => {
                "a ledger that dies mid-debit (mid-batch) commits or rolls back as a whole, and the \
                 saga learns which after restart"
            }
            Scenario::RedisLoss => {
                "the gate keeps answering in degraded mode, the order service alone prevents \
                 overselling, and the quota is rebuilt from the order service after Redis returns"
            }
            Scenario::DatabaseDrops => {
                "pools recover from dropped connections; a transaction cut mid-way has no effect \
                 and is retried under the same key"
            }
            Scenario::ImpatientClients => {
                "one Idempotency-Key is one payment whatever the client does: every answer names \
                 the same payment, replays are marked, nothing runs twice"
            }
            Scenario::OrderCrash => {
                "a confirm batch that dies mid-transaction commits or rolls back whole, and the \
                 saga learns which after restart by looking the reservations up: no unit sold \
                 twice, no money kept without an order"
            }
            Scenario::RedisClusterMasterLoss => {
                "the gate covers the failover with its fallback limiter, comes back on the \
                 promoted replica by itself and rebuilds the quota there (re-adding passes the \
                 replica may have missed); the order service never oversells"
            }
            Scenario::PostgresFailover | Scenario::PostgresPartition => {
                "no acknowledged commit is lost in either failover: every answer a buyer had \
                 before the fault, and every payment the old primary had COMPLETED, is on the \
                 new primary; the services answer 503 meanwhile and their pools reconnect \
                 through HAProxy without a restart; recovery settles every saga the failover \
                 cut; nothing in the test promotes"
            }
        }
    }

    /// The stack this scenario runs on.
    pub fn options(self, _plan: &Plan) -> StackOptions {
        let mut o = StackOptions::new(&format!("faults-{}", self.name()))
            .env(ServiceKind::Gate, "RECOMPUTE_INTERVAL_MS", 200)
            .env(ServiceKind::Order, "SWEEP_INTERVAL_MS", 200)
            .env(
                ServiceKind::Order,
                "WAITLIST_OFFER_TTL_SECS",
                OFFER_TTL.as_secs(),
            )
            // A hold a crash left without its reservation is released within seconds of
            // the heal, not half a minute.
            .env(
                ServiceKind::Order,
                "HOLD_ORPHAN_GRACE_MS",
                HOLD_ORPHAN_GRACE.as_millis(),
            )
            .env(ServiceKind::Orchestrator, "RECOVERY_INTERVAL_MS", 1000)
            .env(
                ServiceKind::Orchestrator,
                "DOWNSTREAM_TIMEOUT_MS",
                DOWNSTREAM_TIMEOUT.as_millis(),
            )
            .env(ServiceKind::Orchestrator, "RESPONSE_WAIT_MS", 1500)
            .env(ServiceKind::Orchestrator, "LEASE_MS", LEASE.as_millis())
            // PostgreSQL allows 100 connections on this machine, shared by every test
            // run: a stack of three 16-connection pools per scenario would exhaust it.
            .env_all("DB_MAX_CONNECTIONS", DB_MAX_CONNECTIONS);
        match self {
            Scenario::OrchestratorCrash
            | Scenario::AccountCrash
            | Scenario::OrderCrash
            | Scenario::ImpatientClients => {}
            Scenario::SlowAccount => o = o.proxy(Link::OrchestratorToAccount),
            Scenario::OrderPartition => {
                o = o.proxy(Link::OrchestratorToOrder).env(
                    ServiceKind::Order,
                    "RESERVATION_TTL_SECS",
                    PARTITION_RESERVATION_TTL.as_secs(),
                );
            }
            // Its own Redis (or Redis Cluster), killed and restarted by the injector
            // (see `run`).
            Scenario::RedisLoss | Scenario::RedisClusterMasterLoss => {}
            // Its own Patroni cluster behind HAProxy (see `run`), struck by the injector.
            Scenario::PostgresFailover | Scenario::PostgresPartition => {}
            Scenario::DatabaseDrops => {
                for kind in [
                    ServiceKind::Account,
                    ServiceKind::Order,
                    ServiceKind::Orchestrator,
                ] {
                    o = o.proxy(Link::Database(kind));
                }
            }
        }
        o
    }

    /// The evidence count that must be non-zero for the run to have exercised its fault.
    pub fn exercised_by(self) -> &'static str {
        match self {
            Scenario::OrchestratorCrash | Scenario::AccountCrash => "payments unfinished at a kill",
            Scenario::SlowAccount => "debit calls with an unknown outcome",
            Scenario::OrderPartition => "confirm calls with an unknown outcome",
            Scenario::RedisLoss => "gate switches to degraded mode",
            Scenario::DatabaseDrops => "database connections reset",
            Scenario::ImpatientClients => "client timeouts",
            Scenario::OrderCrash => "confirm calls with an unknown outcome",
            Scenario::RedisClusterMasterLoss => MASTERS_FAILED_OVER,
            Scenario::PostgresFailover | Scenario::PostgresPartition => PRIMARIES_FAILED_OVER,
        }
    }

    /// The fault a PostgreSQL failover scenario strikes the primary with; `None` for the
    /// others.
    pub fn primary_fault(self) -> Option<PrimaryFault> {
        match self {
            Scenario::PostgresFailover => Some(PrimaryFault::Kill),
            Scenario::PostgresPartition => Some(PrimaryFault::Cut),
            _ => None,
        }
    }

    /// `plan` as this scenario runs it. A failover scenario's buyers arrive in
    /// `failovers + 1` waves, each fault striking while one is paying, so its stock is
    /// at least one unit per buyer of the struck waves: every struck wave finds units
    /// for all its buyers, the last wave gets what is left.
    pub fn adapt(self, plan: &Plan) -> Plan {
        let mut plan = plan.clone();
        if self.primary_fault().is_some() {
            let failovers = plan.failovers as usize;
            let struck = plan.buyers.div_ceil(failovers + 1) * failovers;
            plan.units = plan.units.max(i64::try_from(struck).unwrap_or(i64::MAX));
        }
        plan
    }

    /// Whether the scenario SIGKILLs a service, aiming each kill at a moment when an
    /// orchestrator batch is in flight (reported as [`crate::inject::KILLS_WITH_BATCH`]).
    pub fn kills_a_service(self) -> bool {
        matches!(
            self,
            Scenario::OrchestratorCrash | Scenario::AccountCrash | Scenario::OrderCrash
        )
    }
}

impl fmt::Display for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
