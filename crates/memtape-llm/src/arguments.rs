//! Tool-call arguments as providers really send them, normalised to a JSON object.
//!
//! OpenAI's API sends a JSON string; Ollama's native API (and some llama.cpp builds) an
//! object; some models a string that holds a JSON string (double-encoded); nanobot also
//! takes a list whose first element is an object. An empty string or `null` means no
//! arguments. Anything else — a number, a string that is not JSON, JSON that is not an
//! object, truncated JSON — is an [`Error::BadArguments`] naming the tool, never a panic.

use serde_json::{Map, Value};

use crate::error::{Error, Result};

/// How many times a string may hold another encoded string: once is the normal case,
/// twice is a double-encoded string.
const MAX_DECODES: usize = 2;

/// The arguments `raw` of a call to `tool`, as an object.
pub fn parse(tool: &str, raw: &Value) -> Result<Map<String, Value>> {
    let bad = |detail: String| Error::BadArguments {
        tool: tool.to_owned(),
        detail,
    };
    let mut value = raw.clone();
    let mut decodes = 0;
    loop {
        match value {
            Value::Object(map) => return Ok(map),
            Value::Null => return Ok(Map::new()),
            Value::String(s) if s.trim().is_empty() && decodes == 0 => return Ok(Map::new()),
            Value::String(s) => {
                if decodes == MAX_DECODES {
                    return Err(bad("a string encoded more than twice".into()));
                }
                decodes += 1;
                value = serde_json::from_str(&s).map_err(|e| {
                    bad(format!(
                        "not valid JSON ({e}): {}",
                        s.chars().take(80).collect::<String>()
                    ))
                })?;
            }
            Value::Array(items) => {
                return match items.into_iter().next() {
                    Some(Value::Object(map)) => Ok(map),
                    _ => Err(bad("a list whose first element is not an object".into())),
                };
            }
            Value::Bool(_) | Value::Number(_) => {
                return Err(bad(format!("expected an object, got {value}")));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;

    #[test]
    fn objects_strings_and_double_encoded_strings_give_the_same_arguments() {
        let want =
            json!({"history_entry": "[2026-01-01 10:00] Met Ada", "memory_update": "# Memory"});
        let once = Value::String(want.to_string());
        let twice = Value::String(once.to_string());
        for raw in [want.clone(), once, twice, json!([want.clone()])] {
            assert_eq!(
                Value::Object(parse("save_memory", &raw).unwrap()),
                want,
                "{raw}"
            );
        }
    }

    #[test]
    fn no_arguments_is_an_empty_object() {
        for raw in [json!(""), json!("  "), Value::Null, json!("{}")] {
            assert!(parse("t", &raw).unwrap().is_empty(), "{raw}");
        }
    }

    #[test]
    fn anything_else_is_a_typed_error_naming_the_tool() {
        let triple = Value::String(Value::String(json!({"a": 1}).to_string()).to_string());
        for raw in [
            json!(3),
            json!(true),
            json!("not json"),
            json!("{\"history_entry\": \"cut off"),
            json!("[1, 2]"),
            json!([]),
            json!(["x"]),
            json!("\"\""),
            Value::String(triple.to_string()),
        ] {
            match parse("save_memory", &raw) {
                Err(Error::BadArguments { tool, .. }) => assert_eq!(tool, "save_memory"),
                other => panic!("{raw}: {other:?}"),
            }
        }
    }

    proptest::proptest! {
        /// Whatever a model sends as arguments, the answer is an object or a typed error.
        #[test]
        fn any_string_gives_an_object_or_a_typed_error(s in ".{0,200}", wrap in 0usize..3) {
            let mut raw = Value::String(s);
            for _ in 0..wrap {
                raw = Value::String(raw.to_string());
            }
            match parse("t", &raw) {
                Ok(_) | Err(Error::BadArguments { .. }) => {}
                Err(other) => panic!("{other:?}"),
            }
        }
    }
}
