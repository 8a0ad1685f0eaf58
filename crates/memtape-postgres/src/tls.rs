//! TLS to the database: libpq's `sslmode` and `sslrootcert` options, taken out of the
//! connection string before the client parses the rest (it knows only disable, prefer and
//! require), and the rustls connector (ring's cryptography) every connection opens
//! through.
//!
//! The modes mean what they mean to libpq: `disable` never encrypts; `prefer` (the
//! default) encrypts when the server can and checks nothing; `require` encrypts and checks
//! nothing; `verify-ca` checks the server's certificate chain against the root
//! certificates; `verify-full` checks the chain and that the certificate names the host.
//! As in libpq, a root certificate file given to `prefer` or `require` makes them check
//! the chain too, `sslrootcert=system` takes the platform's roots and needs
//! `verify-full`, and a Unix socket is never encrypted (`conn.rs` sees to it). Without
//! `sslrootcert`, the verify modes trust the platform's store (where libpq would look for
//! `~/.postgresql/root.crt`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use postgres::config::SslMode;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tokio_postgres_rustls::MakeRustlsConnect;

/// The modes `sslmode` accepts, as a message lists them.
const MODES: &str = "disable, prefer, require, verify-ca or verify-full";

/// A connection string with its TLS options taken out.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Split {
    /// The rest of the string, for the client's own parser.
    pub(crate) rest: String,
    /// `sslmode` as written (the last one, as in libpq), not yet checked.
    pub(crate) mode: Option<String>,
    /// `sslrootcert` as written (decoded), not yet read.
    pub(crate) root_cert: Option<String>,
}

/// Takes `sslmode` and `sslrootcert` out of `s`, a `postgres://` URL (query parameters,
/// percent-encoded) or a libpq `key=value` string (values optionally quoted, `\` escaping).
/// The rest is left as it was written. An error says which value cannot be decoded; a
/// string this cannot read is returned whole, for the client's parser to refuse.
pub(crate) fn split(s: &str) -> Result<Split, String> {
    match ["postgres://", "postgresql://"]
        .iter()
        .find(|p| s.starts_with(*p))
    {
        Some(prefix) => split_url(s, prefix.len()),
        None => Ok(split_key_values(s)),
    }
}

/// The URL form. The client reads credentials up to the first `@`, so the query starts at
/// the first `?` after it (or after the scheme when there is no `@`).
fn split_url(s: &str, body: usize) -> Result<Split, String> {
    let after_creds = s[body..].find('@').map_or(body, |at| body + at + 1);
    let Some(q) = s[after_creds..].find('?').map(|q| after_creds + q) else {
        return Ok(Split {
            rest: s.to_owned(),
            ..Split::default()
        });
    };
    let mut out = Split::default();
    let mut kept = Vec::new();
    for param in s[q + 1..].split('&') {
        let taken = param.split_once('=').and_then(|(key, value)| {
            let key = percent_encoding::percent_decode_str(key)
                .decode_utf8()
                .ok()?;
            matches!(&*key, "sslmode" | "sslrootcert").then_some((key, value))
        });
        let Some((key, value)) = taken else {
            kept.push(param);
            continue;
        };
        let value = percent_encoding::percent_decode_str(value)
            .decode_utf8()
            .map_err(|_| format!("the value of {key} is not percent-encoded UTF-8"))?
            .into_owned();
        if key == "sslmode" {
            out.mode = Some(value);
        } else {
            out.root_cert = Some(value);
        }
    }
    out.rest = if kept.is_empty() {
        s[..q].to_owned()
    } else {
        format!("{}?{}", &s[..q], kept.join("&"))
    };
    Ok(out)
}

