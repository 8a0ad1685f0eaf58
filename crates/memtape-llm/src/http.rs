//! The HTTP side every client shares: one blocking agent with a timeout per attempt, error
//! replies classified ([`crate::Error`]), and the retry loop of a [`RetryPolicy`].

use std::io::{BufRead, BufReader};
use std::time::Duration;

use crate::error::{self, Error, Result};
use crate::retry::{RetryPolicy, retry_after};
use crate::types::ChatResponse;

/// A read error in the middle of a streamed reply.
pub(crate) fn broken(e: &std::io::Error) -> Error {
    if e.kind() == std::io::ErrorKind::TimedOut {
        Error::Connection(format!("the reply stream timed out: {e}"))
    } else {
        Error::Connection(format!("the reply stream broke: {e}"))
    }
}

/// How a client reads a streamed reply: from the body, setting the flag once text went to
/// the callback.
pub(crate) type ReadStream =
    fn(&mut dyn BufRead, &mut bool, &mut dyn FnMut(&str)) -> Result<ChatResponse>;

/// The timeout of one attempt unless set.
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// The largest reply body read (a chat reply is kilobytes; this bounds a broken server).
const REPLY_LIMIT: u64 = 16 * 1024 * 1024;

/// A blocking HTTP client for one provider.
#[derive(Debug)]
pub(crate) struct Http {
    agent: ureq::Agent,
    timeout: Duration,
    policy: RetryPolicy,
}

impl Http {
    /// A client with a `timeout` per attempt and `policy`.
    pub(crate) fn new(timeout: Duration, policy: RetryPolicy) -> Http {
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(timeout))
            .build()
            .new_agent();
        Http {
            agent,
            timeout,
            policy,
        }
    }

    /// The retry policy.
    pub(crate) fn policy(&self) -> RetryPolicy {
        self.policy
    }

    /// The timeout of one attempt.
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// POSTs the JSON `body` to `url` with `headers` and reads a successful reply with
    /// `read`, retrying as the policy allows; the reply records the attempts it took.
    pub(crate) fn post(
        &self,
        url: &str,
        headers: &[(&str, String)],
        body: &str,
        read: impl Fn(&str) -> Result<ChatResponse>,
    ) -> Result<ChatResponse> {
        self.retrying(|_| self.once(url, headers, body).and_then(|text| read(&text)))
    }

    /// POSTs like [`Http::post`] and hands the body of a successful reply, as it arrives,
    /// to `read` with `on_text`; `read` sets its flag once it has passed anything on, and
    /// from then on a failure is not retried (the caller has seen part of a reply).
    pub(crate) fn stream(
        &self,
        url: &str,
        headers: &[(&str, String)],
        body: &str,
        on_text: &mut dyn FnMut(&str),
        read: ReadStream,
    ) -> Result<ChatResponse> {
        self.retrying(|delivered| {
            let response = self.response(url, headers, body)?;
            let mut reader = BufReader::new(
                response
                    .into_body()
                    .into_with_config()
                    .limit(REPLY_LIMIT)
                    .reader(),
            );
            read(&mut reader, delivered, on_text)
        })
    }

    /// Runs `attempt` until it succeeds, fails for good, or the policy allows no more
    /// retries. An attempt that set its flag (it passed part of a reply on) is not retried.
    fn retrying(
        &self,
        mut attempt: impl FnMut(&mut bool) -> Result<ChatResponse>,
    ) -> Result<ChatResponse> {
        let mut retry = 0;
        loop {
            let mut delivered = false;
            match attempt(&mut delivered) {
                Ok(mut reply) => {
                    reply.attempts = retry + 1;
                    return Ok(reply);
                }
                Err(e) if e.is_retryable() && !delivered => {
                    let server = match &e {
                        Error::Status { retry_after, .. } => *retry_after,
                        _ => None,
                    };
                    let Some(wait) = self.policy.delay(retry, server) else {
                        return Err(e);
                    };
                    std::thread::sleep(wait);
                    retry += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// One attempt: the body of a 2xx reply, or the classified error.
    fn once(&self, url: &str, headers: &[(&str, String)], body: &str) -> Result<String> {
        self.response(url, headers, body)?
            .body_mut()
            .with_config()
            .limit(REPLY_LIMIT)
            .read_to_string()
            .map_err(|e| self.transport(e))
    }

    /// Sends one request: a 2xx response, or the error the reply says.
    fn response(
        &self,
        url: &str,
        headers: &[(&str, String)],
        body: &str,
    ) -> Result<ureq::http::Response<ureq::Body>> {
        let mut call = self
            .agent
            .post(url)
            .header("content-type", "application/json");
        for (name, value) in headers {
            call = call.header(*name, value);
        }
        let mut response = call.send(body).map_err(|e| match e {
            // Nothing listens there: named by its address, which is what to check.
            ureq::Error::HostNotFound | ureq::Error::ConnectionFailed => Error::Unreachable {
                url: url.to_owned(),
                detail: e.to_string(),
            },
            ureq::Error::Io(io)
                if matches!(
                    io.kind(),
                    std::io::ErrorKind::ConnectionRefused
                        | std::io::ErrorKind::AddrNotAvailable
                        | std::io::ErrorKind::HostUnreachable
                        | std::io::ErrorKind::NetworkUnreachable
                ) =>
            {
                Error::Unreachable {
                    url: url.to_owned(),
                    detail: io.to_string(),
                }
            }
            other => self.transport(other),
        })?;
        let status = response.status().as_u16();
        if (200..300).contains(&status) {
            return Ok(response);
        }
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let wait = retry_after(
            header("retry-after-ms").as_deref(),
            header("retry-after").as_deref(),
            chrono::Utc::now(),
        );
        let text = response
            .body_mut()
            .with_config()
            .limit(REPLY_LIMIT)
            .read_to_string()
            .map_err(|e| self.transport(e))?;
        Err(error::from_status(status, wait, &text))
    }

    fn transport(&self, e: ureq::Error) -> Error {
        match e {
            ureq::Error::Timeout(_) => Error::Timeout(self.timeout),
            ureq::Error::Io(io) if io.kind() == std::io::ErrorKind::TimedOut => {
                Error::Timeout(self.timeout)
            }
            ureq::Error::BodyExceedsLimit(n) => {
                Error::BadReply(format!("a reply of more than {n} bytes"))
            }
            other => Error::Connection(other.to_string()),
        }
    }
}

/// The URL of `path` under `base_url` and the model's name, or a configuration error
/// unless the URL is HTTP(S) and the model named.
pub(crate) fn endpoint(base_url: &str, path: &str, model: &str) -> Result<(String, String)> {
    let base = base_url.trim_end_matches('/');
    if !(base.starts_with("http://") || base.starts_with("https://")) {
        return Err(Error::Config(format!(
            "the base URL must start with http:// or https://, got {base_url:?}"
        )));
    }
    if model.trim().is_empty() {
        return Err(Error::Config("no model name given".into()));
    }
    Ok((format!("{base}{path}"), model.trim().to_owned()))
}
