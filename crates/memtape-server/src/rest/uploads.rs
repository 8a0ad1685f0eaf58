//! Uploads (Dify's `POST /files/upload`): a file sent as `multipart/form-data` in the part
//! named `file`, kept in the caller's tenant's files folder and named by the id a message's
//! reference (`transfer_method: local_file`) then carries. The size is capped
//! ([`crate::Limits::upload_bytes`], 413 above it) and the type must be one memtape
//! accepts and agree with the bytes ([`memtape::upload_type`]). A retry with the same
//! `Idempotency-Key` stores nothing twice.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Serialize;
use utoipa::ToSchema;

use crate::error::{ApiError, ErrorBody, Result};
use crate::extract::ApiPath;
use crate::state::{AppState, Caller, Role as KeyRole};
use crate::wire::FileRefWire;

/// The path of the upload route (its body limit is the upload limit, not the JSON one).
pub(crate) const UPLOAD_PATH: &str = "/v1/files";

/// What a multipart body may hold besides the file (boundaries, part headers, other fields).
pub(crate) const MULTIPART_OVERHEAD: usize = 64 * 1024;

/// This module's routes.
pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route(UPLOAD_PATH, post(upload))
        .route("/v1/files/{id}", get(info))
}

/// An upload, as stored.
#[derive(Debug, Serialize, ToSchema)]
pub struct UploadWire {
    /// Its id: the `upload_file_id` of a reference.
    pub id: String,
    /// The name it was sent with.
    pub name: String,
    /// Its media type.
    pub media_type: String,
    /// Its size in bytes.
    pub size: u64,
    /// When it was uploaded (RFC 3339).
    pub created_at: String,
    /// A reference to it, ready to put in a message's `files`.
    pub reference: FileRefWire,
}

impl UploadWire {
    fn of(info: &memtape::UploadInfo) -> Self {
        UploadWire {
            id: info.id.clone(),
            name: info.name.clone(),
            media_type: info.media_type.clone(),
            size: info.size,
            created_at: info.created_at.clone(),
            reference: FileRefWire::of(&info.reference()),
        }
    }
}

/// The multipart body of an upload, as the OpenAPI document describes it.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct UploadForm {
    /// The file (its part's `Content-Type` says its type; `application/octet-stream` or
    /// none: its bytes do).
    #[schema(value_type = String, format = Binary)]
    pub file: Vec<u8>,
}

/// Uploads a file (Dify's upload): `multipart/form-data` with the file in the part named
/// `file`, at most the server's upload limit (15 MiB by default; 413 above it). Accepted
/// types: PNG, JPEG, GIF and WebP images, PDF, and UTF-8 text (`text/plain`,
/// `text/markdown`, `text/csv`, `application/json`); the type sent must agree with the
/// bytes, and its file type be one the server's `[attachments]` allows (422 otherwise). The request must carry an `Authorization` header (any bearer
/// value on a server without keys), which a page of another site cannot send without
/// asking first. The answer holds the id and a ready-to-use reference for a message's
/// `files`. Send an `Idempotency-Key` to retry safely.
#[utoipa::path(post, path = "/v1/files", tag = "attachments",
    request_body(content = UploadForm, content_type = "multipart/form-data"),
    responses((status = 201, body = UploadWire), (status = 400, body = ErrorBody),
        (status = 413, body = ErrorBody), (status = 415, body = ErrorBody),
        (status = 422, body = ErrorBody), (status = 503, body = ErrorBody)))]
pub async fn upload(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<(StatusCode, Json<UploadWire>)> {
    caller.require(KeyRole::Write)?;
    let content_type = headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|h| h.to_str().ok())
        .unwrap_or_default();
    let boundary = boundary(content_type).ok_or_else(|| {
        ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "an upload is sent as multipart/form-data with a boundary, the file in the part \
             named `file`",
        )
    })?;
    let part = file_part(&body, &boundary)?;
    let limit = state.limits().upload_bytes;
    if part.bytes.len() > limit {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!(
                "the file is {} bytes; the upload limit is {limit}",
                part.bytes.len()
            ),
        ));
    }
    if part.bytes.is_empty() {
        return Err(ApiError::unprocessable("file: the file is empty"));
    }
    let (media, file_type) = memtape::upload_type(part.content_type.as_deref(), part.bytes)
        .map_err(|e| ApiError::unprocessable(format!("file: {e}")))?;
    state
        .attachments_config()
        .allows(file_type)
        .map_err(|e| ApiError::unprocessable(format!("file: {e}")))?;
    let files = state.files_of(&caller.tenant)?;
    let bytes = part.bytes.to_vec();
    let name = part.filename.unwrap_or_default();
    let info = state
        .run(move |engine| Ok(files.store_upload(&bytes, &name, media, file_type, engine.now())?))
        .await?;
    Ok((StatusCode::CREATED, Json(UploadWire::of(&info))))
}

