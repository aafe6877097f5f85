//! Logs (tracing, JSON or pretty), traces (OpenTelemetry over OTLP/HTTP, off unless
//! configured) and Prometheus metrics, with the HTTP middleware that records every
//! request, continues the caller's trace and logs internal errors once with their
//! cause chain.

use std::{
    sync::OnceLock,
    time::{Duration, Instant},
};

use axum::{
    extract::{MatchedPath, Request},
    http::Method,
    middleware::Next,
    response::Response,
};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use opentelemetry::{
    trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState},
    Context,
};
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing::{field, Instrument, Span};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::{layer::SubscriberExt, util::SubscriberInitExt, EnvFilter, Layer};

use crate::{config::LogFormat, error::InternalErrorReport};

/// The W3C trace-context header every paysaga client sends and every service reads.
pub const TRACEPARENT: &str = "traceparent";

/// The OTLP endpoint variables; traces are exported only when one of them is set.
const OTLP_ENDPOINT_VARS: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
];

/// The tracer provider, set once when traces are exported. Its absence is the cheap
/// check every hot path makes first: no header is read or written, no span context
/// built, when tracing is off.
static PROVIDER: OnceLock<SdkTracerProvider> = OnceLock::new();

/// Whether this process exports traces (an OTLP endpoint was configured at start).
#[inline]
pub fn tracing_enabled() -> bool {
    PROVIDER.get().is_some()
}

/// [`init_tracing_for`] with the service name from `OTEL_SERVICE_NAME`, else `paysaga`.
pub fn init_tracing(format: LogFormat) {
    init_tracing_for("paysaga", format);
}

/// Installs the tracing subscriber once per process; later calls are no-ops (tests
/// start several services in one process). Logs go to stdout; spans are also exported
/// over OTLP/HTTP (protobuf) as `service` (unless `OTEL_SERVICE_NAME` says otherwise)
/// when `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set,
/// batched by the SDK (`OTEL_BSP_SCHEDULE_DELAY`, `OTEL_BSP_MAX_QUEUE_SIZE`, ...).
pub fn init_tracing_for(service: &'static str, format: LogFormat) {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        let otel = otel_layer(service);
        let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
        let fmt = match format {
            LogFormat::Json => tracing_subscriber::fmt::layer()
                .json()
                .with_current_span(false)
                .boxed(),
            LogFormat::Pretty => tracing_subscriber::fmt::layer().compact().boxed(),
        };
        let installed = tracing_subscriber::registry()
            .with(filter)
            .with(fmt)
            .with(otel)
            .try_init();
        if installed.is_err() {
            // Another subscriber was there first: ours, and its exporter, stay unused.
            if let Some(provider) = PROVIDER.get() {
                let _ = provider.shutdown();
            }
        }
    });
}

/// The OpenTelemetry layer, when an OTLP endpoint is configured; `None` (and no
/// exporter, thread or buffer) otherwise.
fn otel_layer<S>(service: &'static str) -> Option<impl Layer<S>>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    use opentelemetry::trace::TracerProvider as _;
    let configured = OTLP_ENDPOINT_VARS
        .iter()
        .any(|v| std::env::var(v).is_ok_and(|s| !s.trim().is_empty()));
    if !configured {
        return None;
    }
    let exporter = match opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .build()
    {
        Ok(e) => e,
        Err(e) => {
            eprintln!("traces are not exported: the OTLP exporter cannot be built: {e}");
            return None;
        }
    };
    let mut resource = opentelemetry_sdk::Resource::builder();
    if std::env::var("OTEL_SERVICE_NAME").is_err() {
        resource = resource.with_service_name(service);
    }
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource.build())
        .build();
    let tracer = provider.tracer("paysaga");
    let provider = PROVIDER.get_or_init(|| provider);
    opentelemetry::global::set_tracer_provider(provider.clone());
    Some(tracing_opentelemetry::layer().with_tracer(tracer))
}