/// The `key=value` form, read as the client reads it: keys end at white space or `=`,
/// values are `'quoted'` or end at white space, and `\` escapes the next character.
fn split_key_values(s: &str) -> Split {
    let mut out = Split::default();
    let mut kept: Vec<&str> = Vec::new();
    let mut it = s.char_indices().peekable();
    let skip_ws = |it: &mut std::iter::Peekable<std::str::CharIndices<'_>>| {
        while it.next_if(|(_, c)| c.is_whitespace()).is_some() {}
    };
    loop {
        skip_ws(&mut it);
        let Some(&(start, _)) = it.peek() else { break };
        while it
            .next_if(|&(_, c)| !c.is_whitespace() && c != '=')
            .is_some()
        {}
        let key_end = it.peek().map_or(s.len(), |&(i, _)| i);
        skip_ws(&mut it);
        if it.next_if(|&(_, c)| c == '=').is_none() {
            // Not a parameter: the client's parser says what is wrong.
            return Split {
                rest: s.to_owned(),
                ..Split::default()
            };
        }
        skip_ws(&mut it);
        let mut value = String::new();
        let quoted = it.next_if(|&(_, c)| c == '\'').is_some();
        while let Some((_, c)) =
            it.next_if(|&(_, c)| !(if quoted { c == '\'' } else { c.is_whitespace() }))
        {
            if c == '\\' {
                if let Some((_, escaped)) = it.next() {
                    value.push(escaped);
                }
            } else {
                value.push(c);
            }
        }
        if quoted && it.next_if(|&(_, c)| c == '\'').is_none() {
            return Split {
                rest: s.to_owned(),
                ..Split::default()
            };
        }
        let end = it.peek().map_or(s.len(), |&(i, _)| i);
        match &s[start..key_end] {
            "sslmode" => out.mode = Some(value),
            "sslrootcert" => out.root_cert = Some(value),
            _ => kept.push(&s[start..end]),
        }
    }
    out.rest = kept.join(" ");
    out
}

/// Where the roots that check a server's certificate come from.
#[derive(Clone, Debug)]
enum Roots {
    /// Nothing is checked.
    None,
    /// A PEM file (`sslrootcert`).
    File(PathBuf),
    /// The platform's store (no `sslrootcert`, or `sslrootcert=system`).
    Platform,
}

/// How one database is reached: the mode for the client, and the connector (none when
/// `sslmode=disable`).
#[derive(Clone)]
pub(crate) struct Tls {
    /// `sslmode` as the client knows it.
    pub(crate) ssl_mode: SslMode,
    /// The connector, when the mode may encrypt.
    pub(crate) connector: Option<MakeRustlsConnect>,
    /// What messages say about the mode and its roots.
    described: String,
}

impl Tls {
    /// The connector for `mode` and `root_cert` (as [`split`] found them), or an error
    /// naming the unknown mode or the root certificate file that cannot be used.
    pub(crate) fn new(mode: Option<&str>, root_cert: Option<&str>) -> Result<Self, String> {
        let system = root_cert == Some("system");
        let mode = match mode {
            None if system => "verify-full",
            None => "prefer",
            Some(m) => m,
        };
        if system && mode != "verify-full" {
            return Err(format!(
                "sslmode \"{mode}\" may not be used with sslrootcert=system (use \"verify-full\")"
            ));
        }
        let roots = match (mode, root_cert) {
            ("disable", _) => Roots::None,
            (_, Some("system")) => Roots::Platform,
            (_, Some(path)) => Roots::File(PathBuf::from(path)),
            ("verify-ca" | "verify-full", None) => Roots::Platform,
            (_, None) => Roots::None,
        };
        // The client's mode, and whether the certificate must name the host.
        let (ssl_mode, check_name) = match mode {
            "disable" => (SslMode::Disable, false),
            "prefer" => (SslMode::Prefer, false),
            "require" | "verify-ca" => (SslMode::Require, false),
            "verify-full" => (SslMode::Require, true),
            "allow" => {
                return Err(format!("sslmode \"allow\" is not supported (use {MODES})"));
            }
            other => return Err(format!("unknown sslmode \"{other}\" (use {MODES})")),
        };
        let described = match &roots {
            Roots::None => format!("sslmode={mode}"),
            Roots::File(p) => format!("sslmode={mode}, root certificates from {}", p.display()),
            Roots::Platform => format!("sslmode={mode}, the platform's root certificates"),
        };
        if ssl_mode == SslMode::Disable {
            return Ok(Tls {
                ssl_mode,
                connector: None,
                described,
            });
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier: Arc<dyn ServerCertVerifier> = match &roots {
            Roots::None => Arc::new(AnyCertificate(provider.signature_verification_algorithms)),
            roots => {
                let store = match roots {
                    Roots::File(path) => read_roots(path)?,
                    _ => platform_roots()?,
                };
                let full = WebPkiServerVerifier::builder_with_provider(
                    Arc::new(store),
                    Arc::clone(&provider),
                )
                .build()
                .map_err(|e| format!("cannot use the root certificates ({described}): {e}"))?;
                if check_name {
                    full
                } else {
                    Arc::new(ChainOnly(full))
                }
            }
        };
        let config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("cannot set up TLS: {e}"))?
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth();
        Ok(Tls {
            ssl_mode,
            connector: Some(MakeRustlsConnect::new(config)),
            described,
        })
    }

