//! The model hub route: a quick reachability probe, then a download with the hub client
//! (its progress bar on stderr when asked for) into a scratch directory.

use std::net::{TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use hf_hub::Cache;
use hf_hub::api::sync::ApiBuilder;

/// The hub's usual base URL.
pub(crate) const DEFAULT_ENDPOINT: &str = "https://huggingface.co";

/// How long the reachability probe may take in all (name lookup and TCP connect).
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// A file the hub client downloaded.
pub(crate) struct HubDownload {
    /// The downloaded file.
    pub(crate) path: PathBuf,
    /// The sha256 the hub published for it, when it stores the file as a large (LFS) object:
    /// the hub's etag, which the client uses as the blob's file name.
    pub(crate) content_sha256: Option<String>,
}

/// Checks within a few seconds that the hub's host takes TCP connections, so a machine
/// without network falls through to the next route at once instead of hanging.
pub(crate) fn check_reachable(endpoint: &str) -> Result<(), String> {
    let (host, port) = host_port(endpoint)?;
    let (tx, rx) = mpsc::channel();
    // The lookup cannot be given a timeout, so it runs on its own thread; a thread left
    // behind by a timeout ends by itself when the lookup gives up.
    std::thread::spawn(move || {
        let outcome = (|| {
            let addrs = (host.as_str(), port)
                .to_socket_addrs()
                .map_err(|e| format!("name lookup failed: {e}"))?;
            let mut last = "no address".to_string();
            for addr in addrs {
                match TcpStream::connect_timeout(&addr, PROBE_TIMEOUT) {
                    Ok(_) => return Ok(()),
                    Err(e) => last = format!("cannot connect: {e}"),
                }
            }
            Err(last)
        })();
        let _ = tx.send(outcome);
    });
    rx.recv_timeout(PROBE_TIMEOUT)
        .unwrap_or_else(|_| Err(format!("no answer within {}s", PROBE_TIMEOUT.as_secs())))
}

/// Downloads `file` of model repository `repo` into `work` (the hub client's own cache
/// layout under `work/hub`), with the client's progress bar on stderr if `progress`.
pub(crate) fn download(
    endpoint: &str,
    repo: &str,
    file: &str,
    work: &Path,
    progress: bool,
) -> Result<HubDownload, String> {
    // A cache of our own, so no user token or earlier state is picked up.
    let api = ApiBuilder::from_cache(Cache::new(work.join("hub")))
        .with_endpoint(endpoint.to_string())
        .with_progress(progress)
        .with_retries(2)
        .build()
        .map_err(|e| e.to_string())?;
    let pointer = api
        .model(repo.to_string())
        .download(file)
        .map_err(|e| e.to_string())?;
    // The pointer is a link to `blobs/<etag>`; for large files the etag is their sha256.
    let blob = std::fs::canonicalize(&pointer).map_err(|e| e.to_string())?;
    let content_sha256 = blob
        .file_name()
        .and_then(|n| n.to_str())
        .filter(|n| n.len() == 64 && n.bytes().all(|b| b.is_ascii_hexdigit()))
        .map(str::to_ascii_lowercase);
    Ok(HubDownload {
        path: blob,
        content_sha256,
    })
}

/// Host and port of an `http(s)://host[:port]/...` URL.
fn host_port(endpoint: &str) -> Result<(String, u16), String> {
    let (rest, default_port) = if let Some(rest) = endpoint.strip_prefix("https://") {
        (rest, 443)
    } else if let Some(rest) = endpoint.strip_prefix("http://") {
        (rest, 80)
    } else {
        return Err(format!("not an http(s) URL: {endpoint}"));
    };
    let authority = rest.split('/').next().unwrap_or(rest);
    let bad_port = || format!("bad port in URL: {endpoint}");
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (host, after) = v6.split_once(']').ok_or_else(bad_port)?;
        (host, after.strip_prefix(':'))
    } else {
        match authority.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    let port = match port {
        Some(p) => p.parse().map_err(|_| bad_port())?,
        None => default_port,
    };
    Ok((host.to_string(), port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_endpoints() {
        assert_eq!(
            host_port("https://hub.example/x/y").unwrap(),
            ("hub.example".to_string(), 443)
        );
        assert_eq!(
            host_port("http://127.0.0.1:8080").unwrap(),
            ("127.0.0.1".to_string(), 8080)
        );
        assert_eq!(
            host_port("https://[::1]:8443/").unwrap(),
            ("::1".to_string(), 8443)
        );
        assert!(host_port("ftp://x").is_err());
    }

    #[test]
    fn unreachable_endpoint_fails_fast() {
        // Port 9 (discard) on loopback: nothing listens, so the connect is refused at once.
        let start = std::time::Instant::now();
        assert!(check_reachable("http://127.0.0.1:9").is_err());
        assert!(start.elapsed() < PROBE_TIMEOUT + Duration::from_secs(1));
    }
}
