//! memtape's servers. [`app`] is the HTTP service `memtape serve` runs: the REST API under
//! `/v1`, the OpenAPI 3.1 document at `/openapi.json` (derived from the wire types) and
//! `/healthz`; [`serve`] runs it until a shutdown signal, finishing the requests in flight.
//! The engine is synchronous: every call runs on tokio's blocking pool, at most
//! [`Limits::engine_calls`] at once ([`AppState::run`]).

mod auth;
pub mod error;
mod extract;
pub mod keys;
pub mod mcp;
mod rest;
mod state;
pub mod wire;

use std::future::Future;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use tokio::net::TcpListener;
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::timeout::TimeoutLayer;
use utoipa::OpenApi;

pub use auth::DEFAULT_TENANT;
pub use error::{ApiError, Result};
pub use keys::{KeyError, KeyRecord, KeyStore};
pub use state::{AppState, Caller, Limits, Role};

/// The OpenAPI document of the REST API.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "memtape",
        description = "Long-term memory for LLM agents: the tape, history, memory tiers, search and the memory tools. Every request is confined to the tenant of its API key.",
        license(name = "Apache-2.0")
    ),
    paths(rest::healthz),
    components(schemas(error::ErrorBody, wire::ChatMessage, wire::AppendBody)),
    modifiers(&BearerAuth),
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

/// The OpenAPI document: the server's own routes and every `/v1` operation.
pub fn openapi() -> utoipa::openapi::OpenApi {
    let mut doc = ApiDoc::openapi();
    doc.merge(rest::openapi());
    doc
}

/// The OpenAPI document as JSON.
pub fn openapi_json() -> String {
    openapi()
        .to_pretty_json()
        .unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}

/// The HTTP service: the REST API, `/openapi.json` and `/healthz`.
pub fn app(state: AppState) -> Router {
    let api = rest::routes()
        .route_service("/mcp", mcp::mcp_service(state.clone()))
        .fallback(|| async { ApiError::not_found("no such route") })
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
        .merge(api)
        .layer(RequestBodyLimitLayer::new(limits.body_bytes))
        .layer(TimeoutLayer::with_status_code(
            axum::http::StatusCode::REQUEST_TIMEOUT,
            limits.request_timeout,
        ))
        .with_state(state)
}

/// Serves `app(state)` on `listener` until `shutdown` completes, then stops accepting and
/// waits up to `grace` for the requests in flight. Returns once they are done (or the
/// grace ran out); the caller then drops the state, which closes the store.
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
    grace: Duration,
) -> std::io::Result<()> {
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
    let server = axum::serve(listener, app(state)).with_graceful_shutdown(async move {
        shutdown.await;
        let _ = done_tx.send(());
    });
    let server = tokio::spawn(async move { server.await });
    // After the signal, the in-flight requests get `grace` to finish.
    tokio::select! {
        result = server => result.map_err(std::io::Error::other)?,
        () = async {
            let _ = done_rx.await;
            tokio::time::sleep(grace).await;
        } => {
            tracing::warn!("requests still running after {grace:?}; stopping anyway");
            Ok(())
        }
    }
}
