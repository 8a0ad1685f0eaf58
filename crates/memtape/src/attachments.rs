//! Dify's file attachments, rebuilt on read (seed 002: history stores file references; "when
//! reading, files are rebuilt using `file_factory.build_from_mapping()`"). A message on the
//! tape keeps only references (an upload id, a tool file id, a URL); when it is sent to a
//! model, [`llm_message`] turns each into the provider's content part through a
//! [`FileResolver`]. A reference that cannot be resolved is named in the text, never
//! silently dropped.
//!
//! [`FilesDir`] resolves from a tenant's folder ([`FilesDir::of_tenant`]): the `default`
//! tenant's is `<data-dir>/files/` (where files always were, so a single-tenant data
//! directory keeps working unchanged), another tenant's `<data-dir>/files/tenants/<tenant>/`.
//! In it, uploads live under `uploads/<id>` (what they are under `upload-info/<id>.json`)
//! and tool files under `tool-files/<id>`. A reference is only ever checked and resolved in
//! its own tenant's folder, so another tenant's upload id is a file that does not exist.
//! Ids are plain names (no `/`, no leading dot), symlinks are not followed, and a file over
//! the size limit is not read.

use std::io::Read;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use memtape_core::{FileRef, FileSource, FileType, Message, Role};
use memtape_llm::{Attachment, AttachmentKind};

use crate::{Error, Result};

/// Turns a file reference into what the provider is sent.
pub trait FileResolver: Send + Sync {
    /// The attachment for `file`, or `None` when it cannot be found.
    fn resolve(&self, file: &FileRef) -> Result<Option<Attachment>>;
}

/// Resolves uploads and tool files from a folder, and URLs as they are.
#[derive(Clone, Debug)]
pub struct FilesDir {
    root: PathBuf,
    /// The folders from the files folder down to `root`, none of which may be a symlink.
    guarded: Vec<PathBuf>,
    max_bytes: u64,
}

/// The folder of the data directory attached files live in (`uploads/` and `tool-files/`
/// inside it).
pub const FILES_DIR: &str = "files";

/// The largest file sent to a model (20 MiB, the providers' usual limit for one image).
pub const MAX_ATTACHMENT_BYTES: u64 = 20 * 1024 * 1024;

/// The most files one message may reference.
pub const MAX_FILES_PER_MESSAGE: usize = 32;

/// The longest URL a reference may carry, in bytes.
pub const MAX_FILE_URL_BYTES: usize = 2048;

/// The media types an upload may have, with the file type each becomes.
pub const UPLOAD_TYPES: &[(&str, FileType)] = &[
    ("image/png", FileType::Image),
    ("image/jpeg", FileType::Image),
    ("image/gif", FileType::Image),
    ("image/webp", FileType::Image),
    ("application/pdf", FileType::Document),
    ("text/plain", FileType::Document),
    ("text/markdown", FileType::Document),
    ("text/csv", FileType::Document),
    ("application/json", FileType::Document),
];

/// What an upload is: `upload-info/<id>.json` beside its bytes.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct UploadInfo {
    /// Its id (the `upload_file_id` of a reference).
    pub id: String,
    /// The name it was uploaded with.
    pub name: String,
    /// Its media type (as sent, and as its bytes say).
    pub media_type: String,
    /// Its size in bytes.
    pub size: u64,
    /// Dify's file type it has in a reference.
    pub file_type: FileType,
    /// When it was uploaded (RFC 3339).
    pub created_at: String,
}

impl UploadInfo {
    /// A reference to this upload, ready to attach to a message.
    pub fn reference(&self) -> FileRef {
        FileRef {
            file_type: self.file_type,
            source: FileSource::LocalFile {
                upload_file_id: self.id.clone(),
            },
            belongs_to: memtape_core::FileOwner::User,
        }
    }
}

/// A reference that is not acceptable, as the error every surface reports (422).
fn refused(why: String) -> Error {
    Error::Invalid(memtape_core::Error::InvalidMessage(why))
}

