//! The command line: `paysaga up` and the operator's subcommands.

use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Debug, Parser)]
#[command(
    name = "paysaga",
    version,
    about = "Run paysaga with a demo drop, and operate a running system"
)]
pub struct Cli {
    #[command(flatten)]
    pub endpoints: Endpoints,
    #[command(subcommand)]
    pub command: Command,
}

/// Where the operator's subcommands find the services.
#[derive(Debug, Clone, Args)]
pub struct Endpoints {
    #[arg(
        long,
        global = true,
        env = "MEMBER_URL",
        default_value = "http://127.0.0.1:8081"
    )]
    pub member_url: String,
    #[arg(
        long,
        global = true,
        env = "GATE_URL",
        default_value = "http://127.0.0.1:8085"
    )]
    pub gate_url: String,
    #[arg(
        long,
        global = true,
        env = "ORDER_URL",
        default_value = "http://127.0.0.1:8084"
    )]
    pub order_url: String,
    #[arg(
        long,
        global = true,
        env = "ACCOUNT_URL",
        default_value = "http://127.0.0.1:8082"
    )]
    pub account_url: String,
    #[arg(
        long,
        global = true,
        env = "ORCHESTRATOR_URL",
        default_value = "http://127.0.0.1:8083"
    )]
    pub orchestrator_url: String,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Start PostgreSQL/Redis if needed, the five services, play a demo drop, and keep
    /// everything running until Ctrl-C, restarting a service that exits.
    Up(UpArgs),
    /// Run one service in this process, configured from the environment exactly as its
    /// own binary is (`up` starts each service this way, so one build serves all).
    Service {
        /// Which service. Its settings (LISTEN_ADDR, DATABASE_URL, ORDER_URL, ...) come
        /// from the environment only; the --*-url options are for the operator commands.
        #[arg(value_enum)]
        name: ServiceName,
    },
    /// List, inspect, resume or refund payments (orchestrator inspection API).
    #[command(subcommand)]
    Payments(PaymentsCommand),
    /// Webhook endpoints and deliveries: add, list, disable, enable, list DEAD
    /// deliveries, replay them.
    #[command(subcommand)]
    Webhooks(WebhooksCommand),
    /// List products with their stock; make one, or add units (admins, signed in:
    /// `staff sign-in`; each change is in the audit trail with its reason).
    Products(ProductsArgs),
    /// A product's stock as the order service counts it (units available, reserved, sold).
    Stock { product: i64 },
    /// The gate's quota for a product (passes it may still issue, passes in flight).
    Quota { product: i64 },
    /// Members (member service): create, list, top up, sign in for a buyer token.
    #[command(subcommand)]
    Member(MemberCommand),
    /// Staff: sign in as yourself (the operator commands then act as you), sign out,
    /// create an account (admins).
    #[command(subcommand)]
    Staff(StaffCommand),
    /// The audit trail of what staff did, newest first (signed in: `staff sign-in`).
    Audit(AuditArgs),
    /// Refunds above STAFF_FOUR_EYES_ABOVE and top-ups above STAFF_TOP_UP_FOUR_EYES_ABOVE
    /// awaiting a second person: list them (newest first), or approve or reject one
    /// (admins other than the one who asked; signed in: `staff sign-in`).
    Approvals(ApprovalsArgs),
    /// Mint a DEVELOPMENT token for trying the API with curl.
    #[command(subcommand)]
    Token(TokenCommand),
    /// Generate a role's service-credential key pair (unless one exists in --dir): the
    /// private key for that caller's SERVICE_SIGNING_KEY, the public one for the
    /// verifiers' SERVICE_KEYS.
    Keygen(KeygenArgs),
    /// Create the database, the service roles and their schemas (one-shot, as an
    /// administrator: ADMIN_DATABASE_URL), as `up` does before it starts the services.
    /// New roles get no password (give each its own with ALTER ROLE ... PASSWORD) unless
    /// --dev-passwords.
    Bootstrap(BootstrapArgs),
    /// Check the invariants in PostgreSQL (oversold units, money, payments) and print them.
    Check(CheckArgs),
}

