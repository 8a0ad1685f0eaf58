//! Export and import as JSONL: memtape's lossless format, Bub tapes and nanobot session
//! files. An export streams: memtape's format is read a page at a time per scope and
//! merged in tape order, each page one engine call, the lines sent through a small
//! channel to the response body, so neither the server's memory nor an engine thread holds
//! more than a few pages however large the store (a slow client only slows the pages
//! down). Bub and nanobot exports hold one session, which their formats need whole (Bub's
//! zone versions, nanobot's thread). An import is all or nothing, within the caller's
//! tenant, agent (and user), as `memtape import` is.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use memtape::{DynStore, Engine, Entry, EntryId, Filter, Format, Scope, Store};
use memtape_core::formats::memtape::line;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use utoipa::{IntoParams, ToSchema};

use super::existing;
use crate::error::{ApiError, ErrorBody, Result};
use crate::extract::ApiQuery;
use crate::state::{AppState, Caller, Role as KeyRole};

/// How many entries the merge keeps buffered across all scopes (at most one page of
/// [`PAGE_MAX`] per scope).
const BUFFERED: usize = 4096;
/// The largest page read from one scope.
const PAGE_MAX: usize = 256;
/// About how many bytes one engine call writes before handing them to the body.
const CHUNK: usize = 256 * 1024;
/// How many chunks wait between the engine and a slow client.
const CHANNEL: usize = 4;

/// This module's routes.
pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/export", get(export))
        .route("/v1/import", post(import))
}

/// What to export or import.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct TransferParams {
    /// The agent (default `default`).
    pub agent: Option<String>,
    /// The user.
    pub user: Option<String>,
    /// `memtape` (default, lossless), `bub` or `nanobot`.
    #[param(value_type = Option<crate::wire::names::FormatName>)]
    pub format: Option<String>,
    /// The session. Export: only this session (required for `bub` and `nanobot`; without
    /// it, memtape's format carries everything of the agent, or of the user). Import: the
    /// session to import into (default: the nanobot file's key; required for `bub`).
    pub session: Option<String>,
}

impl TransferParams {
    fn format(&self) -> Result<Format> {
        match self.format.as_deref().unwrap_or("memtape") {
            "memtape" => Ok(Format::Memtape),
            "bub" => Ok(Format::Bub),
            "nanobot" => Ok(Format::Nanobot),
            other => Err(ApiError::bad_request(format!(
                "format {other:?}: expected memtape, bub or nanobot"
            ))),
        }
    }
}

/// The response body: chunks from the producer task, in order.
struct Chunks(mpsc::Receiver<std::io::Result<Vec<u8>>>);

impl futures_core::Stream for Chunks {
    type Item = std::io::Result<Vec<u8>>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.poll_recv(cx)
    }
}