/// The media type of an upload sent as `declared` (none, or `application/octet-stream`:
/// what its bytes say), if it is one of [`UPLOAD_TYPES`] and its bytes agree; an error
/// naming both otherwise.
pub fn upload_type(declared: Option<&str>, bytes: &[u8]) -> Result<(&'static str, FileType)> {
    let sniffed = media_type(bytes);
    let declared = declared
        .map(|d| {
            d.split(';')
                .next()
                .unwrap_or_default()
                .trim()
                .to_ascii_lowercase()
        })
        .filter(|d| !d.is_empty() && d != "application/octet-stream");
    let wanted = declared.as_deref().unwrap_or(sniffed);
    let wanted = if wanted == "image/jpg" {
        "image/jpeg"
    } else {
        wanted
    };
    let Some(&(media, file_type)) = UPLOAD_TYPES.iter().find(|(m, _)| *m == wanted) else {
        let allowed: Vec<&str> = UPLOAD_TYPES.iter().map(|(m, _)| *m).collect();
        return Err(refused(format!(
            "an upload of type {wanted} is not accepted (allowed: {})",
            allowed.join(", ")
        )));
    };
    let agrees = match media {
        m if m.starts_with("image/") || m == "application/pdf" => sniffed == m,
        _ => sniffed == "text/plain",
    };
    if !agrees {
        return Err(refused(format!(
            "the upload is sent as {media} but its bytes are {sniffed}"
        )));
    }
    Ok((media, file_type))
}

/// Checks a reference's shape, without looking for the file: a plain id, or an `http(s)`
/// URL of at most [`MAX_FILE_URL_BYTES`] without spaces or control characters.
pub fn check_reference(file: &FileRef) -> Result<()> {
    match &file.source {
        FileSource::LocalFile { upload_file_id: id }
        | FileSource::ToolFile { tool_file_id: id } => check_id(id),
        FileSource::RemoteUrl { url } => {
            let lower = url.get(..8).unwrap_or(url).to_ascii_lowercase();
            let rest = if lower.starts_with("https://") {
                &url[8..]
            } else if lower.starts_with("http://") {
                &url[7..]
            } else {
                return Err(refused(format!(
                    "file url {:?} is not an http or https URL",
                    cut(url)
                )));
            };
            if url.len() > MAX_FILE_URL_BYTES {
                return Err(refused(format!(
                    "file url is {} bytes long; at most {MAX_FILE_URL_BYTES}",
                    url.len()
                )));
            }
            if rest.is_empty() || rest.starts_with('/') {
                return Err(refused(format!("file url {:?} names no host", cut(url))));
            }
            if url.chars().any(|c| c.is_control() || c.is_whitespace()) {
                return Err(refused(format!(
                    "file url {:?} contains a space or a control character",
                    cut(url)
                )));
            }
            Ok(())
        }
    }
}

/// The first 100 characters of `s`, for an error message.
fn cut(s: &str) -> String {
    s.chars().take(100).collect()
}

/// Refuses an id that is not a plain name (letters, digits, `-`, `_`, `.`; not leading).
fn check_id(id: &str) -> Result<()> {
    let plain = !id.is_empty()
        && id.len() <= 200
        && !id.starts_with('.')
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if plain {
        Ok(())
    } else {
        Err(refused(format!(
            "file id {:?} is not a plain name (1 to 200 letters, digits, - _ ., not starting with .)",
            cut(id)
        )))
    }
}

impl FilesDir {
    /// The files of `tenant` in the data directory `data_dir`: `files/` for the `default`
    /// tenant (single-tenant data directories keep their files where they are),
    /// `files/tenants/<tenant>/` for another.
    pub fn of_tenant(data_dir: &Path, tenant: &str) -> Self {
        let root = data_dir.join(FILES_DIR);
        if tenant == DEFAULT_TENANT {
            FilesDir::new(root)
        } else {
            let tenants = root.join("tenants");
            let mut dir = FilesDir::new(tenants.join(crate::workspace::encode(tenant)));
            dir.guarded.splice(0..0, [root, tenants]);
            dir
        }
    }

