//! Dify's file attachments, rebuilt on read (seed 002: history stores file references; "when
//! reading, files are rebuilt using `file_factory.build_from_mapping()`"). A message on the
//! tape keeps only references (an upload id, a tool file id, a URL); when it is sent to a
//! model, [`llm_message`] turns each into the provider's content part through a
//! [`FileResolver`]. A reference that cannot be resolved is named in the text, never
//! silently dropped.
//!
//! [`FilesDir`] resolves from a folder (by default `<data-dir>/files/`): uploads under
//! `uploads/<id>`, tool files under `tool-files/<id>`. Ids are plain names (no `/`, no
//! leading dot), symlinks are not followed, and a file over the size limit is not read.

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
    max_bytes: u64,
}

/// The folder of the data directory attached files live in (`uploads/` and `tool-files/`
/// inside it).
pub const FILES_DIR: &str = "files";

/// The largest file sent to a model (20 MiB, the providers' usual limit for one image).
pub const MAX_ATTACHMENT_BYTES: u64 = 20 * 1024 * 1024;

impl FilesDir {
    /// Resolves from `root` (`uploads/` and `tool-files/` in it).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        FilesDir {
            root: root.into(),
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
        let plain = !id.is_empty()
            && id.len() <= 200
            && !id.starts_with('.')
            && id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        if !plain {
            return Err(Error::Invalid(memtape_core::Error::InvalidMessage(
                format!("file id {id:?} is not a plain name (letters, digits, - _ .)"),
            )));
        }
        let dir = self.root.join(folder);
        // Neither the folder nor the file may be a symlink: nothing outside is read.
        for path in [&self.root, &dir] {
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

fn io(path: &Path, source: std::io::Error) -> Error {
    Error::Workspace {
        path: path.to_owned(),
        source,
    }
}

/// The media type of `bytes`, from their first bytes.
fn media_type(bytes: &[u8]) -> &'static str {
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
}
