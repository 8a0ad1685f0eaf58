//! API keys: `memtape keys create --tenant T --role R` prints a key once; the data
//! directory keeps only its SHA-256 (`keys.json`, mode 0600), with the tenant and role it
//! grants. A key reads `mtk_<id>_<secret>`: the id finds the record, the secret's hash must
//! match. The file is re-read when it changes, so keys created or revoked by the CLI take
//! effect in a running server; writers hold `keys.lock` and replace the file atomically.
//! A server may also hold a **process key** ([`KeyStore::with_process_key`]): given by the
//! program that started it (`MEMTAPE_SERVE_KEY`), kept only in memory, gone with the
//! process — how the Python package's `Memtape.local()` keeps its private server private.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::state::{Caller, Role};

/// The file the keys live in, inside the data directory.
pub const KEYS_FILE: &str = "keys.json";

/// Why a key operation failed.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// Reading or writing the key file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
    /// The key file is not what memtape writes.
    #[error("{path}: not a memtape key file ({reason}); fix or remove it")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// No key with that id.
    #[error("no key {0}")]
    NoKey(String),
    /// The tenant name is not valid.
    #[error("{0}")]
    Invalid(String),
}

/// One key as stored: never the key itself.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyRecord {
    /// The key's public id (the part after `mtk_`).
    pub id: String,
    /// The tenant the key gives access to.
    pub tenant: String,
    /// What it may do.
    pub role: Role,
    /// SHA-256 of the secret, hex.
    pub hash: String,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// When it was revoked, if it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked_at: Option<DateTime<Utc>>,
}

#[derive(Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyFile {
    keys: Vec<KeyRecord>,
}

/// The keys of one data directory.
#[derive(Debug)]
pub struct KeyStore {
    path: PathBuf,
    cache: Mutex<(Option<SystemTime>, Vec<KeyRecord>)>,
    /// The process key's hash and the tenant it grants, if there is one.
    process: Option<(String, String)>,
}

/// The shortest process key accepted: 32 characters of a random token.
pub const PROCESS_KEY_MIN_LEN: usize = 32;

/// The id a process key stands under on receipts (`key:process`).
pub const PROCESS_KEY_ID: &str = "process";

impl KeyStore {
    /// The keys of the data directory `dir` (none yet is fine).
    pub fn open(dir: &Path) -> Self {
        KeyStore {
            path: dir.join(KEYS_FILE),
            cache: Mutex::new((None, Vec::new())),
            process: None,
        }
    }

    /// Adds a key known only to this process: requests carrying it act as an admin of
    /// `tenant`, and with it every request needs a key. Nothing is written. Refused unless
    /// it is at least [`PROCESS_KEY_MIN_LEN`] characters of letters, digits, `_` and `-`.
    pub fn with_process_key(mut self, key: &str, tenant: &str) -> Result<Self, KeyError> {
        if key.len() < PROCESS_KEY_MIN_LEN
            || !key
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        {
            return Err(KeyError::Invalid(format!(
                "a process key must be at least {PROCESS_KEY_MIN_LEN} letters, digits, `_` or \
                 `-` (a random token)"
            )));
        }
        memtape::Scope::agent(tenant, "default")
            .map_err(|e| KeyError::Invalid(format!("tenant {tenant:?}: {e}")))?;
        self.process = Some((hash(key), tenant.to_owned()));
        Ok(self)
    }

    /// Every key record, revoked ones included.
    pub fn list(&self) -> Result<Vec<KeyRecord>, KeyError> {
        self.current()
    }

    /// Whether any key that is not revoked exists: then every request needs one.
    pub fn enabled(&self) -> Result<bool, KeyError> {
        Ok(self.process.is_some() || self.current()?.iter().any(|k| k.revoked_at.is_none()))
    }

    /// Creates a key for `tenant` with `role`; returns the key (shown once) and its record.
    pub fn create(&self, tenant: &str, role: Role) -> Result<(String, KeyRecord), KeyError> {
        memtape::Scope::agent(tenant, "default")
            .map_err(|e| KeyError::Invalid(format!("tenant {tenant:?}: {e}")))?;
        let mut bytes = [0u8; 24];
        getrandom::fill(&mut bytes).map_err(|e| KeyError::Io {
            path: self.path.clone(),
            source: std::io::Error::other(e.to_string()),
        })?;
        let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
        let id = hex(&bytes[..6]);
        let secret = hex(&bytes[6..]);
        let record = KeyRecord {
            id: id.clone(),
            tenant: tenant.to_owned(),
            role,
            hash: hash(&secret),
            created_at: Utc::now(),
            revoked_at: None,
        };
        let stored = record.clone();
        self.update(move |keys| {
            keys.push(stored);
            Ok(())
        })?;
        Ok((format!("mtk_{id}_{secret}"), record))
    }