    /// Checks the references a message brings in: at most [`MAX_FILES_PER_MESSAGE`], each
    /// of a sound shape ([`check_reference`]), and each upload or tool file present (a
    /// regular file, not a symlink) in this folder, so another tenant's file is refused.
    pub fn check_all(&self, files: &[FileRef]) -> Result<()> {
        if files.len() > MAX_FILES_PER_MESSAGE {
            return Err(refused(format!(
                "a message may reference at most {MAX_FILES_PER_MESSAGE} files, not {}",
                files.len()
            )));
        }
        for file in files {
            check_reference(file)?;
            let (folder, what, id) = match &file.source {
                FileSource::LocalFile { upload_file_id } => ("uploads", "upload", upload_file_id),
                FileSource::ToolFile { tool_file_id } => ("tool-files", "tool file", tool_file_id),
                FileSource::RemoteUrl { .. } => continue,
            };
            let present = self.path(folder, id)?.is_some_and(|path| {
                std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_file())
            });
            if !present {
                return Err(refused(format!("no {what} {id} (of this tenant)")));
            }
        }
        Ok(())
    }

    /// Stores `bytes` as a new upload named `name`, of `media_type` and `file_type` (see
    /// [`upload_type`]): written whole to a temporary file and then renamed, so a reader
    /// never sees half of it. Returns what it stored.
    pub fn store_upload(
        &self,
        bytes: &[u8],
        name: &str,
        media_type: &str,
        file_type: FileType,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<UploadInfo> {
        use std::sync::atomic::{AtomicU64, Ordering};
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        use sha2::Digest as _;
        // Unique per process, moment, call and content; the tenant's folder, not the id,
        // keeps one tenant's uploads from another.
        let mut hash = sha2::Sha256::new();
        hash.update(std::process::id().to_le_bytes());
        hash.update(now.timestamp_nanos_opt().unwrap_or_default().to_le_bytes());
        hash.update(COUNTER.fetch_add(1, Ordering::Relaxed).to_le_bytes());
        hash.update(bytes);
        let id: String = hash.finalize()[..16]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let name: String = name.chars().filter(|c| !c.is_control()).take(255).collect();
        let info = UploadInfo {
            id: id.clone(),
            name: if name.trim().is_empty() {
                id.clone()
            } else {
                name
            },
            media_type: media_type.to_owned(),
            size: bytes.len() as u64,
            file_type,
            created_at: now.to_rfc3339(),
        };
        let linked = |p: &Path| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_symlink());
        if self.guarded.iter().any(|p| linked(p)) {
            return Err(refused(
                "the files folder is a symlink: nothing is stored".into(),
            ));
        }
        for folder in ["uploads", "upload-info"] {
            let dir = self.root.join(folder);
            if linked(&dir) {
                return Err(refused(format!(
                    "{} is a symlink: nothing is stored",
                    dir.display()
                )));
            }
            std::fs::create_dir_all(&dir).map_err(|e| io(&dir, e))?;
        }
        let Some(path) = self.path("uploads", &id)? else {
            return Err(refused(
                "the files folder is a symlink: nothing is stored".into(),
            ));
        };
        let Some(info_path) = self.path("upload-info", &format!("{id}.json"))? else {
            return Err(refused(
                "the files folder is a symlink: nothing is stored".into(),
            ));
        };
        let json = serde_json::to_vec(&info).map_err(|e| refused(e.to_string()))?;
        write_new(&info_path, &json)?;
        write_new(&path, bytes)?;
        Ok(info)
    }

    /// What the upload `id` is, if this folder has it.
    pub fn upload_info(&self, id: &str) -> Result<Option<UploadInfo>> {
        check_id(id)?;
        let (Some(path), Some(info_path)) = (
            self.path("uploads", id)?,
            self.path("upload-info", &format!("{id}.json"))?,
        ) else {
            return Ok(None);
        };
        if !std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_file()) {
            return Ok(None);
        }
        match std::fs::symlink_metadata(&info_path) {
            Ok(m) if m.file_type().is_file() && m.len() <= 64 * 1024 => {}
            _ => return Ok(None),
        }
        let bytes = std::fs::read(&info_path).map_err(|e| io(&info_path, e))?;
        Ok(serde_json::from_slice(&bytes).ok())
    }

    /// Resolves from `root` (`uploads/` and `tool-files/` in it).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        let root = root.into();
        FilesDir {
            guarded: vec![root.clone()],
            root,
            max_bytes: MAX_ATTACHMENT_BYTES,
        }
    }

    /// The same, reading files of at most `max_bytes`.
    pub fn max_bytes(mut self, max_bytes: u64) -> Self {
        self.max_bytes = max_bytes;
        self
    }

    /// The path of `root/folder/id`, if `id` is a plain name and neither the root nor the
    /// folder is a symlink (`None`: nothing outside the folder is ever touched).
    fn path(&self, folder: &str, id: &str) -> Result<Option<PathBuf>> {
        check_id(id)?;
        let dir = self.root.join(folder);
        // Neither the folders nor the file may be a symlink: nothing outside is read.
        for path in self.guarded.iter().chain([&dir]) {
            if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) {
                return Ok(None);
            }
        }
        Ok(Some(dir.join(id)))
    }

    /// Removes the attached files an erasure took: every one of `files` for an erasure of
    /// whole entries, and those whose bytes hold `text` (in UTF-8 or UTF-16) for an
    /// erasure by text. URLs, names that are not plain, symlinks and files already gone
    /// are passed over. Returns how many were removed.
    pub fn erase(&self, files: &[FileRef], text: Option<&str>) -> Result<u64> {
        let mut removed = 0;
        for file in files {
            let (folder, id) = match &file.source {
                FileSource::LocalFile { upload_file_id } => ("uploads", upload_file_id),
                FileSource::ToolFile { tool_file_id } => ("tool-files", tool_file_id),
                FileSource::RemoteUrl { .. } => continue,
            };
            let Ok(Some(path)) = self.path(folder, id) else {
                continue;
            };
            match std::fs::symlink_metadata(&path) {
                Ok(m) if m.file_type().is_file() => {}
                _ => continue,
            }
            if let Some(text) = text {
                let bytes = std::fs::read(&path).map_err(|e| io(&path, e))?;
                let utf16: Vec<u8> = text.encode_utf16().flat_map(u16::to_le_bytes).collect();
                let holds = |needle: &[u8]| bytes.windows(needle.len()).any(|w| w == needle);
                if !holds(text.as_bytes()) && !holds(&utf16) {
                    continue;
                }
            }
            match std::fs::remove_file(&path) {
                Ok(()) => removed += 1,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io(&path, e)),
            }
            if folder == "uploads"
                && let Ok(Some(info)) = self.path("upload-info", &format!("{id}.json"))
            {
                // Its name may hold what was erased as well.
                match std::fs::remove_file(&info) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(io(&info, e)),
                }
            }
        }
        Ok(removed)
    }

    /// Reads `root/folder/id` if `id` is a plain name and the file a regular one.
    fn read(&self, folder: &str, id: &str) -> Result<Option<Vec<u8>>> {
        let Some(path) = self.path(folder, id)? else {
            return Ok(None);
        };
        let meta = match std::fs::symlink_metadata(&path) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io(&path, e)),
        };
        if !meta.file_type().is_file() || meta.len() > self.max_bytes {
            return Ok(None);
        }
        let mut bytes = Vec::new();
        std::fs::File::open(&path)
            .and_then(|f| f.take(self.max_bytes + 1).read_to_end(&mut bytes))
            .map_err(|e| io(&path, e))?;
        Ok((bytes.len() as u64 <= self.max_bytes).then_some(bytes))
    }
}