#[derive(Debug, Clone, Args)]
pub struct UpArgs {
    /// Start the services and keep them running, without the demo drop.
    #[arg(long)]
    pub no_demo: bool,
    /// Play the demo, stop everything, and exit 0 only if the demo's invariants hold (CI).
    #[arg(long)]
    pub exit_after_demo: bool,
    /// Start private PostgreSQL and Redis under .data/ even if local ones are running.
    #[arg(long)]
    pub private: bool,
    /// Listen on free ports instead of 8082-8085 (e.g. beside another running system).
    #[arg(long)]
    pub free_ports: bool,
    /// Instances of every service. Above 1, each instance listens on its own loopback
    /// port and one HAProxy (installed separately) balances each service's usual port
    /// over them; the services call each other through it.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=32))]
    pub instances: u16,
    /// No effect, kept so older scripts still run: the services run from this binary
    /// (`paysaga service <name>`), so there is nothing else to build.
    #[arg(long, hide = true)]
    pub no_build: bool,
    /// Units in the demo drop.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(i64).range(1..=100_000))]
    pub units: i64,
    /// Buyers in the demo drop (every eighth of them cannot afford the price).
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub buyers: u64,
    /// Price of a unit, minor units.
    #[arg(long, default_value_t = 12_900, value_parser = clap::value_parser!(i64).range(1..=1_000_000_000))]
    pub price: i64,
    /// Key prefix in Redis.
    #[arg(long, env = "REDIS_PREFIX", default_value = "paysaga:")]
    pub redis_prefix: String,
    /// Where private servers and logs live (default: .data/ in the project).
    #[arg(long, env = "PAYSAGA_DATA_DIR")]
    pub data_dir: Option<std::path::PathBuf>,
}

/// The services `paysaga service` can run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ServiceName {
    Account,
    Member,
    Order,
    Gate,
    Orchestrator,
}