/// Exports the spans still buffered (a stopping service calls this after its last
/// request). Nothing to do when tracing is off.
pub fn flush_traces() {
    if let Some(provider) = PROVIDER.get() {
        if let Err(e) = provider.force_flush() {
            tracing::debug!(error = %e, "flushing traces failed");
        }
    }
}

/// Parses a W3C `traceparent` (`00-<trace id>-<parent span id>-<flags>`) into a remote
/// parent context; `None` for anything malformed, which then simply starts a new trace.
pub fn context_from_traceparent(value: &str) -> Option<Context> {
    let mut parts = value.trim().split('-');
    let (version, trace, span, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    // Version 00 has exactly four parts; a later version may append more.
    if version.len() != 2
        || version == "ff"
        || (version == "00" && parts.next().is_some())
        || trace.len() != 32
        || span.len() != 16
        || flags.len() != 2
    {
        return None;
    }
    u8::from_str_radix(version, 16).ok()?;
    let trace_id = TraceId::from_hex(trace).ok()?;
    let span_id = SpanId::from_hex(span).ok()?;
    let flags = u8::from_str_radix(flags, 16).ok()?;
    let cx = SpanContext::new(
        trace_id,
        span_id,
        TraceFlags::new(flags) & TraceFlags::SAMPLED,
        true,
        TraceState::default(),
    );
    cx.is_valid()
        .then(|| Context::new().with_remote_span_context(cx))
}

/// The `traceparent` naming `span` as the parent; `None` when tracing is off.
pub fn traceparent(span: &Span) -> Option<String> {
    if !tracing_enabled() {
        return None;
    }
    let cx = span.context();
    let sc = cx.span().span_context().clone();
    sc.is_valid().then(|| {
        format!(
            "00-{}-{}-{:02x}",
            sc.trace_id(),
            sc.span_id(),
            sc.trace_flags().to_u8()
        )
    })
}

/// The `traceparent` of the current span ([`traceparent`]).
pub fn current_traceparent() -> Option<String> {
    traceparent(&Span::current())
}

/// Makes the context named by `traceparent` the parent of `span` (which must not have
/// been entered yet) and records the span's `trace_id` field, so logs inside it can be
/// found by trace. A missing or malformed `traceparent` leaves the span's own parent.
pub fn continue_trace(span: &Span, traceparent: Option<&str>) {
    if !tracing_enabled() {
        return;
    }
    if let Some(cx) = traceparent.and_then(context_from_traceparent) {
        let _ = span.set_parent(cx);
    }
    record_trace_id(span);
}

/// Records the span's trace id in its `trace_id` field (declared `field::Empty`).
pub fn record_trace_id(span: &Span) {
    if !tracing_enabled() {
        return;
    }
    let trace_id = span.context().span().span_context().trace_id();
    if trace_id != TraceId::INVALID {
        span.record("trace_id", field::display(trace_id));
    }
}

/// Links `span` to the span named by `traceparent` (a batch request to the payments
/// riding in it).
pub fn link(span: &Span, traceparent: &str) {
    if let Some(cx) = context_from_traceparent(traceparent) {
        span.add_link(cx.span().span_context().clone());
    }
}

/// One span per operation of a batch request, each the child of the trace context its
/// operation carried (`traceparents[i]`, from the payment it belongs to) and linked to
/// the batch request's span, so every payment's trace shows its own operation. Empty
/// (nothing made) when tracing is off or the batch carried no contexts.
///
/// The operations of a batch commit together, so each span lasts as long as the
/// batch's work: create them before it, record the outcome, drop them after.
pub fn batch_op_spans(
    traceparents: &[Option<String>],
    ops: usize,
    mut make: impl FnMut(usize) -> Span,
) -> Vec<Span> {
    if !tracing_enabled() || traceparents.is_empty() {
        return Vec::new();
    }
    let request = Span::current().context().span().span_context().clone();
    (0..ops)
        .map(|i| {
            let span = make(i);
            span.add_link(request.clone());
            // An operation without a context of its own stays a child of the request.
            continue_trace(&span, traceparents.get(i).and_then(|t| t.as_deref()));
            span
        })
        .collect()
}

/// Latency buckets in seconds, from 100µs to 10s.
const LATENCY_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];