    /// The mode and where its roots come from, for messages:
    /// `sslmode=verify-full, root certificates from /etc/memtape/ca.pem`.
    pub(crate) fn described(&self) -> &str {
        &self.described
    }
}

/// The root certificates in the PEM file at `path`, or an error naming it.
fn read_roots(path: &Path) -> Result<RootCertStore, String> {
    let shown = path.display();
    let pem = std::fs::read(path)
        .map_err(|e| format!("cannot read the root certificate file {shown} (sslrootcert): {e}"))?;
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.map_err(|e| {
            format!("the root certificate file {shown} (sslrootcert) is not valid PEM: {e}")
        })?;
        roots.add(cert).map_err(|e| {
            format!("the root certificate file {shown} (sslrootcert) holds a certificate that cannot be used: {e}")
        })?;
    }
    if roots.is_empty() {
        return Err(format!(
            "the root certificate file {shown} (sslrootcert) holds no PEM certificate"
        ));
    }
    Ok(roots)
}

/// The platform's root certificates (the system's OpenSSL store: `SSL_CERT_FILE`,
/// `SSL_CERT_DIR`, or the distribution's bundle).
fn platform_roots() -> Result<RootCertStore, String> {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = RootCertStore::empty();
    roots.add_parsable_certificates(found.certs);
    if roots.is_empty() {
        let why = found
            .errors
            .first()
            .map_or(String::new(), |e| format!(" ({e})"));
        return Err(format!(
            "no root certificates in the platform's store{why}: name a PEM file with sslrootcert=PATH"
        ));
    }
    Ok(roots)
}

/// `prefer` and `require` without roots: any certificate (libpq checks nothing either),
/// though the handshake's signatures are still checked against the key it presents.
#[derive(Debug)]
struct AnyCertificate(WebPkiSupportedAlgorithms);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_schemes()
    }
}