#[derive(Debug, Subcommand)]
pub enum PaymentsCommand {
    /// Newest first, filtered.
    List {
        /// PROCESSING, ACCOUNT_DEBITED, ORDER_CONFIRMED, COMPLETED, FAILED, REFUND_PROCESSING, REFUNDED.
        #[arg(long)]
        state: Option<String>,
        /// Only payments flagged for an operator.
        #[arg(long)]
        attention: bool,
        /// Only payments whose last error contains this text.
        #[arg(long)]
        error: Option<String>,
        #[arg(long, default_value_t = 20)]
        limit: i64,
    },
    /// One payment with its full step timeline.
    Show { id: uuid::Uuid },
    /// Drive a flagged payment again.
    Resume {
        id: uuid::Uuid,
        /// Why (kept in the audit trail and on the step log).
        #[arg(long)]
        reason: Option<String>,
    },
    /// Refund a COMPLETED payment (cancels the order, credits the buyer).
    Refund {
        id: uuid::Uuid,
        /// Why (kept in the audit trail and on the step log).
        #[arg(long)]
        reason: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum StaffCommand {
    /// Sign in (password from PAYSAGA_STAFF_PASSWORD or asked for; the code from --code,
    /// PAYSAGA_STAFF_CODE or asked for) and keep the session token (readable by you
    /// only) in PAYSAGA_STAFF_SESSION_FILE, default ~/.local/state/paysaga/staff-session.
    SignIn {
        #[arg(long)]
        email: String,
        /// A TOTP code or a recovery code.
        #[arg(long)]
        code: Option<String>,
    },
    /// End the session at once and forget it.
    SignOut,
    /// Create a staff account (admins; or the operator tools' service credential, for a
    /// system's first admin). The password from PAYSAGA_NEW_STAFF_PASSWORD or asked for;
    /// prints the TOTP secret and recovery codes for its owner, shown this once.
    Create {
        #[arg(long)]
        email: String,
        /// VIEWER, OPERATOR or ADMIN.
        #[arg(long, value_parser = parse_role)]
        role: paysaga_contracts::staff::api::StaffRole,
        /// Why the account is made (audit trail).
        #[arg(long)]
        reason: String,
    },
}

fn parse_role(s: &str) -> Result<paysaga_contracts::staff::api::StaffRole, String> {
    paysaga_contracts::staff::api::StaffRole::parse(&s.to_ascii_uppercase())
        .ok_or_else(|| "VIEWER, OPERATOR or ADMIN".to_owned())
}

#[derive(Debug, Args)]
pub struct ProductsArgs {
    #[command(subcommand)]
    pub change: Option<ProductsCommand>,
}

#[derive(Debug, Subcommand)]
pub enum ProductsCommand {
    /// Make a product with its first units.
    Create {
        name: String,
        /// Price in minor units (cents).
        price: i64,
        /// Units on sale at once (more with `add-units`).
        units: i64,
        /// How long a reservation holds its unit and the price, in seconds (default:
        /// the order service's RESERVATION_TTL_SECS).
        #[arg(long)]
        reservation_ttl_secs: Option<u32>,
        /// Why (required; kept in the audit trail).
        #[arg(long)]
        reason: String,
    },
    /// Put more units of a product on sale.
    AddUnits {
        product: i64,
        count: i64,
        /// Why (required; kept in the audit trail).
        #[arg(long)]
        reason: String,
    },
}

#[derive(Debug, Args)]
pub struct AuditArgs {
    /// Only this person's entries (email).
    #[arg(long)]
    pub actor: Option<String>,
    /// Only this action (SIGN_IN, PAYMENT_REFUNDED, ...).
    #[arg(long)]
    pub action: Option<String>,
    /// Only entries about this target (a payment id, ...).
    #[arg(long)]
    pub target: Option<String>,
    #[command(flatten)]
    pub page: PageArgs,
}

/// Keyset paging of a newest-first list.
#[derive(Debug, Args)]
pub struct PageArgs {
    /// Rows older than this id (the previous page's last).
    #[arg(long)]
    pub before: Option<i64>,
    #[arg(long, default_value_t = 50)]
    pub limit: i64,
}

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct ApprovalsArgs {
    #[command(subcommand)]
    pub decide: Option<ApprovalsCommand>,
    /// Only approvals in this state: PENDING, APPROVED, REJECTED.
    #[arg(long)]
    pub state: Option<String>,
    /// Only approvals of this kind: REFUND, TOP_UP.
    #[arg(long)]
    pub kind: Option<String>,
    #[command(flatten)]
    pub page: PageArgs,
}

#[derive(Debug, Subcommand)]
pub enum ApprovalsCommand {
    /// Approve a refund: it is carried out through the saga at once.
    Approve {
        id: i64,
        /// Why (kept in the audit trail and on the payment's step log).
        #[arg(long)]
        reason: Option<String>,
    },
    /// Reject a refund: nothing is refunded.
    Reject {
        id: i64,
        /// Why (kept in the audit trail).
        #[arg(long)]
        reason: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum WebhooksCommand {
    /// Register an endpoint; prints its signing secret, which is shown this once.
    Add {
        /// Where deliveries are POSTed: an http URL (https is not delivered yet).
        url: String,
        /// Only this event type (repeat for more; default: every type), e.g. payment.completed.
        #[arg(long = "event")]
        events: Vec<String>,
        /// A note for operators.
        #[arg(long)]
        description: Option<String>,
    },
    /// Every endpoint.
    List,
    /// Stop delivering to an endpoint (its pending deliveries wait).
    Disable { id: uuid::Uuid },
    /// Deliver to an endpoint again.
    Enable { id: uuid::Uuid },
    /// Give an endpoint a new signing secret (printed this once); the previous one is
    /// still signed with, beside it, until the grace (WEBHOOK_SECRET_GRACE_SECS) ends.
    RotateSecret { id: uuid::Uuid },
    /// Deliveries that ran out of attempts, newest first.
    Dead {
        /// Only this endpoint's.
        #[arg(long)]
        endpoint: Option<uuid::Uuid>,
        #[arg(long, default_value_t = 50)]
        limit: i64,
    },
    /// Make DEAD deliveries due again (attempts counted afresh).
    Replay {
        #[arg(required = true)]
        ids: Vec<uuid::Uuid>,
    },
}

#[derive(Debug, Subcommand)]
pub enum MemberCommand {
    /// Sign a member up (the member service opens their account).
    Create {
        email: String,
        /// The password; read from MEMBER_PASSWORD if not given, so it need not appear
        /// in the shell's history.
        #[arg(long, env = "MEMBER_PASSWORD", hide_env_values = true)]
        password: String,
    },
    /// Members, oldest first.
    List {
        #[arg(long, default_value_t = 50)]
        limit: u32,
        /// Continue after this member id (the last one of the previous page).
        #[arg(long)]
        after: Option<uuid::Uuid>,
    },
    /// Pay money into a member's account, as the signed-in staff person (admins; `paysaga
    /// staff sign-in` first), through the orchestrator's staff API: above
    /// STAFF_TOP_UP_FOUR_EYES_ABOVE it waits for a second admin (`paysaga approvals`).
    TopUp {
        member: uuid::Uuid,
        /// Minor units.
        amount: i64,
        /// Why (required; kept in the audit trail).
        #[arg(long)]
        reason: String,
        /// Names this top-up (1-64 characters of [A-Za-z0-9_.:-]): sending it again pays
        /// nothing twice. Default: a new key.
        #[arg(long)]
        key: Option<String>,
    },
    /// Sign in and print the access token (for trying the buyer API with curl).
    SignIn {
        email: String,
        #[arg(long, env = "MEMBER_PASSWORD", hide_env_values = true)]
        password: String,
    },
}

#[derive(Debug, Clone, Args)]
pub struct KeygenArgs {
    /// The role the key signs for: gate, orchestrator, member or operator.
    pub role: String,
    /// Where the pair is kept: `<role>.key` (private, base64 seed, readable by the owner
    /// only) and `<role>.pub`. An existing pair is kept and printed, never replaced.
    #[arg(long, default_value = "service-keys")]
    pub dir: std::path::PathBuf,
}

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// A buyer token (subject = member id).
    Buyer {
        member: String,
        #[arg(long, default_value_t = 86_400)]
        ttl_secs: u64,
    },
    /// A service credential (internal and operator endpoints) of one role: gate,
    /// orchestrator, member, operator, order or console, signed with that role's
    /// development key, for one service (`--for`): no other service admits it; each
    /// service route admits only some roles. At most 900 seconds.
    Service {
        name: String,
        /// The service it opens: account, order, gate, orchestrator or member.
        #[arg(long = "for", default_value = "orchestrator")]
        to: String,
        #[arg(long, default_value_t = 900)]
        ttl_secs: u64,
    },
}

#[derive(Debug, Clone, Args)]
pub struct BootstrapArgs {
    #[command(flatten)]
    pub database: CheckArgs,
    /// DEVELOPMENT ONLY: give new roles the public development password (which the
    /// services refuse outside development mode), as `up` and docker compose do.
    #[arg(long)]
    pub dev_passwords: bool,
}

#[derive(Debug, Clone, Args)]
pub struct CheckArgs {
    /// Administrator URL of the PostgreSQL server (its database part is replaced by --database).
    #[arg(
        long,
        env = "ADMIN_DATABASE_URL",
        default_value = "postgres://postgres:postgres@127.0.0.1:5432/postgres"
    )]
    pub admin_url: String,
    /// The paysaga database on that server.
    #[arg(long, default_value = "paysaga")]
    pub database: String,
}
