//! memtape's servers. [`app`] is the HTTP service `memtape serve` runs: the REST API under
//! `/v1`, the OpenAPI 3.1 document at `/openapi.json` (derived from the wire types) and
//! `/healthz`; [`serve`] runs it until a shutdown signal, finishing the requests in flight.
//! The engine is synchronous: every call runs on tokio's blocking pool, at most
//! [`Limits::engine_calls`] at once ([`AppState::run`]).

mod appender;
mod auth;
pub mod error;
mod extract;
pub mod guard;
pub mod idempotency;
mod indexer;
pub mod keys;
pub mod mcp;
mod metrics;
mod rest;
mod state;
mod ui;
pub mod wire;

use std::future::Future;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use tokio::net::TcpListener;
use tower_http::limit::RequestBodyLimitLayer;
use utoipa::OpenApi;

pub use crate::metrics::{EmbedCounts, ModelUse, count_embedder};
pub use auth::DEFAULT_TENANT;
pub use error::{ApiError, Result};
pub use guard::Sites;
pub use indexer::Indexer;
pub use keys::{KeyError, KeyRecord, KeyStore};
pub use state::{AppState, Caller, Limits, ModelSetup, Role};

/// The OpenAPI document of the REST API.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "memtape",
        description = "Long-term memory for LLM agents: the tape, history, memory tiers, search and the memory tools. Every request is confined to the tenant of its API key.",
        license(name = "Apache-2.0")
    ),
    paths(rest::healthz),
    components(schemas(
        error::ErrorBody,
        wire::ChatMessage,
        wire::AppendBody,
        wire::names::RoleName,
        wire::names::KindName,
        wire::names::ScopeName,
        wire::names::ModeName,
        wire::names::ViewName,
        wire::names::FormatName,
        wire::FileRefWire
    )),
    modifiers(&BearerAuth, &Conventions),
    security(("bearer" = []))
)]
pub struct ApiDoc;

/// Adds the bearer-key security scheme.
struct BearerAuth;

impl utoipa::Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some("An API key from `memtape keys create`."))
                    .build(),
            ),
        );
    }
}

/// The API's conventions, written into every operation of the document: names (`agent`,
/// `user`, `session`) follow the engine's scope rule (1 to 256 bytes, no control character;
/// JSON Schema counts characters, so the document says at most 256 characters and the
/// description says bytes), and every operation may answer with the error statuses the
/// server uses, each with the error body.
struct Conventions;

impl utoipa::Modify for Conventions {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::schema::{Object, Type};
        use utoipa::openapi::{RefOr, ResponseBuilder};
        let name = || {
            Object::builder()
                .schema_type(Type::String)
                .min_length(Some(1))
                .max_length(Some(256))
                .description(Some("1 to 256 bytes of UTF-8, no control character"))
                .pattern(Some("^[^\\u0000-\\u001F\\u007F-\\u009F]+$"))
                .build()
        };
        let errors = [
            ("400", "Bad input: malformed JSON, a bad parameter or name"),
            ("401", "No API key, or one that is not valid"),
            ("403", "The key may not do this"),
            ("404", "Not found (or not this tenant's)"),
            ("409", "The state changed under the request"),
            ("413", "The body is over the limit"),
            ("415", "The body is not JSON"),
            ("422", "Valid JSON of the wrong shape"),
        ];
        let idempotency_key = || {
            use utoipa::openapi::path::{ParameterBuilder, ParameterIn};
            ParameterBuilder::new()
                .name("Idempotency-Key")
                .parameter_in(ParameterIn::Header)
                .required(utoipa::openapi::Required::False)
                .description(Some(
                    "Run this write once: sent again with the same key (within 24 hours), it \
                     answers the first answer and stores nothing; 409 while the first is \
                     still running, 422 for a key used with another request",
                ))
                .schema(Some(
                    Object::builder()
                        .schema_type(Type::String)
                        .min_length(Some(1))
                        .max_length(Some(255))
                        .pattern(Some("^[!-~]+$"))
                        .build(),
                ))
                .build()
        };
        for item in openapi.paths.paths.values_mut() {
            for op in [
                &mut item.post,
                &mut item.put,
                &mut item.patch,
                &mut item.delete,
            ]
            .into_iter()
            .flatten()
            {
                op.parameters
                    .get_or_insert_with(Vec::new)
                    .push(idempotency_key());
            }
            let ops = [
                &mut item.get,
                &mut item.post,
                &mut item.put,
                &mut item.patch,
                &mut item.delete,
            ];
            for op in ops.into_iter().flatten() {
                for param in op.parameters.iter_mut().flatten() {
                    if ["agent", "user", "session"].contains(&param.name.as_str()) {
                        param.schema = Some(RefOr::T(name().into()));
                    }
                }
                for (status, description) in errors {
                    op.responses
                        .responses
                        .entry(status.to_owned())
                        .or_insert_with(|| {
                            ResponseBuilder::new()
                                .description(description)
                                .content(
                                    "application/json",
                                    utoipa::openapi::ContentBuilder::new()
                                        .schema(Some(RefOr::Ref(
                                            utoipa::openapi::Ref::from_schema_name("ErrorBody"),
                                        )))
                                        .build(),
                                )
                                .build()
                                .into()
                        });
                }
            }
        }
    }
}