/// How often histogram samples are folded into their buckets. `build_recorder` leaves
/// this to its caller: without it every sample waits in memory until the next scrape, so
/// a service nobody scrapes grows with every request it serves (the benchmark saw each
/// service's RSS creep drop after drop).
const METRICS_UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// The process's Prometheus recorder. The `metrics` facade is process-global by design,
/// so the recorder is installed once and shared by every router in the process.
pub fn metrics_handle() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), LATENCY_BUCKETS)
                .expect("static bucket list is non-empty")
                .build_recorder();
            let handle = recorder.handle();
            // Fails only if another recorder is installed; ours then simply stays unused.
            let _ = metrics::set_global_recorder(recorder);
            // A plain thread, not a task: the recorder may be created outside a runtime,
            // and must outlive whichever runtime created it.
            let upkeep = handle.clone();
            let spawned = std::thread::Builder::new()
                .name("metrics-upkeep".into())
                .spawn(move || loop {
                    std::thread::sleep(METRICS_UPKEEP_EVERY);
                    upkeep.run_upkeep();
                });
            if let Err(e) = spawned {
                tracing::error!(error = %e, "cannot start the metrics upkeep thread; histogram samples accumulate until scraped");
            }
            handle
        })
        .clone()
}

/// The `method` label: the standard methods by name, any other (clients may invent
/// methods at will) as `OTHER`, so the number of series stays bounded.
pub fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => "OTHER",
    }
}

/// The `route` label of requests that matched no route: their paths are the client's
/// choice, so they share one label.
pub const UNMATCHED_ROUTE: &str = "unmatched";

/// Records `http_requests_total` and `http_request_duration_seconds` by method, route
/// template and status (each from a bounded set, whatever clients send), and logs a
/// 500's cause chain (never sent to the client) exactly once. With tracing on, each
/// request runs in a server span continuing the caller's `traceparent`.
pub async fn http_middleware(req: Request, next: Next) -> Response {
    let start = Instant::now();
    let method = method_label(req.method());
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| UNMATCHED_ROUTE.to_owned());
    let response = if tracing_enabled() {
        let span = tracing::info_span!(
            "http request",
            otel.name = %format_args!("{method} {route}"),
            otel.kind = "server",
            http.request.method = method,
            http.route = %route,
            http.response.status_code = field::Empty,
            trace_id = field::Empty,
        );
        let parent = req.headers().get(TRACEPARENT).and_then(|v| v.to_str().ok());
        continue_trace(&span, parent);
        let response = next.run(req).instrument(span.clone()).await;
        span.record("http.response.status_code", response.status().as_u16());
        response
    } else {
        next.run(req).await
    };
    let status = response.status().as_u16().to_string();
    let elapsed = start.elapsed().as_secs_f64();
    if let Some(InternalErrorReport(chain)) = response.extensions().get::<InternalErrorReport>() {
        tracing::error!(%method, %route, error = %chain, "internal error");
    }
    let labels = [
        ("method", method.to_owned()),
        ("route", route),
        ("status", status),
    ];
    metrics::counter!("http_requests_total", &labels).increment(1);
    metrics::histogram!("http_request_duration_seconds", &labels).record(elapsed);
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparents_parse_strictly() {
        let ok = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let cx = context_from_traceparent(ok).expect("valid");
        let sc = cx.span().span_context().clone();
        assert_eq!(
            sc.trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(sc.span_id().to_string(), "00f067aa0ba902b7");
        assert!(sc.is_sampled() && sc.is_remote());
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-zzf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            assert!(context_from_traceparent(bad).is_none(), "{bad:?}");
        }
        assert!(
            context_from_traceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-x")
                .is_some(),
            "a later version may carry more"
        );
    }

    #[test]
    fn tracing_off_costs_nothing() {
        assert!(!tracing_enabled());
        assert_eq!(current_traceparent(), None);
        assert!(batch_op_spans(&[Some("x".into())], 1, |_| Span::none()).is_empty());
    }
}
