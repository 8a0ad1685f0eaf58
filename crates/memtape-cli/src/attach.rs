//! Attached files on the command line (Dify's file references): `--file` of `append` and
//! `node add`, `--attachments` of `history` and `context`, and `memtape upload`, which
//! keeps a file in the data directory's files folder for a reference to name.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context as _, Result, bail};
use clap::{Args, ValueEnum};
use memtape::{AttachmentsFormat, FileOwner, FileRef, FileSource, FileType, FilesDir, Message};
use serde_json::Value;

use crate::ctx::Ctx;

/// The help of `--file`.
pub const FILE_HELP: &str = "A file attached by reference (repeatable): `TYPE:upload:ID` (an \
upload, see `memtape upload`), `TYPE:tool:ID` (a tool file), `TYPE:url:URL` (http or https), \
with TYPE image, document, audio, video or custom; or Dify's JSON, e.g. \
'{\"type\": \"image\", \"transfer_method\": \"local_file\", \"upload_file_id\": \"ID\"}' \
(belongs_to: user, or assistant for an assistant's message). An upload or tool file must be \
in this tenant's files folder.";

/// How `history` and `context` print attached files.
#[derive(ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AttachmentsArg {
    /// Dify's references, in each message's `files` (the default).
    #[default]
    Refs,
    /// Rebuilt into OpenAI content parts (uploads as base64 data).
    Parts,
    /// The same as `parts`.
    Openai,
    /// Rebuilt into Anthropic content blocks.
    Anthropic,
}

impl AttachmentsArg {
    /// The provider the files are rebuilt for, `None` for references.
    pub fn format(self) -> Option<AttachmentsFormat> {
        match self {
            AttachmentsArg::Refs => None,
            AttachmentsArg::Parts | AttachmentsArg::Openai => Some(AttachmentsFormat::OpenAi),
            AttachmentsArg::Anthropic => Some(AttachmentsFormat::Anthropic),
        }
    }
}

/// The files of `ctx`'s tenant.
pub fn files(ctx: &Ctx) -> Result<FilesDir> {
    Ok(FilesDir::of_tenant(&ctx.data_dir()?, &ctx.tenant))
}

/// The references `specs` name (see [`FILE_HELP`]), owned by `owner` unless a JSON one
/// says otherwise, each checked: its shape, and its upload or tool file present in the
/// tenant's files folder.
pub fn references(ctx: &Ctx, specs: &[String], owner: FileOwner) -> Result<Vec<FileRef>> {
    if specs.is_empty() {
        return Ok(Vec::new());
    }
    let refs = specs
        .iter()
        .map(|s| reference(s, owner).with_context(|| format!("--file {s}")))
        .collect::<Result<Vec<_>>>()?;
    files(ctx)?.check_all(&refs)?;
    Ok(refs)
}