/// The OpenAPI document: the server's own routes and every `/v1` operation.
pub fn openapi() -> utoipa::openapi::OpenApi {
    let mut doc = ApiDoc::openapi();
    doc.merge(rest::openapi());
    utoipa::Modify::modify(&Conventions, &mut doc);
    doc
}

/// The OpenAPI document as JSON.
pub fn openapi_json() -> String {
    openapi()
        .to_pretty_json()
        .unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}

/// The HTTP service: the REST API, MCP at `/mcp`, `/openapi.json` and `/healthz`.
pub fn app(state: AppState) -> Router {
    let mcp = mcp::mcp_service(state.clone());
    router(state, mcp)
}

/// [`app`] with `mcp` mounted at `/mcp`.
fn router(
    state: AppState,
    mcp: rmcp::transport::streamable_http_server::StreamableHttpService<
        mcp::Memtape,
        rmcp::transport::streamable_http_server::session::local::LocalSessionManager,
    >,
) -> Router {
    let mcp = tower::Layer::layer(
        &axum::middleware::from_fn_with_state(state.clone(), mcp::limit::limit),
        mcp,
    );
    let api = rest::routes()
        .route_service("/mcp", mcp)
        .fallback(|| async { ApiError::not_found("no such route") })
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            idempotency::remember,
        ))
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::authenticate,
        ));
    let limits = state.limits().clone();
    Router::new()
        .route("/healthz", get(rest::healthz))
        .route(
            "/openapi.json",
            get(|| async {
                (
                    [(axum::http::header::CONTENT_TYPE, "application/json")],
                    openapi_json(),
                )
            }),
        )
        // Prometheus' text, not JSON: outside `/v1` and the OpenAPI document, with access of
        // its own (no key on loopback, an admin key elsewhere).
        .route(
            crate::metrics::METRICS_PATH,
            get(crate::metrics::serve_metrics),
        )
        .merge(ui::router())
        .merge(api)
        // Inside the body limit: a body announced over it is refused before it is read.
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            deadline,
        ))
        .layer(RequestBodyLimitLayer::new(largest_body(&limits)))
        // axum's own 2 MiB default for JSON bodies would undercut the configured limit.
        .layer(axum::extract::DefaultBodyLimit::max(largest_body(&limits)))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            count_activity,
        ))
        // Outermost: a request a page of another site made is refused before anything.
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            guard::guard,
        ))
        // Around it all: MateClaw's paths answer every failure in MateClaw's envelope.
        .layer(axum::middleware::from_fn(rest::mateclaw_compat::envelope))
        // Outside everything: every answer is counted as the client got it.
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            crate::metrics::count_requests,
        ))
        .with_state(state)
}

/// The largest body any route takes: the JSON limit, or an upload's.
fn largest_body(limits: &Limits) -> usize {
    limits
        .body_bytes
        .max(limits.upload_bytes.saturating_add(rest::MULTIPART_OVERHEAD))
}

/// The largest body the route at `path` takes: an upload's on the upload route
/// ([`Limits::upload_bytes`] and the multipart's own bytes), the JSON limit elsewhere.
fn body_limit(limits: &Limits, path: &str) -> usize {
    if path == rest::UPLOAD_PATH {
        limits.upload_bytes.saturating_add(rest::MULTIPART_OVERHEAD)
    } else {
        limits.body_bytes
    }
}

