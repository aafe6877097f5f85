//! The five paysaga services as the supervisor knows them: name, binary, default port.

use std::fmt;

/// One of the five service processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ServiceKind {
    Account,
    Member,
    Order,
    Gate,
    Orchestrator,
}

impl ServiceKind {
    /// Every service, in the order they are started (and the reverse of the order they
    /// are stopped): member opens accounts, and the rest fetch member's keys.
    pub const ALL: [ServiceKind; 5] = [
        ServiceKind::Account,
        ServiceKind::Member,
        ServiceKind::Order,
        ServiceKind::Gate,
        ServiceKind::Orchestrator,
    ];

    /// The binary and package name.
    pub fn name(self) -> &'static str {
        match self {
            ServiceKind::Account => "account",
            ServiceKind::Member => "member",
            ServiceKind::Order => "order",
            ServiceKind::Gate => "gate",
            ServiceKind::Orchestrator => "orchestrator",
        }
    }

    /// The production port (docs/ARCHITECTURE.md).
    pub fn default_port(self) -> u16 {
        match self {
            ServiceKind::Account => 8082,
            ServiceKind::Member => 8081,
            ServiceKind::Order => 8084,
            ServiceKind::Gate => 8085,
            ServiceKind::Orchestrator => 8083,
        }
    }

    /// The PostgreSQL role the service connects as, if it uses PostgreSQL.
    pub fn db_role(self) -> Option<&'static str> {
        match self {
            ServiceKind::Account => Some("account_app"),
            ServiceKind::Member => Some("member_app"),
            ServiceKind::Order => Some("order_app"),
            ServiceKind::Orchestrator => Some("payment_app"),
            ServiceKind::Gate => None,
        }
    }
}

impl fmt::Display for ServiceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
