//! The list pages (payments, webhook deliveries, the audit trail, approvals): one handler
//! reads the request and frames the page; each page only says what it lists.

use std::future::Future;

use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use maud::{html, Markup};
use paysaga_staff::{allow::ANY, Acting};
use serde::de::DeserializeOwned;

use crate::layout::{self, Section};
use crate::{auth::Person, desk::DeskError, state::ConsoleState};

/// Why a list page shows no list.
pub enum NoList {
    /// The operator logic refused or failed: its error page, in the page's section.
    Failed(DeskError),
    /// Another answer (a filter the page refuses, shown its own way).
    Answer(Response),
}

impl<E: Into<DeskError>> From<E> for NoList {
    fn from(e: E) -> Self {
        NoList::Failed(e.into())
    }
}

/// A list page, by the filters of its query string: what [`page`] needs to draw it.
pub trait ListPage: DeserializeOwned + Send + 'static {
    /// Where the page belongs in the navigation (and its error pages with it).
    const SECTION: Section;
    /// The page's title.
    const TITLE: &'static str;

    /// The page's body for these filters, shown to `op`; or why there is none (filters
    /// that are refused, a list that could not be read).
    fn body(
        self,
        state: ConsoleState,
        op: Acting,
    ) -> impl Future<Output = Result<Markup, NoList>> + Send;
}

/// The handler of every list page: anyone signed in may read one, filtered by its query
/// string, in its section's frame.
#[tracing::instrument(skip_all, fields(staff = %op.name(), page = P::TITLE))]
pub async fn page<P: ListPage>(
    State(state): State<ConsoleState>,
    op: Person<{ ANY }>,
    Query(filters): Query<P>,
) -> Response {
    match filters.body(state, op.0).await {
        Ok(body) => layout::page(P::SECTION, P::TITLE, body).into_response(),
        Err(NoList::Failed(e)) => layout::failed(e, P::SECTION),
        Err(NoList::Answer(answer)) => answer,
    }
}

/// A list's table `#{id}`: the `header` row, then a row per item; with no items, `none`
/// (the page's "nothing to list" paragraph) instead.
pub fn table_or<T>(
    none: Markup,
    id: &str,
    header: Markup,
    items: &[T],
    row: impl Fn(&T) -> Markup,
) -> Markup {
    html! {
        @if items.is_empty() {
            (none)
        } @else {
            table id=(id) {
                (header)
                @for item in items { (row(item)) }
            }
        }
    }
}