/// The request timeout ([`Limits::request_timeout`]), kept so that a write never answers
/// a timeout for work it then commits (a client retrying it would store it twice):
/// - a read (`GET`, `HEAD`) has the whole timeout; it writes nothing, so cutting it off
///   loses nothing;
/// - a write has the timeout to send its whole body (a slow client is cut off with 408
///   before anything is stored); from then on it runs to its end, on a task of its own
///   that a client hanging up does not stop, and answers with what it committed.
async fn deadline(
    axum::extract::State(state): axum::extract::State<AppState>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let limits = state.limits();
    let timeout = limits.request_timeout;
    let too_slow = || {
        ApiError::new(
            axum::http::StatusCode::REQUEST_TIMEOUT,
            "timeout",
            format!("the request took over {timeout:?}"),
        )
        .into_response()
    };
    if request.method().is_safe() {
        return tokio::time::timeout(timeout, next.run(request))
            .await
            .unwrap_or_else(|_| too_slow());
    }
    let limit = body_limit(limits, request.uri().path());
    // The body is left unread, so the connection cannot carry another request: saying
    // so lets a keep-alive client open a new one instead of reusing a socket about to close.
    let unread = |mut response: axum::response::Response| {
        response.headers_mut().insert(
            axum::http::header::CONNECTION,
            axum::http::HeaderValue::from_static("close"),
        );
        response
    };
    let too_large = || {
        unread(
            ApiError::new(
                axum::http::StatusCode::PAYLOAD_TOO_LARGE,
                "payload_too_large",
                format!("the body is over the limit of {limit} bytes"),
            )
            .into_response(),
        )
    };
    let announced = request
        .headers()
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|h| h.to_str().ok())
        .and_then(|h| h.parse::<u64>().ok());
    if announced.is_some_and(|n| n > limit as u64) {
        return too_large();
    }
    let (parts, body) = request.into_parts();
    let body = match tokio::time::timeout(timeout, axum::body::to_bytes(body, limit)).await {
        Err(_) => {
            return unread(
                ApiError::new(
                    axum::http::StatusCode::REQUEST_TIMEOUT,
                    "timeout",
                    format!(
                        "the request's body did not arrive within {timeout:?}; nothing was stored"
                    ),
                )
                .into_response(),
            );
        }
        Ok(Err(e)) => {
            return if rest::is_length_limit(&e) {
                too_large()
            } else {
                unread(
                    ApiError::bad_request(format!("could not read the body: {e}")).into_response(),
                )
            };
        }
        Ok(Ok(body)) => body,
    };
    let request = axum::extract::Request::from_parts(parts, axum::body::Body::from(body));
    tokio::spawn(next.run(request))
        .await
        .unwrap_or_else(|e| ApiError::internal(format!("the request failed: {e}")).into_response())
}

/// Counts each request in flight (until its handler has answered; a streamed body's
/// rest is not counted), so the background embedder gives way to requests.
async fn count_activity(
    axum::extract::State(state): axum::extract::State<AppState>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let _busy = state.activity().begin();
    next.run(request).await
}

/// How often the emergence schedule is looked at: a schedule fires within this of its time.
const SCHEDULE_TICK: Duration = Duration::from_secs(20);

/// Runs the schedules until `stop`: each agent's emergence (MateClaw's per-agent cron job;
/// only with a model) and retention ([`AppState::run_due_retention`]). Each tick covers
/// the time since the last one, so a slow tick misses nothing.
async fn schedules(state: state::WeakState, stop: impl Future<Output = ()>) {
    tokio::pin!(stop);
    let mut last = chrono::Utc::now();
    loop {
        tokio::select! {
            () = tokio::time::sleep(SCHEDULE_TICK) => {}
            () = &mut stop => return,
        }
        let Some(state) = state.upgrade() else { return };
        let now = chrono::Utc::now();
        state.run_due_emergences(last, now).await;
        state.run_due_retention(last, now).await;
        last = now;
    }
}