/// Exports JSONL, streamed. memtape's format without `session` carries every scope of the
/// agent (or of the user) in tape order: memory, sessions, nodes.
#[utoipa::path(get, path = "/v1/export", tag = "transfer", params(TransferParams),
    responses((status = 200, description = "JSON lines", content_type = "application/x-ndjson",
        body = String), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn export(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(p): ApiQuery<TransferParams>,
) -> Result<Response> {
    caller.require(KeyRole::Read)?;
    let format = p.format()?;
    let base = caller.scope(p.agent.as_deref().unwrap_or("default"), p.user.as_deref())?;
    let session = match &p.session {
        Some(s) => Some((base.clone().with_session(s)?, s.clone())),
        None if format != Format::Memtape => {
            return Err(ApiError::bad_request(
                "a bub or nanobot export holds one session: name it with session=",
            ));
        }
        None => None,
    };
    // What to export is settled (and a missing session refused) before the body starts.
    let planned = session.clone();
    let scopes = state
        .run(move |engine| match planned {
            Some((scope, name)) => {
                existing(engine, &scope, &name)?;
                Ok(vec![scope])
            }
            None => Ok(engine
                .store()
                .scopes(base.tenant())?
                .into_iter()
                .filter(|i| base.contains(&i.scope))
                .map(|i| i.scope)
                .collect()),
        })
        .await?;
    let (tx, rx) = mpsc::channel(CHANNEL);
    if format == Format::Memtape {
        tokio::spawn(stream_pages(state, Merge::new(scopes), tx));
    } else {
        let Some((scope, _)) = session else {
            return Err(ApiError::internal("a one-session export without a session"));
        };
        tokio::spawn(async move {
            let text = state
                .run(move |engine| {
                    let mut out = Vec::new();
                    engine.export(format, &scope, &mut out)?;
                    Ok(out)
                })
                .await;
            let chunk = text.map_err(|e| std::io::Error::other(e.message));
            let _ = tx.send(chunk).await;
        });
    }
    Ok((
        [(header::CONTENT_TYPE, "application/x-ndjson")],
        Body::from_stream(Chunks(rx)),
    )
        .into_response())
}

/// Sends the merge's lines to `tx` a chunk at a time, one engine call per chunk, until the
/// merge ends, the client goes away (the receiver is dropped) or a read fails (the body
/// then ends with an error, so the client sees a broken transfer, never a short one).
async fn stream_pages(
    state: AppState,
    mut merge: Merge,
    tx: mpsc::Sender<std::io::Result<Vec<u8>>>,
) {
    loop {
        let step = state
            .run(move |engine| {
                let mut out = Vec::with_capacity(CHUNK + 4096);
                let more = merge.write(engine, &mut out)?;
                Ok((merge, out, more))
            })
            .await;
        match step {
            Ok((next, out, more)) => {
                if !out.is_empty() && tx.send(Ok(out)).await.is_err() {
                    return;
                }
                if !more {
                    return;
                }
                merge = next;
            }
            Err(e) => {
                let _ = tx.send(Err(std::io::Error::other(e.message))).await;
                return;
            }
        }
    }
}

/// One scope's place in the merge.
struct Cursor {
    scope: Scope,
    after: EntryId,
    buf: VecDeque<Entry>,
    done: bool,
}

/// The entries of several scopes merged in id order, each scope read a page at a time.
struct Merge {
    cursors: Vec<Cursor>,
    heap: BinaryHeap<Reverse<(EntryId, usize)>>,
    page: usize,
    started: bool,
}

impl Merge {
    fn new(scopes: Vec<Scope>) -> Self {
        let page = (BUFFERED / scopes.len().max(1)).clamp(1, PAGE_MAX);
        Merge {
            cursors: scopes
                .into_iter()
                .map(|scope| Cursor {
                    scope,
                    after: EntryId(0),
                    buf: VecDeque::new(),
                    done: false,
                })
                .collect(),
            heap: BinaryHeap::new(),
            page,
            started: false,
        }
    }

    /// Reads the next page of cursor `i` if its buffer is empty, and queues its next entry.
    fn refill(&mut self, engine: &Engine<DynStore>, i: usize) -> Result<()> {
        let c = &mut self.cursors[i];
        if c.buf.is_empty() && !c.done {
            let filter = Filter {
                after: Some(c.after),
                limit: Some(self.page),
                ..Filter::default()
            };
            let page = engine.store().scan(&c.scope, &filter)?;
            c.done = page.len() < self.page;
            if let Some(last) = page.last() {
                c.after = last.id;
            }
            c.buf.extend(page);
        }
        if let Some(front) = c.buf.front() {
            self.heap.push(Reverse((front.id, i)));
        }
        Ok(())
    }

    /// Writes the next lines (about [`CHUNK`] bytes) to `out`; false when all are written.
    fn write(&mut self, engine: &Engine<DynStore>, out: &mut Vec<u8>) -> Result<bool> {
        if !self.started {
            self.started = true;
            for i in 0..self.cursors.len() {
                self.refill(engine, i)?;
            }
        }
        while out.len() < CHUNK {
            let Some(Reverse((_, i))) = self.heap.pop() else {
                return Ok(false);
            };
            if let Some(entry) = self.cursors[i].buf.pop_front() {
                out.extend_from_slice(line(&entry).as_bytes());
                out.push(b'\n');
            }
            self.refill(engine, i)?;
        }
        Ok(!self.heap.is_empty())
    }
}

/// A session an import wrote to.
#[derive(Debug, Serialize, ToSchema)]
pub struct ImportedSession {
    /// The session key.
    pub session: String,
    /// Its user, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
}

/// What an import did.
#[derive(Debug, Serialize, ToSchema)]
pub struct ImportWire {
    /// How many entries were written.
    pub entries: usize,
    /// The sessions written to.
    pub sessions: Vec<ImportedSession>,
    /// How many memory versions were recorded.
    pub memory_versions: usize,
    /// Whether ids were numbered anew after the store's existing entries.
    pub renumbered: bool,
}

/// Imports a JSONL body (up to the body limit) into the agent (or the user): all of it or
/// nothing. A memtape file's entries must lie within the caller's tenant, agent (and
/// user); an entry outside is refused and nothing is imported. A session that already
/// has entries is not mixed into (409).
#[utoipa::path(post, path = "/v1/import", tag = "transfer", params(TransferParams),
    request_body(content = String, content_type = "application/x-ndjson",
        description = "JSON lines in the format named"),
    responses((status = 201, body = ImportWire), (status = 400, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 409, body = ErrorBody),
        (status = 413, body = ErrorBody)))]
pub async fn import(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(p): ApiQuery<TransferParams>,
    request: Request,
) -> Result<(StatusCode, Json<ImportWire>)> {
    caller.require(KeyRole::Write)?;
    let format = p.format()?;
    let base = caller.scope(p.agent.as_deref().unwrap_or("default"), p.user.as_deref())?;
    let limit = state.limits().body_bytes;
    let bytes = axum::body::to_bytes(request.into_body(), limit)
        .await
        .map_err(|e| {
            if is_length_limit(&e) {
                ApiError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "payload_too_large",
                    format!("the body is over the limit of {limit} bytes"),
                )
            } else {
                ApiError::bad_request(format!("could not read the body: {e}"))
            }
        })?;
    let text = String::from_utf8(bytes.to_vec())
        .map_err(|e| ApiError::bad_request(format!("the body is not UTF-8: {e}")))?;
    if text.trim().is_empty() {
        // Most likely a client that lost its body on the way; a 201 would hide that.
        return Err(ApiError::bad_request(
            "the body is empty: send the file to import as the request body",
        ));
    }
    let session = p.session.clone();
    let report = state
        .run(move |engine| Ok(engine.import(format, &text, &base, session.as_deref())?))
        .await?;
    Ok((
        StatusCode::CREATED,
        Json(ImportWire {
            entries: report.entries,
            sessions: report
                .sessions
                .iter()
                .map(|s| ImportedSession {
                    session: s.session().unwrap_or_default().to_owned(),
                    user: s.user().map(str::to_owned),
                })
                .collect(),
            memory_versions: report.memory_versions,
            renumbered: report.placement == memtape::Placement::Renumbered,
        }),
    ))
}

/// Whether reading a body failed on the length limit (ours or the body limit layer's).
pub(crate) fn is_length_limit(e: &axum::Error) -> bool {
    let mut source: Option<&dyn std::error::Error> = Some(e);
    while let Some(s) = source {
        if s.to_string().contains("length limit") {
            return true;
        }
        source = s.source();
    }
    false
}
