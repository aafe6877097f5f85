//! Transfers through a crash: members stream keyed transfers to one another while the
//! account process is SIGKILLed and started again; each transfer is sent until it is
//! answered, under its one `Idempotency-Key`. Both sides of a transfer are one
//! statement, so a crash between the debit side and the credit side cannot exist: read
//! from PostgreSQL afterwards, every transfer is there whole (its two rows summing to
//! zero) or not at all, every key has exactly one transfer, every balance is its
//! opening moved by what it sent and received, and sending every key again moves
//! nothing.

use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use futures::future::join_all;
use paysaga_common::{
    auth::MemberId,
    client::{Answer, CallError},
    money::Amount,
};
use paysaga_contracts::account::{
    api::{Recipient, Transfer, TransferKey, TransferRequest},
    client::AccountClient,
};
use paysaga_e2e::{invariants, tamper, ServiceKind, Stack, StackOptions, Stop};
use sqlx::PgPool;

const MEMBERS: usize = 8;
const PER_MEMBER: usize = 40;
const OPENING: i64 = 10_000;

fn amount(n: usize) -> i64 {
    1 + (n % 5) as i64
}

/// Sends one transfer until it is answered (a process being killed or started answers
/// nothing, or 503): the answer, or the code it was refused with.
async fn until_answered(
    client: &AccountClient,
    key: &str,
    req: &TransferRequest,
) -> Result<Answer<Transfer>, String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match client.transfer(key, req).await {
            Ok(answer) => return Ok(answer),
            Err(CallError::Rejected { body, .. }) => return Err(body.code),
            Err(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(unknown) => return Err(format!("never answered: {unknown:?}")),
        }
    }
}