/// Writes `bytes` to `path` through a temporary file beside it, renamed into place.
fn write_new(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    let tmp = path.with_extension("part");
    let written = std::fs::File::create(&tmp)
        .and_then(|mut f| f.write_all(bytes).and_then(|()| f.sync_all()))
        .and_then(|()| std::fs::rename(&tmp, path));
    written.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        io(path, e)
    })
}

/// The tenant of a data directory without keys (its files are `files/` itself).
pub const DEFAULT_TENANT: &str = "default";

fn io(path: &Path, source: std::io::Error) -> Error {
    Error::Workspace {
        path: path.to_owned(),
        source,
    }
}

/// The media type of `bytes`, from their first bytes: the image formats and PDF by their
/// signature, UTF-8 text without NUL as `text/plain`, anything else
/// `application/octet-stream`.
pub fn media_type(bytes: &[u8]) -> &'static str {
    match bytes {
        [0x89, b'P', b'N', b'G', ..] => "image/png",
        [0xFF, 0xD8, 0xFF, ..] => "image/jpeg",
        [b'G', b'I', b'F', b'8', ..] => "image/gif",
        [
            b'R',
            b'I',
            b'F',
            b'F',
            _,
            _,
            _,
            _,
            b'W',
            b'E',
            b'B',
            b'P',
            ..,
        ] => "image/webp",
        [b'%', b'P', b'D', b'F', ..] => "application/pdf",
        _ if !bytes.is_empty() && !bytes.contains(&0) && std::str::from_utf8(bytes).is_ok() => {
            "text/plain"
        }
        _ => "application/octet-stream",
    }
}