/// What an upload of the caller's tenant is. Another tenant's upload is not found, as one
/// that does not exist.
#[utoipa::path(get, path = "/v1/files/{id}", tag = "attachments",
    params(("id" = String, Path, description = "The upload's id")),
    responses((status = 200, body = UploadWire), (status = 400, body = ErrorBody),
        (status = 404, body = ErrorBody)))]
pub async fn info(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<UploadWire>> {
    caller.require(KeyRole::Read)?;
    let files = state.files_of(&caller.tenant)?;
    let lookup = id.clone();
    let found = state
        .run(move |_| {
            files
                .upload_info(&lookup)
                .map_err(|e| ApiError::bad_request(e.to_string()))
        })
        .await?;
    found
        .map(|info| Json(UploadWire::of(&info)))
        .ok_or_else(|| ApiError::not_found(format!("no upload {id}")))
}

/// The boundary of a `multipart/form-data` content type.
fn boundary(content_type: &str) -> Option<String> {
    let mut params = content_type.split(';');
    let media = params.next()?.trim();
    if !media.eq_ignore_ascii_case("multipart/form-data") {
        return None;
    }
    params.find_map(|p| {
        let (key, value) = p.split_once('=')?;
        if !key.trim().eq_ignore_ascii_case("boundary") {
            return None;
        }
        let value = value.trim().trim_matches('"');
        (!value.is_empty() && value.len() <= 70).then(|| value.to_owned())
    })
}

/// The part named `file` of a multipart body.
struct FilePart<'a> {
    bytes: &'a [u8],
    filename: Option<String>,
    content_type: Option<String>,
}

/// Finds the part named `file` in `body` (RFC 7578); a 400 naming what is wrong when the
/// body is not well formed or has no such part.
fn file_part<'a>(body: &'a [u8], boundary: &str) -> Result<FilePart<'a>> {
    let bad = |why: &str| ApiError::bad_request(format!("the multipart body: {why}"));
    let delimiter = format!("--{boundary}");
    let delimiter = delimiter.as_bytes();
    let mut at = find(body, delimiter, 0).ok_or_else(|| bad("no boundary"))?;
    loop {
        let after = at + delimiter.len();
        if body.get(after..after + 2) == Some(b"--") {
            return Err(bad("no part named `file`"));
        }
        let start = find(body, b"\r\n", after).ok_or_else(|| bad("a part is cut short"))? + 2;
        let head_end =
            find(body, b"\r\n\r\n", start).ok_or_else(|| bad("a part has no headers"))?;
        let head = std::str::from_utf8(&body[start..head_end])
            .map_err(|_| bad("a part's headers are not UTF-8"))?;
        let content = head_end + 4;
        let mut closing = b"\r\n".to_vec();
        closing.extend_from_slice(delimiter);
        let end = find(body, &closing, content).ok_or_else(|| bad("a part is not closed"))?;
        let mut name = None;
        let mut filename = None;
        let mut content_type = None;
        for line in head.split("\r\n") {
            let Some((key, value)) = line.split_once(':') else {
                continue;
            };
            if key.trim().eq_ignore_ascii_case("content-disposition") {
                name = param(value, "name");
                filename = param(value, "filename");
            } else if key.trim().eq_ignore_ascii_case("content-type") {
                content_type = Some(value.trim().to_owned());
            }
        }
        if name.as_deref() == Some("file") {
            return Ok(FilePart {
                bytes: &body[content..end],
                filename,
                content_type,
            });
        }
        at = end + 2;
    }
}

/// The value of `key` in a `Content-Disposition` header's parameters.
fn param(header: &str, key: &str) -> Option<String> {
    header.split(';').skip(1).find_map(|p| {
        let (k, v) = p.split_once('=')?;
        k.trim()
            .eq_ignore_ascii_case(key)
            .then(|| v.trim().trim_matches('"').to_owned())
    })
}

/// The first position of `needle` in `haystack` at or after `from`.
fn find(haystack: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    haystack
        .get(from..)?
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|p| p + from)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_file_part_is_found_among_others() {
        let body = b"--XY\r\nContent-Disposition: form-data; name=\"user\"\r\n\r\nada\r\n--XY\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.txt\"\r\nContent-Type: text/plain\r\n\r\nhello\r\n--XY--\r\n";
        let part = file_part(body, "XY").unwrap();
        assert_eq!(part.bytes, b"hello");
        assert_eq!(part.filename.as_deref(), Some("a.txt"));
        assert_eq!(part.content_type.as_deref(), Some("text/plain"));
        assert!(
            file_part(
                b"--XY\r\nContent-Disposition: form-data; name=\"x\"\r\n\r\n1\r\n--XY--",
                "XY"
            )
            .is_err()
        );
        assert!(file_part(b"garbage", "XY").is_err());
        assert_eq!(
            boundary("multipart/form-data; boundary=\"abc\"").as_deref(),
            Some("abc")
        );
        assert_eq!(boundary("application/json"), None);
    }
}