/// How often the WAL captures that failed (a full disk) are retried, and unfinished
/// erasures looked for.
const RECAPTURE_TICK: Duration = Duration::from_secs(5);

/// Until `stop`: finishes the erasures a stopped process left unfinished
/// ([`AppState::finish_erasures`]), at once and then each tick, and retries the WAL
/// captures that failed ([`AppState::retry_captures`]).
async fn recapture(state: state::WeakState, stop: impl Future<Output = ()>) {
    tokio::pin!(stop);
    if let Some(state) = state.upgrade() {
        state.finish_erasures().await;
    }
    loop {
        tokio::select! {
            () = tokio::time::sleep(RECAPTURE_TICK) => {}
            () = &mut stop => return,
        }
        let Some(state) = state.upgrade() else { return };
        state.finish_erasures().await;
        state.retry_captures().await;
    }
}

/// How often the metrics' histogram samples are folded into their buckets.
const METRICS_UPKEEP: Duration = Duration::from_secs(5);

/// Until `stop`: the metrics' upkeep, so samples do not pile up between scrapes (or on a
/// server nobody scrapes).
async fn metrics_upkeep(state: state::WeakState, stop: impl Future<Output = ()>) {
    tokio::pin!(stop);
    loop {
        tokio::select! {
            () = tokio::time::sleep(METRICS_UPKEEP) => {}
            () = &mut stop => return,
        }
        let Some(state) = state.upgrade() else { return };
        state.metrics().upkeep();
    }
}

/// Serves `app(state)` on `listener` until `shutdown` completes, then stops accepting and
/// waits up to `grace` for the requests in flight. Returns once they are done (or the
/// grace ran out); the caller then drops the state, which closes the store.
///
/// Connections are served by hyper directly (what `axum::serve` does inside) so that a
/// header read timeout can be set: a client that sends its headers slower than
/// [`Limits::header_timeout`] is disconnected; the body is bounded by the request timeout.
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
    grace: Duration,
) -> std::io::Result<()> {
    // One signal, two listeners: the accept loop stops, and MCP ends its sessions (their
    // open event streams would otherwise keep the graceful shutdown waiting).
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    });
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|stop| *stop).await;
    };
    let header_timeout = state.limits().header_timeout;
    tokio::spawn(schedules(state.downgrade(), stopped(stop_rx.clone())));
    tokio::spawn(recapture(state.downgrade(), stopped(stop_rx.clone())));
    tokio::spawn(metrics_upkeep(state.downgrade(), stopped(stop_rx.clone())));
    let mcp = mcp::mcp_service_until(state.clone(), stopped(stop_rx.clone()));
    let weak = state.downgrade();
    let app = router(state, mcp);
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let stop = stopped(stop_rx);
    tokio::pin!(stop);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                // Out of file descriptors and the like: wait a moment rather than spin.
                Err(e) => {
                    tracing::warn!("accepting a connection failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut stop => break,
        };
        let _ = stream.set_nodelay(true);
        let service = hyper_util::service::TowerToHyperService::new(app.clone());
        let connection = hyper::server::conn::http1::Builder::new()
            .timer(hyper_util::rt::TokioTimer::new())
            .header_read_timeout(header_timeout)
            .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!("connection closed: {e}");
            }
        });
    }
    drop(listener);
    // After the signal, the in-flight requests get `grace` to finish.
    tokio::select! {
        () = graceful.shutdown() => {}
        () = tokio::time::sleep(grace) => {
            tracing::warn!("requests still running after {grace:?}; stopping anyway");
        }
    }
    if let Some(state) = weak.upgrade() {
        state.retry_captures().await;
    }
    if let Some(state) = weak.upgrade()
        && state.captures_waiting() > 0
    {
        // The messages are on the tape: the log says how to record their captures later.
        for (tenant, ids) in state.captures_waiting_by_tenant() {
            let shown: Vec<String> = ids.iter().take(100).map(ToString::to_string).collect();
            tracing::error!(
                %tenant,
                waiting = ids.len(),
                "stopping with WAL captures that could not be recorded (their messages are on \
                 the tape); record them with: memtape wal capture --tenant {tenant} {}{}",
                shown.join(" "),
                if ids.len() > shown.len() { " …" } else { "" }
            );
        }
    }
    Ok(())
}