fn kind(file_type: FileType) -> AttachmentKind {
    match file_type {
        FileType::Image => AttachmentKind::Image,
        _ => AttachmentKind::Document,
    }
}

impl FileResolver for FilesDir {
    fn resolve(&self, file: &FileRef) -> Result<Option<Attachment>> {
        let (folder, id) = match &file.source {
            FileSource::RemoteUrl { url } => {
                let web = url.starts_with("https://") || url.starts_with("http://");
                return Ok(web.then(|| Attachment {
                    kind: kind(file.file_type),
                    url: url.clone(),
                    name: None,
                }));
            }
            FileSource::LocalFile { upload_file_id } => ("uploads", upload_file_id),
            FileSource::ToolFile { tool_file_id } => ("tool-files", tool_file_id),
        };
        let Some(bytes) = self.read(folder, id)? else {
            return Ok(None);
        };
        let data = base64::engine::general_purpose::STANDARD.encode(&bytes);
        Ok(Some(Attachment {
            kind: kind(file.file_type),
            url: format!("data:{};base64,{data}", media_type(&bytes)),
            name: Some(id.clone()),
        }))
    }
}

/// How a reference that could not be resolved is named in the text.
fn unresolved(file: &FileRef) -> String {
    let what = match &file.source {
        FileSource::LocalFile { upload_file_id } => format!("upload {upload_file_id}"),
        FileSource::RemoteUrl { url } => url.clone(),
        FileSource::ToolFile { tool_file_id } => format!("tool file {tool_file_id}"),
    };
    format!("[attachment not available: {what}]")
}

/// `m` as a model client sends it: its text, tool calls and tool result id, and its files
/// (Dify's references, and image parts of multi-part content) as attachments through
/// `resolver`.
pub fn llm_message(m: &Message, resolver: &dyn FileResolver) -> Result<memtape_llm::Message> {
    let role = match m.role {
        Role::System => memtape_llm::Role::System,
        Role::User => memtape_llm::Role::User,
        Role::Assistant => memtape_llm::Role::Assistant,
        Role::Tool => memtape_llm::Role::Tool,
    };
    let mut text = m.content_text().into_owned();
    let mut out = memtape_llm::Message::new(role, String::new());
    out.tool_call_id = m.tool_call_id.clone();
    out.tool_calls = m
        .tool_calls
        .iter()
        .map(|c| {
            // Arguments that were never an object reach the model as an empty one.
            let arguments = serde_json::from_str::<serde_json::Value>(&c.function.arguments)
                .ok()
                .and_then(|v| memtape_llm::arguments::parse(&c.function.name, &v).ok())
                .unwrap_or_default();
            memtape_llm::ToolCall {
                id: c.id.clone(),
                name: c.function.name.clone(),
                arguments,
            }
        })
        .collect();
    if let Some(memtape_core::Content::Parts(parts)) = &m.content {
        for part in parts.iter().filter(|p| p.kind == "image_url") {
            let url = part
                .extra
                .get("image_url")
                .and_then(|v| v.get("url").or(Some(v)))
                .and_then(serde_json::Value::as_str);
            if let Some(url) = url {
                out.attachments.push(Attachment {
                    kind: AttachmentKind::Image,
                    url: url.to_owned(),
                    name: None,
                });
            }
        }
    }
    for file in &m.files {
        match resolver.resolve(file) {
            Ok(Some(a)) => out.attachments.push(a),
            Ok(None) | Err(Error::Invalid(_)) => {
                if !text.is_empty() {
                    text.push('\n');
                }
                text.push_str(&unresolved(file));
            }
            Err(e) => return Err(e),
        }
    }
    out.content = text;
    Ok(out)
}

/// The provider whose content parts [`content_parts`] builds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttachmentsFormat {
    /// OpenAI's chat parts (`text`, `image_url` with `detail`, `file` with `file_data`).
    OpenAi,
    /// Anthropic's content blocks (`text`, `image` and `document` with a `base64`, `url`
    /// or `text` source).
    Anthropic,
}

