//! Slow clients (slowloris) on a real server: a client that dribbles its headers, one that
//! dribbles its body, and one that connects and sends nothing are each cut off by the
//! server's timeouts, nothing half-sent is stored, and other clients are served meanwhile.
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::common::Server;
use memtape_server::Limits;
use serde_json::json;

fn limits() -> Limits {
    Limits {
        header_timeout: Duration::from_secs(1),
        request_timeout: Duration::from_secs(1),
        ..Limits::default()
    }
}

/// Sends `first`, then `drip` one piece every 200 ms for up to `for_at_most`, until the
/// server closes the connection; returns how long that took and what the server sent.
fn dribble(s: &Server, first: &str, drip: &str, for_at_most: Duration) -> (Duration, String) {
    let mut stream = TcpStream::connect(s.addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let start = Instant::now();
    stream.write_all(first.as_bytes()).unwrap();
    let mut answer = Vec::new();
    while start.elapsed() < for_at_most {
        let mut buf = [0u8; 4096];
        match stream.read(&mut buf) {
            Ok(0) => return (start.elapsed(), String::from_utf8_lossy(&answer).into()),
            Ok(n) => answer.extend_from_slice(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return (start.elapsed(), String::from_utf8_lossy(&answer).into()),
        }
        if !drip.is_empty() && stream.write_all(drip.as_bytes()).is_err() {
            // The server closed its side; read what it said.
            let _ = stream.read_to_end(&mut answer);
            return (start.elapsed(), String::from_utf8_lossy(&answer).into());
        }
    }
    panic!(
        "the server kept a slow connection open for {for_at_most:?}; it sent {:?}",
        String::from_utf8_lossy(&answer)
    );
}

#[test]
fn a_client_dribbling_its_headers_is_disconnected() {
    let s = Server::start_with(limits());
    let (took, _) = dribble(
        &s,
        "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n",
        "X-Slow: 1\r\n",
        Duration::from_secs(10),
    );
    assert!(took < Duration::from_secs(5), "cut off after {took:?}");
    assert_eq!(s.get("/healthz").0, 200);
}

#[test]
fn a_silent_connection_is_closed() {
    let s = Server::start_with(limits());
    let (took, answer) = dribble(&s, "", "", Duration::from_secs(10));
    assert!(took < Duration::from_secs(5), "closed after {took:?}");
    assert!(!answer.contains("200 OK"), "{answer}");
}

#[test]
fn a_client_dribbling_its_body_gets_408_and_nothing_is_stored() {
    let s = Server::start_with(limits());
    let body = json!({"role": "user", "content": "half a message"}).to_string();
    let head = format!(
        "POST /v1/sessions/slow/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{}",
        body.len(),
        &body[..5]
    );
    let (took, answer) = dribble(&s, &head, " ", Duration::from_secs(10));
    assert!(took < Duration::from_secs(5), "cut off after {took:?}");
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("connection: close"), "{answer}");
    let (status, listed) = s.get("/v1/sessions");
    assert_eq!(status, 200, "{listed}");
    assert_eq!(listed["sessions"], json!([]), "{listed}");
}

#[test]
fn a_body_over_the_limit_closes_its_connection_and_a_keep_alive_client_goes_on() {
    let s = Server::start_with(Limits {
        body_bytes: 1024,
        ..limits()
    });
    // The body is refused unread, so the answer says the connection ends with it.
    let head = "POST /v1/sessions/big/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 4096\r\n\r\n{\"role\"";
    let (took, answer) = dribble(&s, head, "", Duration::from_secs(10));
    assert!(took < Duration::from_secs(5), "kept open for {took:?}");
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains("connection: close"), "{answer}");
    // A pooling client sees that and never sends its next request down the closed socket.
    let big = json!({"role": "user", "content": "y".repeat(2048)});
    let small = json!({"role": "user", "content": "fits"});
    for i in 0..100 {
        assert_eq!(
            s.post("/v1/sessions/big/messages", &big).0,
            413,
            "round {i}"
        );
        assert_eq!(
            s.post("/v1/sessions/big/messages", &small).0,
            201,
            "round {i}"
        );
    }
    let (_, page) = s.get("/v1/sessions/big/entries?limit=500");
    assert_eq!(
        page["entries"].as_array().map(Vec::len),
        Some(100),
        "{page}"
    );
}

#[test]
fn many_slow_clients_do_not_keep_others_waiting() {
    let s = Server::start_with(limits());
    let slow: Vec<TcpStream> = (0..64)
        .map(|_| {
            let mut c = TcpStream::connect(s.addr).unwrap();
            c.write_all(b"GET /healthz HTTP/1.1\r\n").unwrap();
            c
        })
        .collect();
    let start = Instant::now();
    let (status, body) = s.post(
        "/v1/sessions/fast/messages",
        &json!({"role": "user", "content": "still served"}),
    );
    assert_eq!(status, 201, "{body}");
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
    drop(slow);
}