/// `verify-ca`: the chain is checked against the roots, the host name is not. The full
/// check runs and only its verdict on the name is set aside (webpki checks the chain
/// before the name, so a certificate refused for its name has a good chain).
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            verdict => verdict,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// The certificate error in `e`'s causes, when the handshake failed because this side
/// refused the server's certificate.
pub(crate) fn refused_certificate(e: &postgres::Error) -> Option<&rustls::Error> {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(c) = cause {
        // An io::Error's own source skips the error it wraps: look inside it.
        let inner = c
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            .map(|i| i as &(dyn std::error::Error + 'static));
        for candidate in [Some(c), inner].into_iter().flatten() {
            if let Some(r @ rustls::Error::InvalidCertificate(_)) =
                candidate.downcast_ref::<rustls::Error>()
            {
                return Some(r);
            }
        }
        cause = c.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taken(s: &str) -> (String, Option<String>, Option<String>) {
        let out = split(s).unwrap();
        (out.rest, out.mode, out.root_cert)
    }

    fn some(s: &str) -> Option<String> {
        Some(s.to_owned())
    }

    #[test]
    fn a_url_without_tls_options_is_left_whole() {
        for url in [
            "postgres://u:p@h:5432/db",
            "postgresql://h/db?application_name=x",
            "postgres://u@h",
        ] {
            assert_eq!(taken(url), (url.to_owned(), None, None));
        }
    }

    #[test]
    fn the_options_come_out_of_a_url_query_and_the_rest_stays() {
        assert_eq!(
            taken("postgres://u:p@h:5432/db?sslmode=verify-full&sslrootcert=/etc/ca.pem"),
            (
                "postgres://u:p@h:5432/db".to_owned(),
                some("verify-full"),
                some("/etc/ca.pem")
            )
        );
        assert_eq!(
            taken("postgres://u@h/db?application_name=a&sslmode=require&connect_timeout=3"),
            (
                "postgres://u@h/db?application_name=a&connect_timeout=3".to_owned(),
                some("require"),
                None
            )
        );
        // The last one counts, as in libpq.
        assert_eq!(
            taken("postgres://h/db?sslmode=disable&sslmode=verify-ca").1,
            some("verify-ca")
        );
    }

    #[test]
    fn url_values_and_keys_are_percent_decoded() {
        assert_eq!(
            taken(
                "postgres://h/db?sslrootcert=%2Ftmp%2Fmy%20certs%2Fca%26b.pem&ssl%6dode=verify%2Dca"
            ),
            (
                "postgres://h/db".to_owned(),
                some("verify-ca"),
                some("/tmp/my certs/ca&b.pem")
            )
        );
        // `+` is a plus, not a space, to libpq and to the client.
        assert_eq!(
            taken("postgres://h/db?sslrootcert=/a+b.pem").2,
            some("/a+b.pem")
        );
        let bad = split("postgres://h/db?sslrootcert=%FF%FE").unwrap_err();
        assert!(bad.contains("sslrootcert"), "{bad}");
    }

    #[test]
    fn a_question_mark_or_options_in_the_password_are_not_the_query() {
        // The client reads the credentials up to the first `@`.
        assert_eq!(
            taken("postgres://u:pa?ss&sslmode=disable@h/db?sslmode=require"),
            (
                "postgres://u:pa?ss&sslmode=disable@h/db".to_owned(),
                some("require"),
                None
            )
        );
    }

    #[test]
    fn the_options_come_out_of_a_key_value_string() {
        assert_eq!(
            taken("host=h port=5432 sslmode=verify-full sslrootcert=/etc/ca.pem dbname=db"),
            (
                "host=h port=5432 dbname=db".to_owned(),
                some("verify-full"),
                some("/etc/ca.pem")
            )
        );
        assert_eq!(
            taken(
                "  host = h  sslrootcert = '/my certs/it\\'s.pem'  password='a b\\\\c' sslmode =require"
            ),
            (
                "host = h password='a b\\\\c'".to_owned(),
                some("require"),
                some("/my certs/it's.pem")
            )
        );
        assert_eq!(
            taken("sslrootcert=/a\\ b.pem user=u"),
            ("user=u".to_owned(), None, some("/a b.pem"))
        );
    }

    #[test]
    fn a_string_that_does_not_parse_is_left_for_the_client_to_refuse() {
        for s in [
            "host=h sslmode",
            "host='h sslmode=require",
            "host h sslmode=require",
        ] {
            assert_eq!(taken(s), (s.to_owned(), None, None), "{s}");
        }
    }

    #[test]
    fn what_is_left_still_parses_as_the_client_would() {
        let rest = split("host=h user=u password='se cret' sslmode=verify-full dbname=d")
            .unwrap()
            .rest;
        let config: postgres::Config = rest.parse().unwrap();
        assert_eq!(config.get_password(), Some(&b"se cret"[..]));
        assert_eq!(config.get_dbname(), Some("d"));
    }

    #[test]
    fn modes_map_to_the_client_and_unknown_ones_are_named() {
        let mode = |m: Option<&str>| Tls::new(m, None).unwrap().ssl_mode;
        assert_eq!(mode(None), SslMode::Prefer);
        assert_eq!(mode(Some("disable")), SslMode::Disable);
        assert_eq!(mode(Some("prefer")), SslMode::Prefer);
        assert_eq!(mode(Some("require")), SslMode::Require);
        assert!(Tls::new(Some("disable"), None).unwrap().connector.is_none());
        for bad in ["verify_full", "VERIFY-FULL", "allow", ""] {
            let err = Tls::new(Some(bad), None).err().unwrap();
            assert!(err.contains(&format!("\"{bad}\"")), "{err}");
            assert!(err.contains("verify-full"), "{err}");
        }
    }

    #[test]
    fn a_root_certificate_file_that_cannot_be_used_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("no-such-ca.pem");
        let garbage = dir.path().join("garbage.pem");
        std::fs::write(&garbage, "not a certificate\n").unwrap();
        let broken = dir.path().join("broken.pem");
        std::fs::write(
            &broken,
            "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        for (path, says) in [
            (&missing, "cannot read"),
            (&garbage, "no PEM certificate"),
            (&broken, "cannot be used"),
        ] {
            for mode in ["require", "verify-ca", "verify-full"] {
                let err = Tls::new(Some(mode), path.to_str()).err().unwrap();
                assert!(err.contains(&path.display().to_string()), "{err}");
                assert!(err.contains(says), "{err}");
            }
        }
        // disable never reads it.
        assert!(Tls::new(Some("disable"), missing.to_str()).is_ok());
    }

    #[test]
    fn sslrootcert_system_wants_verify_full_as_in_libpq() {
        let err = Tls::new(Some("require"), Some("system")).err().unwrap();
        assert!(err.contains("verify-full"), "{err}");
        // Without a mode it means verify-full, on the platform's roots.
        let tls = Tls::new(None, Some("system")).unwrap();
        assert_eq!(tls.ssl_mode, SslMode::Require);
        assert_eq!(
            tls.described(),
            "sslmode=verify-full, the platform's root certificates"
        );
    }
}