/// `m`'s content with its file references rebuilt into `format`'s content parts: its text
/// (or its own parts), then each file of a type `config` allows, resolved through
/// `resolver` (an upload as base64 data, a URL as it is); a file that cannot be resolved
/// is named in a text part, a file of a type not allowed is left out (Dify's
/// `file_upload_config`).
pub fn content_parts(
    m: &Message,
    resolver: &dyn FileResolver,
    format: AttachmentsFormat,
    config: &crate::AttachmentsConfig,
) -> Result<serde_json::Value> {
    use serde_json::{Value, json};
    let mut parts: Vec<Value> = Vec::new();
    match &m.content {
        Some(memtape_core::Content::Parts(own)) => {
            for part in own {
                let value = serde_json::to_value(part).map_err(|e| refused(e.to_string()))?;
                let image = (part.kind == "image_url")
                    .then(|| {
                        part.extra
                            .get("image_url")
                            .and_then(|v| v.get("url").or(Some(v)))
                            .and_then(Value::as_str)
                    })
                    .flatten();
                parts.push(match (format, image) {
                    (AttachmentsFormat::Anthropic, Some(url)) => anthropic(&Attachment {
                        kind: AttachmentKind::Image,
                        url: url.to_owned(),
                        name: None,
                    }),
                    _ => value,
                });
            }
        }
        Some(memtape_core::Content::Text(text)) if !text.is_empty() => {
            parts.push(json!({"type": "text", "text": text}));
        }
        _ => {}
    }
    for file in m
        .files
        .iter()
        .filter(|f| config.allowed_file_types.contains(&f.file_type))
    {
        parts.push(match resolver.resolve(file) {
            Ok(Some(a)) => match format {
                AttachmentsFormat::OpenAi => openai(&a, config.image_detail.as_str()),
                AttachmentsFormat::Anthropic => anthropic(&a),
            },
            Ok(None) | Err(Error::Invalid(_)) => json!({"type": "text", "text": unresolved(file)}),
            Err(e) => return Err(e),
        });
    }
    Ok(Value::Array(parts))
}

/// A file as OpenAI's chat part.
fn openai(a: &Attachment, detail: &str) -> serde_json::Value {
    use serde_json::json;
    match (a.kind, a.data()) {
        (AttachmentKind::Image, _) => {
            json!({"type": "image_url", "image_url": {"url": a.url, "detail": detail}})
        }
        (AttachmentKind::Document, Some(_)) => json!({"type": "file", "file": {
            "filename": a.name.clone().unwrap_or_else(|| "attachment".into()),
            "file_data": a.url,
        }}),
        (AttachmentKind::Document, None) => {
            json!({"type": "text", "text": format!("[attached file: {}]", a.url)})
        }
    }
}