    /// Revokes the key with `id` (its record stays, marked).
    pub fn revoke(&self, id: &str) -> Result<KeyRecord, KeyError> {
        let id = id.strip_prefix("mtk_").unwrap_or(id);
        let id = id.split('_').next().unwrap_or(id).to_owned();
        let mut revoked = None;
        self.update(|keys| {
            let key = keys
                .iter_mut()
                .find(|k| k.id == id)
                .ok_or_else(|| KeyError::NoKey(id.clone()))?;
            key.revoked_at.get_or_insert_with(Utc::now);
            revoked = Some(key.clone());
            Ok(())
        })?;
        revoked.ok_or(KeyError::NoKey(id))
    }

    /// The caller a presented key stands for, if it is a valid, unrevoked key.
    pub fn verify(&self, key: &str) -> Result<Option<Caller>, KeyError> {
        if let Some((hashed, tenant)) = &self.process
            && hash(key) == *hashed
        {
            return Ok(Some(Caller {
                tenant: tenant.clone(),
                role: Role::Admin,
                key: Some(PROCESS_KEY_ID.to_owned()),
            }));
        }
        let Some((id, secret)) = key.strip_prefix("mtk_").and_then(|k| k.split_once('_')) else {
            return Ok(None);
        };
        let hashed = hash(secret);
        Ok(self
            .current()?
            .into_iter()
            .find(|k| k.id == id && k.revoked_at.is_none() && k.hash == hashed)
            .map(|k| Caller {
                tenant: k.tenant,
                role: k.role,
                key: Some(k.id),
            }))
    }

    /// The records, read again if the file changed since the last read.
    fn current(&self) -> Result<Vec<KeyRecord>, KeyError> {
        let modified = match std::fs::metadata(&self.path) {
            Ok(m) => Some(m.modified().map_err(|e| self.io(e))?),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(self.io(e)),
        };
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if modified.is_none() {
            *cache = (None, Vec::new());
        } else if cache.0 != modified {
            *cache = (modified, self.read()?.keys);
        }
        Ok(cache.1.clone())
    }

    fn read(&self) -> Result<KeyFile, KeyError> {
        match std::fs::read_to_string(&self.path) {
            Ok(text) => serde_json::from_str(&text).map_err(|e| KeyError::Corrupt {
                path: self.path.clone(),
                reason: e.to_string(),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(KeyFile::default()),
            Err(e) => Err(self.io(e)),
        }
    }

    /// Changes the file under `keys.lock`: read, change, write a temporary file, fsync,
    /// rename over.
    fn update(
        &self,
        change: impl FnOnce(&mut Vec<KeyRecord>) -> Result<(), KeyError>,
    ) -> Result<(), KeyError> {
        let dir = self.path.parent().unwrap_or(Path::new("."));
        let lock = File::create(dir.join("keys.lock")).map_err(|e| self.io(e))?;
        lock.lock().map_err(|e| self.io(e))?;
        let mut file = self.read()?;
        change(&mut file.keys)?;
        let tmp = dir.join("keys.json.tmp");
        let mut options = OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut out = options.open(&tmp).map_err(|e| self.io(e))?;
        let text = serde_json::to_string_pretty(&file).map_err(|e| self.io(e.into()))?;
        out.write_all(text.as_bytes()).map_err(|e| self.io(e))?;
        out.sync_all().map_err(|e| self.io(e))?;
        std::fs::rename(&tmp, &self.path).map_err(|e| self.io(e))?;
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| self.io(e))?;
        Ok(())
    }

    fn io(&self, source: std::io::Error) -> KeyError {
        KeyError::Io {
            path: self.path.clone(),
            source,
        }
    }
}

/// The SHA-256 of a key, in hex: what the key file keeps of it.
pub(crate) fn hash(secret: &str) -> String {
    Sha256::digest(secret.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