/// One `--file` value.
fn reference(spec: &str, owner: FileOwner) -> Result<FileRef> {
    if spec.trim_start().starts_with('{') {
        let value: Value = serde_json::from_str(spec).context("not JSON")?;
        let known = [
            "type",
            "transfer_method",
            "upload_file_id",
            "url",
            "tool_file_id",
            "belongs_to",
        ];
        if let Some(unknown) = value
            .as_object()
            .and_then(|o| o.keys().find(|k| !known.contains(&k.as_str())))
        {
            bail!(
                "unknown field {unknown:?} (a reference has {})",
                known.join(", ")
            );
        }
        let ids = ["upload_file_id", "url", "tool_file_id"]
            .iter()
            .filter(|k| value.get(**k).is_some())
            .count();
        if ids != 1 {
            bail!("a reference carries exactly one of upload_file_id, url, tool_file_id");
        }
        let mut value = value;
        if value.get("belongs_to").is_none() {
            value["belongs_to"] = serde_json::to_value(owner)?;
        }
        let file: FileRef = serde_json::from_value(value).context(
            "a reference is {type, transfer_method, upload_file_id | url | tool_file_id, belongs_to}",
        )?;
        memtape::check_reference(&file)?;
        return Ok(file);
    }
    let mut fields = spec.splitn(3, ':');
    let (Some(kind), Some(method), Some(what)) = (fields.next(), fields.next(), fields.next())
    else {
        bail!("expected TYPE:upload:ID, TYPE:tool:ID, TYPE:url:URL or Dify's JSON");
    };
    let file_type: FileType =
        serde_json::from_value(Value::String(kind.to_owned())).map_err(|_| {
            anyhow::anyhow!("type {kind:?}: expected image, document, audio, video or custom")
        })?;
    let source = match method {
        "upload" => FileSource::LocalFile {
            upload_file_id: what.to_owned(),
        },
        "tool" => FileSource::ToolFile {
            tool_file_id: what.to_owned(),
        },
        "url" => FileSource::RemoteUrl {
            url: what.to_owned(),
        },
        other => bail!("{other:?}: expected upload, tool or url"),
    };
    let file = FileRef {
        file_type,
        source,
        belongs_to: owner,
    };
    memtape::check_reference(&file)?;
    Ok(file)
}

/// `m` as a chat message on the wire (`history --json`), its files rebuilt into content
/// parts when `format` is given.
pub fn message_json(
    m: &Message,
    format: Option<AttachmentsFormat>,
    files: Option<&FilesDir>,
    config: &memtape::AttachmentsConfig,
) -> Result<Value> {
    let mut value = serde_json::to_value(crate::output::ChatMessage::of(m))?;
    if let (Some(format), Some(files)) = (format, files) {
        let parts = matches!(m.content, Some(memtape::Content::Parts(_)));
        if !m.files.is_empty() || (parts && format == AttachmentsFormat::Anthropic) {
            value["content"] = memtape::content_parts(m, files, format, config)?;
        }
        if let Some(o) = value.as_object_mut() {
            o.remove("files");
        }
    }
    Ok(value)
}

/// `memtape upload`.
#[derive(Args, Debug)]
pub struct UploadArgs {
    /// The file: a PNG, JPEG, GIF or WebP image, a PDF, or UTF-8 text.
    path: PathBuf,
    /// Its media type (default: what its bytes say).
    #[arg(long, value_name = "TYPE")]
    media_type: Option<String>,
    /// The largest file taken, in MiB.
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u32).range(1..=1024))]
    limit_mib: u32,
    /// Print the upload as JSON (with a ready-to-use reference).
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    pub scope: crate::ctx::ScopeArgs,
}

/// Keeps a file as an upload of the tenant and prints its id (what `--file
/// TYPE:upload:ID` names).
pub fn upload(ctx: &Ctx, a: &UploadArgs, out: &mut impl Write) -> Result<()> {
    let limit = u64::from(a.limit_mib) * 1024 * 1024;
    let meta = std::fs::metadata(&a.path).with_context(|| a.path.display().to_string())?;
    if !meta.is_file() {
        bail!("{} is not a regular file", a.path.display());
    }
    if meta.len() > limit {
        bail!(
            "{} is {} bytes; the limit is {limit} (--limit-mib)",
            a.path.display(),
            meta.len()
        );
    }
    let bytes = std::fs::read(&a.path).with_context(|| a.path.display().to_string())?;
    if bytes.is_empty() {
        bail!("{} is empty", a.path.display());
    }
    let (media, file_type) = memtape::upload_type(a.media_type.as_deref(), &bytes)?;
    crate::config::load(ctx)?.attachments.allows(file_type)?;
    let name = a
        .path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let info = files(ctx)?.store_upload(&bytes, &name, media, file_type, chrono::Utc::now())?;
    if a.json {
        let mut value = serde_json::to_value(&info)?;
        value["reference"] = serde_json::to_value(info.reference())?;
        crate::output::json(out, &value)?;
    } else {
        writeln!(out, "{}", info.id)?;
    }
    Ok(())
}