/// A file as Anthropic's content block (a text document as a `text` source).
fn anthropic(a: &Attachment) -> serde_json::Value {
    use serde_json::json;
    let source = match a.data() {
        Some(("text/plain", data)) => {
            let text = base64::engine::general_purpose::STANDARD
                .decode(data)
                .ok()
                .and_then(|b| String::from_utf8(b).ok())
                .unwrap_or_default();
            json!({"type": "text", "media_type": "text/plain", "data": text})
        }
        Some((media, data)) => json!({"type": "base64", "media_type": media, "data": data}),
        None => json!({"type": "url", "url": a.url}),
    };
    match a.kind {
        AttachmentKind::Image => json!({"type": "image", "source": source}),
        AttachmentKind::Document => json!({"type": "document", "source": source}),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use memtape_core::FileOwner;

    fn upload(id: &str, file_type: FileType) -> FileRef {
        FileRef {
            file_type,
            source: FileSource::LocalFile {
                upload_file_id: id.into(),
            },
            belongs_to: FileOwner::User,
        }
    }

    #[test]
    fn uploads_become_data_urls_and_missing_ones_are_named() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("uploads")).unwrap();
        std::fs::write(dir.path().join("uploads/cat.png"), b"\x89PNG\r\n\x1a\nrest").unwrap();
        let resolver = FilesDir::new(dir.path());
        let mut m = Message::user("look at this");
        m.files = vec![
            upload("cat.png", FileType::Image),
            upload("gone.pdf", FileType::Document),
            upload("../../etc/passwd", FileType::Document),
            FileRef {
                file_type: FileType::Image,
                source: FileSource::RemoteUrl {
                    url: "https://example.org/dog.jpg".into(),
                },
                belongs_to: FileOwner::User,
            },
        ];
        let sent = llm_message(&m, &resolver).unwrap();
        assert_eq!(sent.attachments.len(), 2);
        assert!(
            sent.attachments[0]
                .url
                .starts_with("data:image/png;base64,iVBORw0K")
        );
        assert_eq!(sent.attachments[1].url, "https://example.org/dog.jpg");
        assert!(
            sent.content
                .contains("[attachment not available: upload gone.pdf]")
        );
        assert!(
            sent.content.contains("upload ../../etc/passwd"),
            "named, not read"
        );
    }

    #[test]
    fn symlinks_and_large_files_are_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let uploads = dir.path().join("uploads");
        std::fs::create_dir_all(&uploads).unwrap();
        std::fs::write(dir.path().join("secret"), b"secret").unwrap();
        std::os::unix::fs::symlink(dir.path().join("secret"), uploads.join("link")).unwrap();
        std::fs::write(uploads.join("big"), vec![0u8; 100]).unwrap();
        let resolver = FilesDir::new(dir.path()).max_bytes(10);
        for id in ["link", "big"] {
            assert_eq!(
                resolver.resolve(&upload(id, FileType::Document)).unwrap(),
                None,
                "{id}"
            );
        }
    }

    #[test]
    fn an_upload_is_its_tenants_only_and_an_erasure_takes_its_info() {
        let data = tempfile::tempdir().unwrap();
        let acme = FilesDir::of_tenant(data.path(), "acme");
        let globex = FilesDir::of_tenant(data.path(), "globex");
        let (media, kind) = upload_type(Some("image/png"), b"\x89PNG\r\n\x1a\nx").unwrap();
        let info = acme
            .store_upload(
                b"\x89PNG\r\n\x1a\nx",
                "cat.png",
                media,
                kind,
                chrono::Utc::now(),
            )
            .unwrap();
        assert!(
            data.path()
                .join("files/tenants/acme/uploads")
                .join(&info.id)
                .is_file()
        );
        let reference = info.reference();
        acme.check_all(std::slice::from_ref(&reference)).unwrap();
        let refused = globex
            .check_all(std::slice::from_ref(&reference))
            .unwrap_err();
        assert!(refused.to_string().contains(&info.id), "{refused}");
        assert_eq!(globex.upload_info(&info.id).unwrap(), None);
        assert_eq!(
            globex.resolve(&reference).unwrap(),
            None,
            "never read for another"
        );
        assert!(acme.resolve(&reference).unwrap().is_some());
        assert_eq!(acme.upload_info(&info.id).unwrap(), Some(info.clone()));
        assert_eq!(acme.erase(&[reference], None).unwrap(), 1);
        assert_eq!(acme.upload_info(&info.id).unwrap(), None);
        assert!(
            !data
                .path()
                .join("files/tenants/acme/upload-info")
                .join(format!("{}.json", info.id))
                .exists()
        );
        // The default tenant's files are `files/` itself, as they always were.
        let default = FilesDir::of_tenant(data.path(), DEFAULT_TENANT);
        std::fs::create_dir_all(data.path().join("files/uploads")).unwrap();
        std::fs::write(data.path().join("files/uploads/old.pdf"), b"%PDF-1.4").unwrap();
        default
            .check_all(&[upload("old.pdf", FileType::Document)])
            .unwrap();
    }

    #[test]
    fn upload_types_must_agree_with_the_bytes() {
        assert_eq!(upload_type(None, b"%PDF-1.7").unwrap().0, "application/pdf");
        assert_eq!(
            upload_type(Some("image/jpg"), b"\xFF\xD8\xFFx").unwrap().0,
            "image/jpeg"
        );
        assert_eq!(
            upload_type(Some("text/markdown"), b"# hi").unwrap().0,
            "text/markdown"
        );
        assert!(upload_type(Some("image/gif"), b"# hi").is_err());
        assert!(upload_type(Some("text/plain"), b"\x89PNG\r\n\x1a\n").is_err());
        assert!(upload_type(None, b"\x00\x01").is_err());
        assert!(upload_type(Some("application/zip"), b"PK").is_err());
    }

    #[test]
    fn an_upload_is_never_written_through_a_symlink() {
        let data = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(data.path().join("files/tenants")).unwrap();
        std::os::unix::fs::symlink(outside.path(), data.path().join("files/tenants/acme")).unwrap();
        let acme = FilesDir::of_tenant(data.path(), "acme");
        let now = chrono::Utc::now();
        let refused = acme
            .store_upload(b"hello", "a.txt", "text/plain", FileType::Document, now)
            .unwrap_err();
        assert!(refused.to_string().contains("symlink"), "{refused}");
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
    }
}