/// Transfers written, by their out row.
async fn transfers_written(pool: &PgPool) -> anyhow::Result<i64> {
    Ok(sqlx::query_scalar(
        "SELECT COUNT(*) FROM account_service.transactions WHERE kind = 'TRANSFER_OUT'",
    )
    .fetch_one(pool)
    .await?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn transfers_are_whole_or_absent_through_account_crashes() -> anyhow::Result<()> {
    let mut stack = Stack::start(
        StackOptions::new("transfers-crash")
            .env(ServiceKind::Account, "MEMBER_RATE_PER_SEC", 10_000)
            .env(ServiceKind::Account, "MEMBER_RATE_BURST", 10_000),
    )
    .await?;
    let (endpoints, admin) = stack.operator();
    let members = admin.open_buyers("sender", &[OPENING; MEMBERS], 4).await?;
    let pool = stack.admin_pool().await;

    // Member i sends to member i+1, a transfer at a time, each under its own key.
    let streams: Vec<_> = (0..MEMBERS)
        .map(|i| {
            let client = AccountClient::new(
                &endpoints.account,
                members[i].token.clone(),
                Duration::from_secs(5),
            );
            let to = MemberId::parse(members[(i + 1) % MEMBERS].member.as_str())
                .map_err(anyhow::Error::msg)?;
            Ok(tokio::spawn(async move {
                let mut answers = Vec::with_capacity(PER_MEMBER);
                for n in 0..PER_MEMBER {
                    let req = TransferRequest {
                        to: Recipient::MemberId(to.clone()),
                        amount: Amount::new(amount(n)).expect("positive"),
                    };
                    let key = format!("t-{n}");
                    answers.push((
                        key.clone(),
                        req.clone(),
                        until_answered(&client, &key, &req).await,
                    ));
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                (client, answers)
            }))
        })
        .collect::<anyhow::Result<_>>()?;

    // Two kills, each once transfers are streaming.
    let mut written_at_kills = Vec::new();
    for wave in 1..=2 {
        let deadline = Instant::now() + Duration::from_secs(30);
        let goal = (wave * MEMBERS * PER_MEMBER / 4) as i64;
        loop {
            let written = transfers_written(&pool).await?;
            if written >= goal || Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        stack.stop(ServiceKind::Account, Stop::Kill).await?;
        written_at_kills.push(transfers_written(&pool).await?);
        tokio::time::sleep(Duration::from_millis(300)).await;
        stack.start_service(ServiceKind::Account).await?;
    }
    eprintln!("killed the account service with {written_at_kills:?} transfers written");
    let expected_total = (MEMBERS * PER_MEMBER) as i64;
    assert!(
        written_at_kills.iter().all(|&w| w < expected_total),
        "a kill came after the streams ended: {written_at_kills:?}"
    );

    let mut streamed = Vec::with_capacity(MEMBERS);
    for s in streams {
        streamed.push(s.await?);
    }
    assert_eq!(stack.starts(ServiceKind::Account), Some(3));

    // Every transfer answered, and each key's ledger row is that answer.
    let mut expected: BTreeMap<i64, i64> =
        members.iter().map(|m| (m.account_id, OPENING)).collect();
    for (i, (_, answers)) in streamed.iter().enumerate() {
        let member = MemberId::parse(members[i].member.as_str()).map_err(anyhow::Error::msg)?;
        for (key, req, answer) in answers {
            let answer = answer
                .as_ref()
                .unwrap_or_else(|e| panic!("{} {key}: {e}", member.as_str()));
            assert!(matches!(answer.status, 200 | 201), "{answer:?}");
            let t = &answer.body;
            assert_eq!(t.amount, req.amount.minor());
            let ledger_key = TransferKey::parse(key.as_str())
                .map_err(anyhow::Error::msg)?
                .operation_key(&member);
            let row: (uuid::Uuid, i64, i64) = sqlx::query_as(
                r#"SELECT id, account_id, counter_account_id FROM account_service.transactions
                   WHERE operation_key = $1 AND kind = 'TRANSFER_OUT'"#,
            )
            .bind(ledger_key.as_str())
            .fetch_one(&pool)
            .await?;
            assert_eq!(row, (t.id, t.from_account_id, t.to_account_id));
            *expected.entry(t.from_account_id).or_default() -= t.amount;
            *expected.entry(t.to_account_id).or_default() += t.amount;
        }
    }

    // Whole or absent: one transfer per key, each two rows summing to zero, every
    // balance explained by its rows, no money made or lost.
    let report = invariants::check(&pool).await?;
    eprintln!("{report:#?}");
    report.assert_holds();
    assert_eq!(report.transfers, expected_total, "one transfer per key");
    assert_eq!(report.transfers_unbalanced, 0);
    let balances = |pool: PgPool| async move {
        let rows: Vec<(i64, i64)> = sqlx::query_as(
            "SELECT id, balance FROM account_service.accounts WHERE kind = 'MEMBER' ORDER BY id",
        )
        .fetch_all(&pool)
        .await?;
        anyhow::Ok(rows.into_iter().collect::<BTreeMap<i64, i64>>())
    };
    assert_eq!(balances(pool.clone()).await?, expected);

    // Every key again, as a client that never heard its answer would: the stored
    // transfer back, nothing moved.
    let again = join_all(streamed.iter().map(|(client, answers)| async move {
        let mut replays = Vec::new();
        for (key, req, first) in answers {
            replays.push((until_answered(client, key, req).await, first.clone()));
        }
        replays
    }))
    .await;
    for (replay, first) in again.into_iter().flatten() {
        let (replay, first) = (replay.expect("replayed"), first.expect("answered"));
        assert_eq!((replay.status, &replay.body), (200, &first.body));
    }
    assert_eq!(transfers_written(&pool).await?, expected_total);
    assert_eq!(balances(pool.clone()).await?, expected);

    // And the checker sees a transfer whose sides disagree.
    let bump = |d: i64| {
        format!(
            "UPDATE account_service.transactions SET amount = amount + ({d}) \
             WHERE id = (SELECT id FROM account_service.transactions WHERE kind = 'TRANSFER_IN' ORDER BY id LIMIT 1)"
        )
    };
    tamper(&pool, &[bump(1)]).await?;
    let broken = invariants::check(&pool).await?;
    tamper(&pool, &[bump(-1)]).await?;
    assert_eq!(
        (broken.transfers_unbalanced, broken.ledger_mismatches),
        (1, 1),
        "{broken:#?}"
    );
    Ok(())
}
